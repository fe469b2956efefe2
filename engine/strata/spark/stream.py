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
    max-rows-per-trigger   admission control: a micro-batch takes whole snapshots until their
                           record counts reach this (at least one snapshot); Trigger.AvailableNow
                           then runs several batches up to the latest snapshot at its start.
    consumer-id            progress is saved to <table>/consumer/consumer-<id> as
                           {"nextSnapshot": N} (Paimon's format, ``Table.consumers``); a query
                           started with that id and no checkpoint resumes there, and snapshot
                           expiry keeps the snapshots it still needs.

When is consumer progress saved? Spark calls ``commit(end)`` for a micro-batch only when it
plans the *next* one, so a query's last batch would never be recorded. But Spark also plans a
micro-batch from ``start`` (``latestOffset(start)``) only after the batch that ended at ``start``
ran and was committed to the sink (micro-batches run one after the other; Trigger.AvailableNow
asks once more before it stops), so progress up to ``start`` is saved there as well. A batch
that was running when the query died is read again on resume (at least once); use a checkpoint
for exactly-once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from strata.errors import OptionError
from strata.scan.planner import DataSplit
from strata.spark.options import TableRef, get_int
from strata.spark.source import Projection
from strata.table.table import Table

CONSUMER_REFRESH_SECONDS = 60.0
_MODES = {"latest-full": "latest-full", "default": "latest-full", "full": "latest-full",
          "latest": "latest", "latest-delta": "latest", "from-snapshot": "from-snapshot",
          "from-snapshot-full": "from-snapshot-full", "from-timestamp": "from-timestamp"}


class ChangesPartition(InputPartition):
    """The splits one task reads in order: the changes of one bucket over several snapshots
    (the first may be the bucket's whole content in the base snapshot)."""

    def __init__(self, first_snapshot: int, splits: list[DataSplit]) -> None:
        super().__init__(first_snapshot)
        self.splits = splits


def _admit(table: Table, position: int, latest: int, base: int | None, max_rows: int) -> int:
    """The last snapshot of a batch after `position` whose records stay within `max_rows` (at
    least one snapshot); the base snapshot counts its whole content."""
    manager = table.snapshot_manager
    with_changelog = table.core.get("changelog-producer") != "none"
    rows = 0
    for sid in range(position + 1, latest + 1):
        snapshot = manager.snapshot(sid)
        if sid == base:
            rows += snapshot.total_record_count or 0
        elif with_changelog:
            rows += snapshot.changelog_record_count or 0
        elif snapshot.commit_kind == "APPEND":
            rows += snapshot.delta_record_count or 0
        if rows >= max_rows:
            return sid
    return latest


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
        self.max_rows = get_int(settings, "max-rows-per-trigger")
        if self.max_rows is not None and self.max_rows < 1:
            raise OptionError("max-rows-per-trigger must be at least 1")
        self.consumer_saved: int | None = None
        self.consumer_saved_at = 0.0
        self._driver_table: Table | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_driver_table"] = None  # executors load the table themselves
        return state

    def _table(self) -> Table:
        """The table for offsets and consumers, loaded once: latestOffset runs every trigger."""
        if self._driver_table is None:
            self._driver_table = self.ref.load()
        return self._driver_table

    # -- offsets (driver) ------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        table = self._table()
        manager = table.snapshot_manager
        latest = manager.latest_id() or 0
        if self.consumer_id:
            next_snapshot = table.consumers.consumer(self.consumer_id)
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

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows is not None else ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        table = self._table()
        start = start or {}
        position = int(start.get("snapshot", 0))
        base = start.get("base")
        if self.consumer_id and (base is None or position >= base):
            self._save_consumer(table, position + 1)  # everything up to `start` is committed
        latest = table.snapshot_manager.latest_id() or 0
        if self.available_now_end is not None:
            latest = min(latest, self.available_now_end)
        end = max(latest, position)
        if isinstance(limit, ReadMaxRows) and end > position:
            end = _admit(table, position, end, base, limit.max_rows)
        return {**start, "snapshot": end}

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_end = self._table().snapshot_manager.latest_id() or 0

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """One Spark partition per (partition, bucket) with changes, holding that bucket's splits
        in snapshot order: all changes of one key reach one task, in commit order, so a
        pipeline without a shuffle (e.g. a CDC mirror into another table) keeps their order."""
        table = self.ref.load()  # fresh: the schema may have evolved
        first, last = int(start["snapshot"]) + 1, int(end["snapshot"])
        base = end.get("base")
        scan = table.new_scan()
        groups: dict[tuple[bytes, int], list[DataSplit]] = {}
        for sid in range(first, last + 1):
            splits = table.new_scan(snapshot_id=sid).plan().splits if sid == base else scan.plan_changes(sid)
            for split in splits:
                groups.setdefault((split.partition, split.bucket), []).append(split)
        return [ChangesPartition(splits[0].snapshot_id, splits) for splits in groups.values()]

    def commit(self, end: dict) -> None:
        if self.consumer_id:
            self._save_consumer(self._table(), int(end["snapshot"]) + 1)

    def _save_consumer(self, table: Table, next_snapshot: int) -> None:
        """Write when the consumer advances, and at least every CONSUMER_REFRESH_SECONDS while
        the query runs (the file's age tells `consumer.expiration-time` the reader is alive)."""
        assert self.consumer_id is not None
        now = time.monotonic()
        saved = self.consumer_saved
        if saved is not None and next_snapshot < saved:
            return
        if saved is None or next_snapshot > saved or now - self.consumer_saved_at >= CONSUMER_REFRESH_SECONDS:
            table.consumers.reset(self.consumer_id, next_snapshot)
            self.consumer_saved, self.consumer_saved_at = next_snapshot, now

    # -- executors ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangesPartition)
        table = self.ref.load()
        projection = Projection(table, self.schema)
        read = table.new_read(projection.columns)
        for split in partition.splits:
            for data in read.read_split(split):
                yield from projection.batches(data, split.row_kinds)
