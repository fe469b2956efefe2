"""The log side of ``streaming-read-mode=log``: Kafka ranges for the Spark streaming source.

A micro-batch (start, end] of a stream over a table with ``log.system=kafka`` reads, per Kafka
partition (= bucket), the records between the log offsets snapshot `start` recorded and those
snapshot `end` recorded (``log.offsets``, see ``strata.log.kafka``): exactly the changes of the
snapshots start+1 .. end, so offsets stay aligned with snapshots and the switch from the files of
the base snapshot to the log has no gap and no duplicate. Records are read ``read_committed`` and
decoded with ``strata.log.serde``; re-produced records (``strata.repair``) of snapshots the query
took from the files are skipped, as in ``strata.log.hybrid``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.errors import SnapshotNotFoundError
from strata.log.hybrid import lost_offsets, repair_of_snapshot_up_to, report_fallback
from strata.log.kafka import LogSystemError, snapshot_log_offsets
from strata.log.options import LogOptions, log_options
from strata.log.serde import decode_values, with_row_kinds
from strata.spark.types import ROW_KIND_COLUMN

if TYPE_CHECKING:
    from strata.table.table import Table

READ_TIMEOUT_SECONDS = 120.0  # a task fails when its range yields nothing for this long
DECODE_CHUNK = 10_000  # records decoded (and handed to Spark) at a time
LogOffsets = dict[str, int]  # JSON form of {partition: next offset}


def consumer_config(opts: LogOptions) -> dict[str, Any]:
    """Assign-only, read_committed, never commits; a dropped offset is an error, not a reset."""
    return {"bootstrap.servers": opts.bootstrap, "group.id": f"strata-spark-log-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed", "auto.offset.reset": "error",
            "log_level": 3}


def snapshot_offsets(table: Table, snapshot_id: int) -> LogOffsets | None:
    """The log offsets snapshot `snapshot_id` recorded ({} before the first snapshot), None when
    the snapshot is gone (expired)."""
    if snapshot_id <= 0:
        return {}
    try:
        snapshot = table.snapshot_manager.snapshot(snapshot_id)
    except (SnapshotNotFoundError, FileNotFoundError):
        return None
    return {str(p): o for p, o in snapshot_log_offsets(snapshot).items()}


def end_offsets(table: Table, snapshot_id: int, start: Mapping[str, int]) -> LogOffsets:
    """Snapshot `snapshot_id`'s offsets; a partition never moves back (nor is forgotten)."""
    recorded = snapshot_offsets(table, snapshot_id) or {}
    merged = dict(start)
    for p, offset in recorded.items():
        merged[p] = max(offset, merged.get(p, 0))
    return merged


class LogWatch:
    """The driver's check that Kafka still holds the records a stream needs (one consumer,
    reused across triggers)."""

    def __init__(self, table: Table):
        self.opts = log_options(table)
        self._consumer: Any = None

    def lost(self, needed: Mapping[str, int], only_these: bool = False) -> list[tuple[int, int, int]]:
        """Partitions whose records from the needed offset on are gone: every partition of the
        topic (a partition not in `needed` is needed from 0), or `only_these`."""
        from confluent_kafka import Consumer

        if self._consumer is None:
            self._consumer = Consumer(consumer_config(self.opts))
        metadata = self._consumer.list_topics(self.opts.topic, timeout=30).topics.get(self.opts.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise LogSystemError(f"log topic {self.opts.topic!r} of table {self.opts.table} is not readable")
        partitions = [int(p) for p in needed] if only_these else list(metadata.partitions)
        return lost_offsets(self._consumer, self.opts.topic, {p: int(needed.get(str(p), 0)) for p in partitions})

    def fall_back(self, lost: list[tuple[int, int, int]], snapshot_id: int) -> None:
        report_fallback(self.opts.table, f"log topic {self.opts.topic!r} no longer holds the offsets snapshot "
                                         f"{snapshot_id} recorded (partition, needed, earliest): {lost}")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def read_range(table: Table, columns: list[str], partition: int, start: int, end: int,
               files_up_to: int) -> Iterator[pa.Table]:
    """The committed records of one Kafka partition in [start, end), decoded, `_ROW_KIND` first;
    repairs of snapshots <= `files_up_to` (read from the files) are skipped."""
    from confluent_kafka import Consumer, TopicPartition

    opts = log_options(table)
    schema = pa.schema([table.schema.field(n).to_arrow() for n in table.schema.field_names])
    consumer = Consumer(consumer_config(opts))
    try:
        consumer.assign([TopicPartition(opts.topic, partition, start)])
        values: list[bytes] = []
        for message in _messages(consumer, opts.topic, partition, start, end):
            if not repair_of_snapshot_up_to(message, files_up_to):
                values.append(message.value())
            if len(values) >= DECODE_CHUNK:
                yield _decode(values, schema, columns)
                values = []
        if values:
            yield _decode(values, schema, columns)
    finally:
        consumer.close()


def _messages(consumer: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
    """Messages with offsets in [start, end); aborted records and transaction markers only move
    the consumer's position, so the position (not the last offset seen) says when to stop."""
    from confluent_kafka import KafkaError, TopicPartition

    position, progress = start, time.monotonic()
    while position < end:
        batch = consumer.consume(min(DECODE_CHUNK, end - position), timeout=1.0)
        for m in batch:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise LogSystemError(f"reading log topic {topic!r} partition {partition} at {position}: {err}")
            if m.offset() >= end:
                return
            position = m.offset() + 1
            yield m
        if batch:
            progress = time.monotonic()
            continue
        found = consumer.position([TopicPartition(topic, partition)])
        if found and found[0].offset is not None and found[0].offset >= 0:
            position = max(position, int(found[0].offset))
        if position < end and time.monotonic() - progress > READ_TIMEOUT_SECONDS:
            raise LogSystemError(f"log topic {topic!r} partition {partition} yielded nothing for "
                                 f"{READ_TIMEOUT_SECONDS:.0f}s at offset {position} (the batch reads up to {end})")


def _decode(values: list[bytes], schema: pa.Schema, columns: list[str]) -> pa.Table:
    rows, kinds = decode_values(values, schema)
    return with_row_kinds(rows.select(columns), kinds, ROW_KIND_COLUMN)
