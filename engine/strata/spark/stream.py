"""``spark.readStream.format("strata")``: a table's changes, snapshot by snapshot.

Offsets are ``{"snapshot": N}``: every change up to and including snapshot N has been planned.
A micro-batch (start, end] reads the changes of the snapshots start+1 .. end, in order: the
changelog files with a changelog producer, else what APPEND commits wrote (COMPACT and
OVERWRITE snapshots carry no changes then, as in Paimon's streaming read). When the query
starts with a full scan (``latest-full``, ``from-snapshot-full``), the offsets also carry
``"base": S``: position S then stands for the whole content of snapshot S instead of its delta.

Options:
    scan.mode              latest-full (default; also 'default', 'full'): snapshot S = the latest at
                           start, read in full, then its successors' changes;
                           latest (also 'latest-delta'): only changes committed after the start;
                           from-snapshot (+ scan.snapshot-id K): changes of K, K+1, ...;
                           from-snapshot-full (+ scan.snapshot-id K): snapshot K in full, then changes;
                           from-timestamp (+ scan.timestamp-millis T): changes of the snapshots
                           committed at or after T.
    include-row-kind       true: a `_ROW_KIND` column first (+I/-U/+U/-D); default false: only
                           +I and +U rows, without the column.
    consumer-id            progress is saved, when Spark commits a micro-batch, to
                           <table>/consumer/consumer-<id> as {"nextSnapshot": N} (Paimon's
                           format); a query started with that id and no checkpoint resumes there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from strata.errors import OptionError
from strata.scan.planner import DataSplit
from strata.spark.options import TableRef, get_int
from strata.spark.source import Projection
from strata.table.table import Table

_MODES = {"latest-full": "latest-full", "default": "latest-full", "full": "latest-full",
          "latest": "latest", "latest-delta": "latest", "from-snapshot": "from-snapshot",
          "from-snapshot-full": "from-snapshot-full", "from-timestamp": "from-timestamp"}


class ChangesPartition(InputPartition):
    """The splits one task reads: changes of snapshot `snapshot`, or (full) its whole content."""

    def __init__(self, snapshot: int, splits: list[DataSplit], full: bool) -> None:
        super().__init__(snapshot)
        self.snapshot = snapshot
        self.splits = splits
        self.full = full


def consumer_path(table: Table, consumer_id: str) -> str:
    return f"{table.path}/consumer/consumer-{consumer_id}"


def read_consumer(table: Table, consumer_id: str) -> int | None:
    """The consumer's next snapshot, or None if it has none yet."""
    try:
        data = table.file_io.read_bytes(consumer_path(table, consumer_id))
    except FileNotFoundError:
        return None
    return int(json.loads(data)["nextSnapshot"])


def write_consumer(table: Table, consumer_id: str, next_snapshot: int) -> None:
    table.file_io.write_bytes(consumer_path(table, consumer_id),
                              json.dumps({"nextSnapshot": next_snapshot}).encode())


class StrataStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Runs in one long-lived Python worker on the driver (initialOffset, latestOffset,
    partitions, commit); ``read`` runs on executors and uses only the pickled settings."""

    def __init__(self, ref: TableRef, settings: dict[str, str], schema: StructType):
        self.ref = ref
        self.settings = settings
        self.schema = schema
        mode = settings.get("scan.mode", "latest-full").lower()
        if mode not in _MODES:
            raise OptionError(f"scan.mode {mode!r} is not one of {sorted(set(_MODES))}")
        self.mode = _MODES[mode]
        self.consumer_id = settings.get("consumer-id")
        Projection(ref.load(), schema)  # unknown columns fail now, not in the first task
        self.available_now_end: int | None = None

    # -- offsets (driver) ------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        table = self.ref.load()
        manager = table.snapshot_manager
        latest = manager.latest_id() or 0
        if self.consumer_id:
            next_snapshot = read_consumer(table, self.consumer_id)
            if next_snapshot is not None:
                return {"snapshot": next_snapshot - 1}
        if self.mode == "latest-full":
            return {"snapshot": latest - 1, "base": latest} if latest else {"snapshot": 0}
        if self.mode == "latest":
            return {"snapshot": latest}
        if self.mode in ("from-snapshot", "from-snapshot-full"):
            start = get_int(self.settings, "scan.snapshot-id")
            if start is None or start < 1:
                raise OptionError(f"scan.mode={self.mode} needs scan.snapshot-id >= 1")
            if self.mode == "from-snapshot-full":
                return {"snapshot": start - 1, "base": start}
            return {"snapshot": start - 1}
        millis = get_int(self.settings, "scan.timestamp-millis")
        if millis is None:
            raise OptionError("scan.mode=from-timestamp needs scan.timestamp-millis")
        first = manager.earliest_at_or_after(millis)
        return {"snapshot": first.id - 1} if first is not None else {"snapshot": latest}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        table = self.ref.load()
        latest = table.snapshot_manager.latest_id() or 0
        if self.available_now_end is not None:
            latest = min(latest, self.available_now_end)
        start = start or {}
        end = max(latest, int(start.get("snapshot", 0)))
        return {**start, "snapshot": end}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_end = self.ref.load().snapshot_manager.latest_id() or 0

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        table = self.ref.load()
        first, last = int(start["snapshot"]) + 1, int(end["snapshot"])
        base = end.get("base")
        scan = table.new_scan()
        out: list[InputPartition] = []
        for sid in range(first, last + 1):
            if sid == base:
                splits = table.new_scan(snapshot_id=sid).plan().splits
                out.extend(ChangesPartition(sid, [s], True) for s in splits)
            else:
                out.extend(ChangesPartition(sid, [s], False) for s in scan.plan_changes(sid))
        return out

    def commit(self, end: dict) -> None:
        if self.consumer_id:
            write_consumer(self.ref.load(), self.consumer_id, int(end["snapshot"]) + 1)

    # -- executors ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangesPartition)
        table = self.ref.load()
        projection = Projection(table, self.schema)
        read = table.new_read(projection.columns)
        for split in partition.splits:
            for data in read.read_split(split):
                yield from projection.batches(data, split.row_kinds)
