"""``spark.readStream.format("strata")``: a table's changes, snapshot by snapshot.

Offsets are ``{"snapshot": N}``: every change up to and including snapshot N has been planned.
A micro-batch (start, end] reads the changes of the snapshots start+1 .. end, in order: the
changelog files with a changelog producer, else what APPEND commits wrote (COMPACT and
OVERWRITE snapshots carry no changes then, as in Paimon's streaming read). When the query
starts with a full scan (``latest-full``, ``compacted-full``, ``from-snapshot-full``), the
offsets also carry ``"base": S``: position S then stands for the whole content of snapshot S
instead of its delta. They carry ``"origin"``, the position the query began at, too: Spark asks
for the initial offset again to run the first batch (also after a restart), so a batch's true
start can always be told from its end.

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
    streaming-read-mode    file (default): changes come from the snapshots' files;
                           log (Paimon's name and value; tables with log.system=kafka): the hybrid
                           read. The base snapshot N of a full start is read from its files, every
                           later change from the Kafka log, read_committed, starting at the offsets
                           N recorded (``log.offsets``). The offsets then also carry
                           ``"log": {partition: offset}`` (those snapshot `snapshot` recorded) and
                           ``"log-from"`` (the snapshot read from files): a micro-batch (start, end]
                           reads each partition's records between the two offsets, i.e. exactly the
                           changes of snapshots start+1 .. end, so there is no gap and no duplicate
                           at the switch, and every other option (bounded watermark, limits,
                           consumer-id) works on snapshots as before. Records reach Kafka only when
                           a commit's transaction commits, so a batch waits for them. When Kafka's
                           retention has dropped records a batch needs, the query falls back to
                           file-based reading for good (the batch is planned from the files of the
                           same snapshots, so still no gap): a warning is logged and counted
                           (``strata.log.metrics`` log.hybrid.fallbacks, Prometheus
                           strata_log_hybrid_fallbacks_total), and the offsets lose "log".
                           Unlike Paimon, whose streaming reads used the log whenever one was
                           configured, file stays the default.

Every offset also names the table (``"table": "<warehouse>#<db>.<table>"``), so a sink can tell
which upstream snapshot a micro-batch consumed (the strata sink's ``lineage.job`` uses it).

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
from strata.log.options import log_enabled
from strata.scan.planner import DataSplit
from strata.snapshot.snapshot import NO_WATERMARK, CommitKind, Snapshot
from strata.spark import hybrid
from strata.spark.options import TableRef, first_int, get_int
from strata.spark.types import Projection
from strata.table.table import Table

CONSUMER_REFRESH_SECONDS = 60.0
_MODES = {"latest-full": "latest-full", "default": "latest-full", "full": "latest-full",
          "latest": "latest", "latest-delta": "latest", "from-snapshot": "from-snapshot",
          "from-snapshot-full": "from-snapshot-full", "from-timestamp": "from-timestamp",
          "compacted-full": "compacted-full"}
MAX_ROWS_KEYS = ("max-rows-per-trigger", "read.stream.maxrowspertrigger")
MAX_FILES_KEYS = ("max-files-per-trigger", "read.stream.maxfilespertrigger")
READ_MODES = ("file", "log")
LOG_KEYS = ("log", "log-from")


class ChangesPartition(InputPartition):
    """The splits one task reads in order: the changes of one bucket over several snapshots
    (the first may be the bucket's whole content in the base snapshot)."""

    def __init__(self, first_snapshot: int, splits: list[DataSplit]) -> None:
        super().__init__(first_snapshot)
        self.splits = splits


class LogPartition(InputPartition):
    """One Kafka partition (= bucket) of a hybrid read: that bucket's base-snapshot splits (if the
    batch holds the base), then its log records in [start, end)."""

    def __init__(self, partition: int, splits: list[DataSplit], start: int, end: int, files_up_to: int) -> None:
        super().__init__(partition)
        self.partition, self.splits = partition, splits
        self.start, self.end, self.files_up_to = start, end, files_up_to


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
        table = ref.load()
        Projection(table, schema)  # unknown columns fail now, not in the first task
        read_mode = settings.get("streaming-read-mode", "file").lower()
        if read_mode not in READ_MODES:
            raise OptionError(f"streaming-read-mode {read_mode!r} is not one of {list(READ_MODES)}")
        if read_mode == "log" and not log_enabled(table):
            raise OptionError(f"streaming-read-mode=log needs a table with log.system=kafka; {table.identifier} "
                              "has no log store")
        self.log_watch = hybrid.LogWatch(table) if read_mode == "log" else None
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
        self._initial: dict | None = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_driver_table"] = None  # executors load the table themselves
        state["_initial"] = None
        state["log_watch"] = None  # the driver's Kafka consumer
        return state

    def _table(self) -> Table:
        """The table for offsets and consumers, loaded once: latestOffset runs every trigger."""
        if self._driver_table is None:
            self._driver_table = self.ref.load()
        return self._driver_table

    # -- offsets (driver) ------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        """Computed once: Spark asks again when it runs the first batch, and the latest snapshot
        may have moved on by then (a second answer would skip what the first batch planned)."""
        if self._initial is None:
            position = self._initial_position()
            offset = {**position, "origin": position["snapshot"], "table": str(self.ref)}
            self._initial = self._with_log(offset) if self.log_watch is not None else offset
        return self._initial

    def _planned_start(self, table: Table, start: dict, end: dict) -> dict:
        """The start `end` was planned from. Every offset carries the position the query began at
        ("origin"); a start whose origin differs is an initial offset computed anew, as when a
        restarted query re-runs its first batch: the original one is rebuilt from `end`."""
        origin = end.get("origin")
        if origin is None or start.get("origin") == origin:
            return start
        planned = {"snapshot": origin, "origin": origin, "table": end.get("table", str(self.ref))}
        if "base" in end:
            planned["base"] = end["base"]
        if "log" in end:
            log_start = hybrid.snapshot_offsets(table, int(end["log-from"]))
            if log_start is not None:
                planned.update({"log": log_start, "log-from": end["log-from"]})
        return planned

    def _with_log(self, offset: dict) -> dict:
        """`offset` with the log offsets of the snapshot the log reading starts after (the base of
        a full start, else the position); without them (file-based) when that snapshot is gone."""
        files_up_to = int(offset.get("base") or offset["snapshot"])
        start = hybrid.snapshot_offsets(self._table(), files_up_to)
        if start is None:
            assert self.log_watch is not None
            self.log_watch.fall_back([], files_up_to)
            return offset
        return {**offset, "log": start, "log-from": files_up_to}

    def _initial_position(self) -> dict:
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
        offset = {**start, "snapshot": end}
        if "log" in start and end > position:
            offset = self._log_end(table, offset, start["log"])
        return offset

    def _without_log(self, offset: dict) -> dict:
        return {k: v for k, v in offset.items() if k not in LOG_KEYS}

    def _log_end(self, table: Table, offset: dict, start_log: dict[str, int]) -> dict:
        """The log offsets snapshot `offset["snapshot"]` recorded, or, when Kafka no longer holds
        the records from `start_log` on, the offset without them: file-based from here on."""
        if self.log_watch is None:  # a log-mode checkpoint restarted with streaming-read-mode=file
            return self._without_log(offset)
        lost = self.log_watch.lost(start_log)
        if lost:
            self.log_watch.fall_back(lost, int(offset["snapshot"]))
            return self._without_log(offset)
        return {**offset, "log": hybrid.end_offsets(table, int(offset["snapshot"]), start_log)}

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
        start = self._planned_start(table, start, end)
        if "log" in start and "log" in end and not self._log_gone(start, end):
            return self._log_partitions(table, start, end)
        first, last = int(start["snapshot"]) + 1, int(end["snapshot"])
        base = end.get("base")
        scan = table.new_scan()
        groups: dict[tuple[bytes, int], list[DataSplit]] = {}
        for sid in range(first, last + 1):
            splits = table.new_scan(snapshot_id=sid).plan().splits if sid == base else scan.plan_changes(sid)
            for split in splits:
                groups.setdefault((split.partition, split.bucket), []).append(split)
        return [ChangesPartition(splits[0].snapshot_id, splits) for splits in groups.values()]

    def _log_gone(self, start: dict, end: dict) -> bool:
        """Did retention drop records of this batch since it was planned (e.g. a batch re-run
        after a restart)? It is then read from the files of the same snapshots."""
        if self.log_watch is None:  # an offset with "log" given to a query now reading files
            return True
        backlog = {p: start["log"].get(p, 0) for p, o in end["log"].items() if o > start["log"].get(p, 0)}
        lost = self.log_watch.lost(backlog, only_these=True) if backlog else []
        if lost:
            self.log_watch.fall_back(lost, int(start["snapshot"]))
        return bool(lost)

    def _log_partitions(self, table: Table, start: dict, end: dict) -> list[InputPartition]:
        """One Spark partition per Kafka partition (= bucket): the bucket's splits of the base
        snapshot (first batch only), then its records of the batch's log range, so the changes
        of a key stay in order in one task."""
        base = start.get("base")
        base_splits: dict[int, list[DataSplit]] = {}
        if base is not None and int(start["snapshot"]) < base <= int(end["snapshot"]):
            for split in table.new_scan(snapshot_id=base).plan().splits:
                base_splits.setdefault(max(split.bucket, 0), []).append(split)
        out: list[InputPartition] = []
        files_up_to = int(end.get("log-from", 0))
        for p in sorted({*base_splits, *(int(k) for k in end["log"])}):
            first, stop = int(start["log"].get(str(p), 0)), int(end["log"].get(str(p), 0))
            if base_splits.get(p) or stop > first:
                out.append(LogPartition(p, base_splits.get(p, []), first, max(first, stop), files_up_to))
        return out

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

    def stop(self) -> None:
        if self.log_watch is not None:
            self.log_watch.close()

    # -- executors ------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangesPartition | LogPartition)
        table = self.ref.load()
        projection = Projection(table, self.schema)
        read = table.new_read(projection.columns)
        for split in partition.splits:
            for data in read.read_split(split):
                yield from projection.batches(data, split.row_kinds)
        if isinstance(partition, LogPartition) and partition.end > partition.start:
            for changes in hybrid.read_range(table, projection.columns, partition.partition, partition.start,
                                             partition.end, partition.files_up_to):
                yield from projection.batches(changes, True)
