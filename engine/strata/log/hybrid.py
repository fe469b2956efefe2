"""Hybrid read: the files of snapshot N, then the log from the offsets N recorded.

    reader = HybridReader(table)              # N = the latest snapshot (or snapshot_id=...)
    rows = reader.read_snapshot()             # snapshot N's rows, _ROW_KIND '+I'
    changes = reader.read_until()             # committed changes after N, up to the latest snapshot
    more = reader.poll(timeout=1.0)           # whatever arrived since (streaming)

The consumer reads `read_committed` and starts each partition (= bucket) at the offset snapshot N
recorded in its `log.offsets` property, i.e. just after the last record N's files contain: no gap
and no duplicate at the switch. If Kafka's retention has dropped records the reader needs (the
partition's low watermark is past N's offset), it falls back to snapshot-based incremental
reading (`Table.read_incremental`), logs a warning and counts it in
`strata.log.metrics.fallback_count()`.

A commit whose log transaction was lost is re-produced later (see `strata.log.kafka`), after the
offsets its snapshot recorded, with the header `strata.repair`: the reader skips such records of
snapshots its start snapshot includes, and delivers the others once, possibly a call later than
the snapshot's own offsets would place them.
"""

from __future__ import annotations

import logging
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.log import metrics
from strata.log.kafka import LogSystemError, snapshot_log_offsets
from strata.log.options import REPAIR_HEADER, log_options
from strata.log.serde import decode_values, with_row_kinds
from strata.store import FileStore, HasStore, store_of
from strata.table.read import read_arrow, read_changes

if TYPE_CHECKING:
    from strata.snapshot.snapshot import Snapshot

log = logging.getLogger(__name__)
ROW_KIND = "_ROW_KIND"


class LogOffsetsLostWarning(UserWarning):
    """Kafka no longer holds the offsets a hybrid read needs; it reads snapshots instead."""


def lost_offsets(consumer: Any, topic: str, needed: Mapping[int, int]) -> list[tuple[int, int, int]]:
    """(partition, needed offset, earliest offset) of the partitions whose records from the needed
    offset on were dropped by Kafka's retention (the partition's low watermark is past it)."""
    from confluent_kafka import TopicPartition

    lost = []
    for p, start in sorted(needed.items()):
        low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if low > start:
            lost.append((p, start, low))
    return lost


def report_fallback(table: str, why: str, stacklevel: int = 2) -> None:
    """Count, log and warn that a hybrid read of `table` reads snapshots instead of the log."""
    metrics.inc(metrics.HYBRID_FALLBACKS)
    metrics.engine("log_hybrid_fallback", table)
    message = f"hybrid read of table {table} falls back to snapshot-based reading: {why}"
    log.warning(message)
    warnings.warn(message, LogOffsetsLostWarning, stacklevel=stacklevel)


def repair_of_snapshot_up_to(message: Any, snapshot_id: int) -> bool:
    """Is `message` a re-produced record (header strata.repair) of a snapshot <= `snapshot_id`?
    A reader that took that snapshot from the files must skip it."""
    for name, value in message.headers() or ():
        if name == REPAIR_HEADER:
            return int(value.split(b" ", 1)[0]) <= snapshot_id
    return False


class HybridReader:
    def __init__(self, table: FileStore | HasStore, snapshot_id: int | None = None,
                 columns: Sequence[str] | None = None, consumer_config: Mapping[str, Any] | None = None):
        self.table = table = store_of(table)
        self.opts = log_options(table)
        # snapshot_id 0: before the first snapshot (the log from its beginning)
        self.snapshot: Snapshot | None = (None if snapshot_id == 0
                                          else table.snapshot_manager.snapshot(snapshot_id) if snapshot_id is not None
                                          else table.snapshot_manager.latest())
        self.columns = list(columns) if columns is not None else table.schema.field_names
        self.start_offsets = snapshot_log_offsets(self.snapshot)
        self.consumer_config = dict(consumer_config or {})
        self.mode: str | None = None  # "kafka" or "snapshots", decided when the log is first read
        self.positions: dict[int, int] = {}  # next offset to deliver, per partition
        self._consumer: Any = None
        self._pending: list[Any] = []  # messages consumed past a read_until boundary
        self._last_snapshot = self.snapshot.id if self.snapshot is not None else 0
        self._schema = pa.schema([table.schema.field(n).to_arrow() for n in table.schema.field_names])

    # -- the snapshot part ---------------------------------------------------------------------
    def read_snapshot(self) -> pa.Table:
        if self.snapshot is None:
            data = pa.schema([self.table.schema.field(n).to_arrow() for n in self.columns]).empty_table()
        else:
            data = read_arrow(self.table, self.columns, snapshot_id=self.snapshot.id)
        return data.add_column(0, pa.field(ROW_KIND, pa.string(), nullable=False),
                               pa.array(["+I"] * data.num_rows, pa.string()))

    # -- the log part -------------------------------------------------------------------------------
    def open(self) -> None:
        """Connect to the log now (the first read does otherwise); `fell_back` then says whether
        Kafka still holds the records from the start snapshot's offsets."""
        self._open()

    def _open(self) -> None:
        if self.mode is not None:
            return
        from confluent_kafka import Consumer, TopicPartition

        config = {"bootstrap.servers": self.opts.bootstrap, "group.id": f"strata-hybrid-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "auto.offset.reset": "error", "log_level": 3, **self.consumer_config}
        consumer = Consumer(config)
        metadata = consumer.list_topics(self.opts.topic, timeout=30).topics.get(self.opts.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            consumer.close()
            raise LogSystemError(f"log topic {self.opts.topic!r} of table {self.opts.table} is not readable")
        partitions = sorted(metadata.partitions)
        lost = lost_offsets(consumer, self.opts.topic, {p: self.start_offsets.get(p, 0) for p in partitions})
        assignment = []
        for p in partitions:
            start = self.start_offsets.get(p, 0)
            assignment.append(TopicPartition(self.opts.topic, p, start))
            self.positions[p] = start
        if lost:
            consumer.close()
            self._fall_back(f"log topic {self.opts.topic!r} no longer holds the offsets snapshot "
                            f"{self._last_snapshot} recorded (partition, needed, earliest): {lost}")
            return
        consumer.assign(assignment)
        self._consumer = consumer
        self.mode = "kafka"

    def _fall_back(self, why: str) -> None:
        self.mode = "snapshots"
        report_fallback(self.opts.table, why, stacklevel=4)

    @property
    def fell_back(self) -> bool:
        return self.mode == "snapshots"

    def poll(self, timeout: float = 1.0, max_records: int = 100_000) -> pa.Table:
        """Committed changes that arrived since the last call (possibly none), with _ROW_KIND."""
        self._open()
        if self.mode == "snapshots":
            latest = self.table.snapshot_manager.latest_id() or 0
            return self._incremental(latest)
        messages = self._pending[:max_records]
        self._pending = self._pending[max_records:]
        if len(messages) < max_records:
            messages += self._consume(max_records - len(messages), timeout)
        for m in messages:
            self.positions[m.partition()] = m.offset() + 1
        return self._decode(messages)

    def read_until(self, snapshot_id: int | None = None, timeout: float = 60.0) -> pa.Table:
        """Every committed change after the start snapshot up to snapshot `snapshot_id` (default:
        the latest), exactly: records past that snapshot's offsets wait for the next call."""
        self._open()
        target_snapshot = (self.table.snapshot_manager.snapshot(snapshot_id) if snapshot_id is not None
                           else self.table.snapshot_manager.latest())
        if target_snapshot is None:
            return self._decode([])
        if self.mode == "snapshots":
            return self._incremental(target_snapshot.id)
        targets = snapshot_log_offsets(target_snapshot)
        taken: list[Any] = []
        deadline = time.monotonic() + timeout
        while True:
            keep: list[Any] = []
            later: list[Any] = []
            for m in self._pending:
                (keep if m.offset() < targets.get(m.partition(), 0) else later).append(m)
            self._pending = later
            for m in keep:
                self.positions[m.partition()] = m.offset() + 1
            taken += keep
            # a partition is complete once its position passed the target, or a later record was
            # seen (the records before the target are then all delivered: some may be aborted)
            beyond = {m.partition() for m in later}
            if all(self.positions.get(p, 0) >= off or p in beyond for p, off in targets.items()):
                break
            if time.monotonic() > deadline:
                raise LogSystemError(f"hybrid read of {self.opts.table}: log offsets {self.positions} did not "
                                     f"reach snapshot {target_snapshot.id}'s {targets} within {timeout}s")
            self._pending += self._consume(10_000, 0.5)
        self._last_snapshot = max(self._last_snapshot, target_snapshot.id)
        return self._decode(taken)

    def read(self, timeout: float = 60.0) -> pa.Table:
        """Snapshot N's rows followed by the changes up to the latest snapshot."""
        return pa.concat_tables([self.read_snapshot(), self.read_until(timeout=timeout)])

    def _consume(self, n: int, timeout: float) -> list[Any]:
        from confluent_kafka import KafkaError

        # what is fetched already; else wait for the first record only (a batch waits out its
        # whole timeout when fewer records come), then take what arrived with it
        messages = self._consumer.consume(num_messages=n, timeout=0) if n > 0 else []
        if not messages and n > 0 and timeout > 0:
            messages = self._consumer.consume(num_messages=1, timeout=timeout)
            if messages and n > 1:
                messages += self._consumer.consume(num_messages=n - 1, timeout=0)
        out = []
        for m in messages:
            err = m.error()
            if err is None:
                out.append(m)
            elif err.code() != KafkaError._PARTITION_EOF:
                # e.g. offsets dropped by retention while reading (auto.offset.reset=error)
                raise LogSystemError(f"hybrid read of {self.opts.table} from {self.opts.topic!r}: {err}")
        return out

    def _in_start_snapshot(self, message: Any) -> bool:
        """A re-produced record (strata.repair) of a snapshot the start snapshot's files include."""
        return self.snapshot is not None and repair_of_snapshot_up_to(message, self.snapshot.id)

    def _incremental(self, end: int) -> pa.Table:
        if end <= self._last_snapshot:
            return self._empty()
        changes = read_changes(self.table, self._last_snapshot, end, self.columns)
        self._last_snapshot = end
        return changes

    def _decode(self, messages: list[Any]) -> pa.Table:
        messages = [m for m in messages if not self._in_start_snapshot(m)]
        if not messages:
            return self._empty()
        rows, kinds = decode_values([m.value() for m in messages], self._schema)
        return with_row_kinds(rows.select(self.columns), kinds, ROW_KIND)

    def _empty(self) -> pa.Table:
        fields = [pa.field(ROW_KIND, pa.string(), nullable=False),
                  *(self.table.schema.field(n).to_arrow().with_nullable(True) for n in self.columns)]
        return pa.schema(fields).empty_table()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __enter__(self) -> HybridReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
