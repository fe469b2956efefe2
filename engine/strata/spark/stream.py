"""``spark.readStream.format("strata")``: a table's changes, snapshot by snapshot.

Offsets are ``{"snapshot": N}``: every change up to and including snapshot N has been planned.
A micro-batch (start, end] reads the changes of the snapshots start+1 .. end, in order: the
changelog files with a changelog producer, else what APPEND commits wrote (COMPACT and
OVERWRITE snapshots carry no changes then, as in Paimon's streaming read). When the query
starts with a full scan (``latest-full``, ``compacted-full``, ``from-snapshot-full``), the
offsets also carry ``"base": S``: position S then stands for the whole content of snapshot S
instead of its delta.

Options:
    scan.mode              latest-full (default; also 'default', 'full'): snapshot S = the latest at
                           start, read in full, then its successors' changes;
                           latest (also 'latest-delta'): only changes committed after the start;
                           from-snapshot (+ scan.snapshot-id K): changes of K, K+1, ...;
                           from-snapshot-full (+ scan.snapshot-id K): snapshot K in full, then changes;
                           from-timestamp (+ scan.timestamp-millis T): changes of the snapshots
                           committed at or after T;
                           compacted-full: the latest COMPACT snapshot in full (the latest snapshot
                           when the table was never compacted), then its successors' changes.
    scan.bounded.watermark W
                           end the stream before the first snapshot whose watermark exceeds W
                           (a snapshot without a watermark never ends it). The base snapshot of a
                           full start is read whole even if its watermark exceeds W, as in Paimon.
                           Spark cannot end a query from its source: the query then idles with
                           no new data; Trigger.AvailableNow stops.
    include-row-kind       true: a `_ROW_KIND` column first (+I/-U/+U/-D); default false: only
                           +I and +U rows, without the column.
    max-rows-per-trigger   admission control (also Paimon's read.stream.maxRowsPerTrigger): a
                           micro-batch takes whole snapshots while their record counts stay within
                           this (at least one snapshot, however large); Trigger.AvailableNow then
                           runs several batches up to the latest snapshot at its start.
    max-files-per-trigger  the same for the number of data (or changelog) files (also
                           read.stream.maxFilesPerTrigger); with both, a batch stays within both.
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
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from strata.errors import OptionError
from strata.scan.planner import DataSplit
from strata.snapshot.snapshot import NO_WATERMARK, CommitKind, Snapshot
from strata.spark.options import TableRef, first_int, get_int
from strata.spark.source import Projection
from strata.table.table import Table

CONSUMER_REFRESH_SECONDS = 60.0
_MODES = {"latest-full": "latest-full", "default": "latest-full", "full": "latest-full",
          "latest": "latest", "latest-delta": "latest", "from-snapshot": "from-snapshot",
          "from-snapshot-full": "from-snapshot-full", "from-timestamp": "from-timestamp",
          "compacted-full": "compacted-full"}
MAX_ROWS_KEYS = ("max-rows-per-trigger", "read.stream.maxrowspertrigger")
MAX_FILES_KEYS = ("max-files-per-trigger", "read.stream.maxfilespertrigger")


class ChangesPartition(InputPartition):
    """The splits one task reads in order: the changes of one bucket over several snapshots
    (the first may be the bucket's whole content in the base snapshot)."""

    def __init__(self, first_snapshot: int, splits: list[DataSplit]) -> None:
        super().__init__(first_snapshot)
        self.splits = splits


def _admit(table: Table, position: int, latest: int, base: int | None, max_rows: int | None,
           max_files: int | None) -> int:
    """The last snapshot of a batch after `position` whose records and files stay within the
    limits (at least one snapshot); the base snapshot counts its whole content."""
    rows = files = 0
    for sid in range(position + 1, latest + 1):
        snap_rows, snap_files = _weight(table, table.snapshot_manager.snapshot(sid), sid == base)
        rows, files = rows + snap_rows, files + snap_files
        over = (max_rows is not None and rows > max_rows) or (max_files is not None and files > max_files)
        if over:
            return max(sid - 1, position + 1)
    return latest


def _weight(table: Table, snapshot: Snapshot, whole: bool) -> tuple[int, int]:
    """(records, files) a stream reads for `snapshot`, from the snapshot and its manifest lists
    (no manifest is opened): all live files when read `whole`, else its changes."""
    store = table.manifest_store
    if whole:
        metas = (store.read_manifest_list(snapshot.base_manifest_list)
                 + store.read_manifest_list(snapshot.delta_manifest_list))
        return snapshot.total_record_count or 0, sum(m.num_added_files - m.num_deleted_files for m in metas)
    if table.core.get("changelog-producer") != "none":
        listed = snapshot.changelog_manifest_list
        metas = store.read_manifest_list(listed) if listed else []
        return snapshot.changelog_record_count or 0, sum(m.num_added_files for m in metas)
    if snapshot.commit_kind != CommitKind.APPEND:
        return 0, 0
    metas = store.read_manifest_list(snapshot.delta_manifest_list)
    return snapshot.delta_record_count or 0, sum(m.num_added_files for m in metas)


def _exceeds(snapshot: Snapshot, bound: int) -> bool:
    watermark = snapshot.watermark
    return watermark is not None and watermark != NO_WATERMARK and watermark > bound


def _latest_compacted(table: Table) -> int | None:
    """The newest COMPACT snapshot, else the newest snapshot (Paimon's compacted-full start)."""
    manager = table.snapshot_manager
    latest, earliest = manager.latest_id(), manager.earliest_id()
    if latest is None or earliest is None:
        return None
    for sid in range(latest, earliest - 1, -1):
        if manager.snapshot(sid).commit_kind == CommitKind.COMPACT:
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
        self.max_rows = first_int(settings, MAX_ROWS_KEYS, minimum=1)
        self.max_files = first_int(settings, MAX_FILES_KEYS, minimum=1)
        self.bounded_watermark = get_int(settings, "scan.bounded.watermark")
        # the first snapshot (after the base) past the bounded watermark, once seen; and how far
        # snapshots were checked without finding it (snapshots never change, so both are final)
        self.bound_stop: int | None = None
        self.bound_checked = 0
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
        if self.mode in ("latest-full", "compacted-full"):
            start = _latest_compacted(table) if self.mode == "compacted-full" else latest
            return {"snapshot": start - 1, "base": start} if start else {"snapshot": 0}
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
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.max_files is not None:
            return ReadMaxFiles(self.max_files)
        return ReadAllAvailable()

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
        if self.bounded_watermark is not None:
            latest = self._before_bound(table, position, latest, base)
        end = max(latest, position)
        limited = not isinstance(limit, ReadAllAvailable) and (self.max_rows or self.max_files)
        if limited and end > position:
            end = _admit(table, position, end, base, self.max_rows, self.max_files)
        return {**start, "snapshot": end}

    def _before_bound(self, table: Table, position: int, latest: int, base: int | None) -> int:
        """`latest`, capped before the first snapshot whose watermark passes the bound (the base
        snapshot of a full start is read whole, and then ends the stream if it passes)."""
        assert self.bounded_watermark is not None
        manager = table.snapshot_manager
        if base is not None and position < base:
            if _exceeds(manager.snapshot(base), self.bounded_watermark):
                self.bound_stop = base + 1
            self.bound_checked = max(self.bound_checked, base)
        first = max(position, self.bound_checked) + 1
        for sid in range(first, latest + 1):
            if self.bound_stop is not None:
                break
            if _exceeds(manager.snapshot(sid), self.bounded_watermark):
                self.bound_stop = sid
            else:
                self.bound_checked = sid
        return latest if self.bound_stop is None else min(latest, self.bound_stop - 1)

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
