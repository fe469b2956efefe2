"""Prometheus metrics of the engine, and how a process exposes them.

Every metric is named by Prometheus conventions: the ``strata_`` prefix, base units (seconds,
bytes), ``_total`` counters, histograms for latencies. Labels are bounded: ``table`` (``db.table``),
``kind`` (commit kind), ``result``, ``reason``, ``type``; ``bucket`` only where the table's bucket
option bounds it. Never a file name, key or commit identifier.

The metrics live in prometheus-client's default registry, so any exposition of that registry
publishes them:

* long-running processes (streaming jobs, the compaction service) call ``serve_metrics(port)``,
  which serves ``/metrics`` on 127.0.0.1;
* short-lived jobs call ``write_textfile(path)`` before they exit (atomic; the format node
  exporter's textfile collector reads).

prometheus-client is the optional extra ``metrics``. Without it every metric here is a no-op
(``ENABLED`` is False) and the engine works unchanged; only ``serve_metrics`` and
``write_textfile`` refuse, with a message naming the extra.

The engine records through the small helpers below (one call at each instrumented point); the
Kafka log store, the Spark sink, snapshot expiry and orphan cleanup record through theirs. The
table-health metrics read from table metadata (``strata_table_*``) are served by
``strata_platform.metrics_exporter``.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from strata.errors import CommitConflictError

if TYPE_CHECKING:
    from strata.manifest.data_file_meta import DataFileMeta
    from strata.manifest.manifest_entry import ManifestEntry
    from strata.mergetree.levels import Levels
    from strata.snapshot.snapshot import Snapshot

try:
    import prometheus_client as _prom
except ImportError:  # the `metrics` extra is not installed: every metric is a no-op
    _prom = None  # type: ignore[assignment]

ENABLED = _prom is not None
DEFAULT_HOST = "127.0.0.1"


# -- metric objects (prometheus-client's, or no-ops) -----------------------------------------------
class CounterLike(Protocol):
    def labels(self, *values: str) -> CounterLike: ...
    def inc(self, amount: float = 1) -> None: ...


class GaugeLike(Protocol):
    def labels(self, *values: str) -> GaugeLike: ...
    def inc(self, amount: float = 1) -> None: ...
    def dec(self, amount: float = 1) -> None: ...
    def set(self, value: float) -> None: ...
    def set_function(self, f: Callable[[], float]) -> None: ...


class HistogramLike(Protocol):
    def labels(self, *values: str) -> HistogramLike: ...
    def observe(self, amount: float) -> None: ...


class _NoOp:
    """Stands for any metric (and any labelled child) when prometheus-client is absent."""

    def labels(self, *values: str) -> _NoOp:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def set_function(self, f: Callable[[], float]) -> None:
        pass

    def observe(self, amount: float) -> None:
        pass


@dataclass(frozen=True)
class MetricDef:
    """One metric: what `observability/README.md` lists and the tests check names against."""

    name: str  # the exposed name (counters with their `_total`)
    type: str  # counter | gauge | histogram
    help: str
    labels: tuple[str, ...]
    component: str


DEFINITIONS: list[MetricDef] = []
_NOOP = _NoOp()
_BY_TABLE: list[tuple[Any, int]] = []  # (metric, position of its `table` label): what forget_table clears

# latencies of different orders of magnitude get different buckets (seconds)
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SLOW_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
ROW_BUCKETS = (10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7)


def _define(kind: str, name: str, doc: str, labels: Sequence[str], component: str,
            buckets: Sequence[float] | None = None) -> Any:
    DEFINITIONS.append(MetricDef(name, kind, doc, tuple(labels), component))
    if _prom is None:
        return _NOOP
    metric: Any
    if kind == "counter":
        metric = _prom.Counter(name, doc, labels)
    elif kind == "gauge":
        metric = _prom.Gauge(name, doc, labels)
    else:
        metric = _prom.Histogram(name, doc, labels, buckets=buckets or COMMIT_BUCKETS)
    if "table" in labels:
        _BY_TABLE.append((metric, list(labels).index("table")))
    return metric


def _counter(name: str, doc: str, labels: Sequence[str], component: str) -> CounterLike:
    assert name.endswith("_total"), name
    result: CounterLike = _define("counter", name, doc, labels, component)
    return result


def _gauge(name: str, doc: str, labels: Sequence[str], component: str) -> GaugeLike:
    result: GaugeLike = _define("gauge", name, doc, labels, component)
    return result


def _histogram(name: str, doc: str, labels: Sequence[str], component: str,
               buckets: Sequence[float]) -> HistogramLike:
    result: HistogramLike = _define("histogram", name, doc, labels, component, buckets)
    return result


T, K = ("table",), ("table", "kind")  # the two common label sets

# -- commits ------------------------------------------------------------------------------------------
COMMITS = _counter("strata_commits_total", "Snapshots a committer tried to publish, by commit kind "
                   "(append, compact, overwrite) and result (success; noop: an earlier attempt had "
                   "landed; conflict: gave up on conflicting files; failed: retries exhausted or an error).",
                   ("table", "kind", "result"), "commit")
COMMIT_DURATION = _histogram("strata_commit_duration_seconds", "Time to publish one snapshot, "
                             "retries included.", K, "commit", COMMIT_BUCKETS)
COMMIT_ATTEMPTS = _counter("strata_commit_attempts_total", "Publish attempts (one per try of a snapshot "
                           "id; attempts beyond the commits are retries).", K, "commit")
COMMIT_CONFLICTS = _counter("strata_commit_conflicts_total", "Conflicts met while committing, by type: "
                            "snapshot_id_taken (another writer published first; retried), "
                            "file_conflict (deleted files gone or LSM overlap; the commit gives up).",
                            ("table", "kind", "type"), "commit")
COMMIT_DUPLICATES = _counter("strata_commit_duplicates_total", "Replayed commits skipped because the "
                             "commit user had already published that identifier (exactly-once).", T, "commit")
COMMIT_STATE_UNKNOWN = _counter("strata_commit_state_unknown_total", "Commits whose outcome could not be "
                                "known (an ambiguous write that could not be read back): every file was kept "
                                "and CommitStateUnknownError raised.", T, "commit")
COMMIT_READ_BACKS = _counter("strata_commit_read_backs_total", "Ambiguous snapshot writes (a lost reply, a "
                             "timeout) settled by reading the snapshot back, by result (published, "
                             "not_published).", ("table", "result"), "commit")
COMMIT_CALLBACK_FAILURES = _counter("strata_commit_callback_failures_total", "Work after a durable commit "
                                    "(log commit, expiry, Iceberg sync) that failed, by callback (type); the "
                                    "commit stands.", ("table", "type"), "commit")
COMMIT_COMPACTIONS_ABANDONED = _counter(
    "strata_commit_compactions_abandoned_total", "Writers' compactions that failed after their batch "
    "published (the batch is in; the writer restores its buckets before its next commit), by what followed: "
    "recovered (a retried level-0 compaction landed), not_visible (the retries gave up: the batch is durable "
    "but readers that skip level 0 do not see it until the bucket's next commit or compaction), none (no "
    "retry needed: readers merge level 0).", ("table", "result"), "commit")
FILES_ADDED = _counter("strata_files_added_total", "Data files added by published snapshots.", K, "commit")
FILES_DELETED = _counter("strata_files_deleted_total", "Data files deleted by published snapshots.", K, "commit")
BYTES_ADDED = _counter("strata_bytes_added_total", "Bytes of data files added by published snapshots.",
                       K, "commit")
BYTES_DELETED = _counter("strata_bytes_deleted_total", "Bytes of data files deleted by published snapshots.",
                         K, "commit")
RECORDS_APPENDED = _counter("strata_records_appended_total", "Records in the new files of published "
                            "append and overwrite snapshots.", T, "commit")
SNAPSHOT_ID = _gauge("strata_snapshot_latest_id", "Id of the latest snapshot this process published.",
                     T, "commit")
SNAPSHOT_AGE = _gauge("strata_snapshot_latest_age_seconds", "Seconds since the latest snapshot this "
                      "process published was created.", T, "commit")

# -- writing ------------------------------------------------------------------------------------------
WRITE_RECORDS = _counter("strata_write_records_total", "Records handed to table writers (before commit).",
                         T, "write")
WRITE_BUFFER = _gauge("strata_write_buffer_bytes", "Bytes held in the write buffers of this process's "
                      "writers.", T, "write")
WRITE_BUFFER_LIMIT = _gauge("strata_write_buffer_limit_bytes", "The write-buffer-size of the table's "
                            "writers (the buffer flushes above it).", T, "write")
WRITE_FLUSHES = _counter("strata_write_flushes_total", "Write buffer flushes into level-0 files, by reason: "
                         "full (the buffer passed write-buffer-size and could not spill) or commit.",
                         ("table", "reason"), "write")
WRITE_SPILLS = _counter("strata_write_spills_total", "Write buffers spilled to local disk as sorted runs "
                        "(write-buffer-spillable), merged into the bucket's next flush.", T, "write")
WRITE_SPILL_BYTES = _counter("strata_write_spill_bytes_total", "Bytes of the sorted runs spilled to local disk.",
                             T, "write")
LSM_LEVEL0_MAX = _gauge("strata_lsm_level0_files_max", "Most level-0 files in one bucket of the table's "
                        "writers (after the last commit).", T, "write")
LSM_LEVEL0_AVG = _gauge("strata_lsm_level0_files_avg", "Average level-0 files per bucket of the table's "
                        "writers.", T, "write")
LSM_RUNS_MAX = _gauge("strata_lsm_sorted_runs_max", "Most sorted runs in one bucket of the table's "
                      "writers.", T, "write")
LSM_RUNS_AVG = _gauge("strata_lsm_sorted_runs_avg", "Average sorted runs per bucket of the table's writers.",
                      T, "write")

# -- compaction ---------------------------------------------------------------------------------------
COMPACTION_QUEUED = _gauge("strata_compaction_queued", "Compactions submitted and waiting for a thread.",
                           T, "compaction")
COMPACTION_RUNNING = _gauge("strata_compaction_running", "Compactions running now.", T, "compaction")
COMPACTIONS = _counter("strata_compactions_total", "Finished compactions, by result (success, failed).",
                       ("table", "result"), "compaction")
COMPACTION_DURATION = _histogram("strata_compaction_duration_seconds", "Time to run one compaction.",
                                 T, "compaction", SLOW_BUCKETS)
COMPACTION_INPUT_BYTES = _counter("strata_compaction_input_bytes_total", "Bytes of the files compactions "
                                  "rewrote (files only moved to another level are not counted).", T, "compaction")
COMPACTION_OUTPUT_BYTES = _counter("strata_compaction_output_bytes_total", "Bytes of the files compactions "
                                   "wrote.", T, "compaction")
COMPACTION_INPUT_FILES = _counter("strata_compaction_input_files_total", "Files compactions rewrote.",
                                  T, "compaction")
COMPACTION_OUTPUT_FILES = _counter("strata_compaction_output_files_total", "Files compactions wrote.",
                                   T, "compaction")
WRITE_STALLS = _counter("strata_write_stalls_total", "Times a writer stalled because a bucket had more "
                        "sorted runs than num-sorted-run.stop-trigger.", T, "compaction")
WRITE_STALL_SECONDS = _counter("strata_write_stall_seconds_total", "Seconds writers spent stalled waiting "
                               "for compaction.", T, "compaction")

# -- scans --------------------------------------------------------------------------------------------
SCAN_DURATION = _histogram("strata_scan_duration_seconds", "Time to plan one scan (snapshot, manifests, "
                           "pruning, splits).", T, "scan", FAST_BUCKETS)
SCAN_MANIFESTS_READ = _counter("strata_scan_manifests_read_total", "Manifest files scans read.", T, "scan")
SCAN_MANIFESTS_SKIPPED = _counter("strata_scan_manifests_skipped_total", "Manifest files scans skipped by "
                                  "partition pruning.", T, "scan")
SCAN_FILES_SCANNED = _counter("strata_scan_files_scanned_total", "Data files scans kept (to be read).",
                              T, "scan")
SCAN_FILES_SKIPPED = _counter("strata_scan_files_skipped_total", "Data files scans skipped by partition, "
                              "bucket or statistics pruning.", T, "scan")

# -- Kafka log store (recorded by strata.log) ---------------------------------------------------------
LOG_PRODUCE_LATENCY = _histogram("strata_log_produce_latency_seconds", "Time from producing a record to "
                                 "the broker acknowledging it.", T, "log", FAST_BUCKETS)
LOG_RECORDS = _counter("strata_log_records_produced_total", "Records produced to the log store.", T, "log")
LOG_TRANSACTIONS = _counter("strata_log_transactions_total", "Log store transactions, by result "
                            "(commit, abort).", ("table", "result"), "log")
LOG_CONSUMER_LAG = _gauge("strata_log_consumer_lag_records", "Records between a log consumer's position "
                          "and the end of the bucket's partition.", ("table", "bucket"), "log")
LOG_FALLBACKS = _counter("strata_log_hybrid_fallbacks_total", "Hybrid reads that fell back to snapshot "
                         "streaming because Kafka retention dropped the offsets they needed.", T, "log")

# -- Spark sink (recorded by strata.spark) ------------------------------------------------------------
SPARK_BATCH_DURATION = _histogram("strata_spark_sink_batch_duration_seconds", "Time to write and commit "
                                  "one micro-batch.", T, "spark", SLOW_BUCKETS)
SPARK_BATCH_ROWS = _histogram("strata_spark_sink_batch_rows", "Rows per micro-batch.", T, "spark",
                              ROW_BUCKETS)
SPARK_BATCHES = _counter("strata_spark_sink_batches_total", "Micro-batches, by result (committed; "
                         "duplicate: replayed batch skipped; aborted).", ("table", "result"), "spark")

# -- maintenance: snapshot expiry and orphan cleanup --------------------------------------------------
EXPIRE_RUNS = _counter("strata_expire_runs_total", "Snapshot expiry runs, by result (success, failed).",
                       ("table", "result"), "maintenance")
EXPIRE_DURATION = _histogram("strata_expire_duration_seconds", "Time of one snapshot expiry run.", T,
                             "maintenance", SLOW_BUCKETS)
EXPIRE_SNAPSHOTS = _counter("strata_expire_snapshots_deleted_total", "Snapshots expiry deleted.", T,
                            "maintenance")
EXPIRE_FILES = _counter("strata_expire_files_deleted_total", "Data and manifest files expiry deleted.", T,
                        "maintenance")
EXPIRE_LAST_SUCCESS = _gauge("strata_expire_last_success_timestamp_seconds", "Unix time of the last "
                             "successful expiry run.", T, "maintenance")
ORPHAN_RUNS = _counter("strata_orphan_cleanup_runs_total", "Orphan file cleanup runs, by result.",
                       ("table", "result"), "maintenance")
ORPHAN_FILES = _counter("strata_orphan_files_deleted_total", "Orphan files deleted.", T, "maintenance")
ORPHAN_BYTES = _counter("strata_orphan_bytes_deleted_total", "Bytes of orphan files deleted.", T,
                        "maintenance")
ORPHAN_LAST_SUCCESS = _gauge("strata_orphan_cleanup_last_success_timestamp_seconds", "Unix time of the "
                             "last successful orphan cleanup.", T, "maintenance")

# -- the Iceberg mirror (metadata.iceberg.storage; recorded by strata.iceberg) ----------------------
ICEBERG_SYNC_FAILURES = _counter("strata_iceberg_sync_failures_total", "Iceberg metadata syncs that failed "
                                 "after a commit (the commit stands; Iceberg readers see an older snapshot).",
                                 T, "iceberg")
ICEBERG_SYNC_LAG = _gauge("strata_iceberg_sync_lag_snapshots", "Snapshots the table's Iceberg metadata is "
                          "behind its latest snapshot, after this process's last sync (0: up to date).",
                          T, "iceberg")
ICEBERG_STATISTICS_FAILURES = _counter("strata_iceberg_statistics_failures_total", "Iceberg statistics "
                                       "refreshes after a commit that failed (retried after a back-off).",
                                       T, "iceberg")

def _engine_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("strata")
    except PackageNotFoundError:
        return "unknown"


BUILD_INFO = _gauge("strata_build_info", "Always 1; the engine version as a label.", ("version",), "process")
BUILD_INFO.labels(_engine_version()).set(1)

_lock = threading.Lock()
_seen: set[tuple[str, ...]] = set()
_snapshot_times: dict[str, float] = {}


def _first_time(*key: str) -> bool:
    """True the first time a (metric group, labels) key is seen: its series start at zero then, so a
    rate() or an alert on a result that has not happened yet has a series to work with."""
    with _lock:
        if key in _seen:
            return False
        _seen.add(key)
        return True


def forget_table(table: str) -> None:
    """Remove every series of `table` (a ``db.table`` label) from this process's metrics: a dropped
    or renamed table's last values would otherwise be served for as long as the process lives, and
    each table adds some 80 series to every scrape. Recording for it again starts them anew."""
    for metric, position in _BY_TABLE:
        with metric._lock:  # the children's dict grows under it (a labels() call of another thread)
            doomed = [values for values in metric._metrics if values[position] == table]
        for values in doomed:
            with suppress(KeyError):  # removed meanwhile by another thread
                metric.remove(*values)
    with _lock:
        _seen.difference_update([key for key in _seen if key[1:2] == (table,)])
        _snapshot_times.pop(table, None)


def table_label(table_path: str) -> str:
    """`db.table` from a warehouse table path (``.../<db>.db/<table>``), else the last path part."""
    parts = table_path.rstrip("/").rsplit("/", 2)
    if len(parts) == 3 and parts[1].endswith(".db"):
        return f"{parts[1][:-3]}.{parts[2]}"
    return parts[-1]


# -- commit helpers -----------------------------------------------------------------------------------
class _CommitProgress(Protocol):
    attempts: int
    snapshot_ids: list[int]


@contextmanager
def observe_commit(table: str, kind: str, progress: _CommitProgress) -> Iterator[None]:
    """Around publishing one snapshot: counts it by result, times it, counts its attempts."""
    kind = kind.lower()
    if _first_time("commit", table, kind):
        for result in ("success", "noop", "conflict", "failed"):
            COMMITS.labels(table, kind, result)
        for conflict in ("snapshot_id_taken", "file_conflict"):
            COMMIT_CONFLICTS.labels(table, kind, conflict)
        for counter in (FILES_ADDED, FILES_DELETED, BYTES_ADDED, BYTES_DELETED):
            counter.labels(table, kind)
        COMMIT_DUPLICATES.labels(table)
    attempts, published = progress.attempts, len(progress.snapshot_ids)
    started = time.monotonic()
    outcome = "failed"
    try:
        yield
        outcome = "success" if len(progress.snapshot_ids) > published else "noop"
    except CommitConflictError:
        outcome = "conflict"
        COMMIT_CONFLICTS.labels(table, kind, "file_conflict").inc()
        raise
    finally:
        COMMITS.labels(table, kind, outcome).inc()
        COMMIT_DURATION.labels(table, kind).observe(time.monotonic() - started)
        COMMIT_ATTEMPTS.labels(table, kind).inc(progress.attempts - attempts)


def commit_retry(table: str, kind: str) -> None:
    """A publish attempt lost the race for its snapshot id (it will retry)."""
    COMMIT_CONFLICTS.labels(table, kind.lower(), "snapshot_id_taken").inc()


def commit_duplicate(table: str) -> None:
    COMMIT_DUPLICATES.labels(table).inc()


def commit_state_unknown(table: str) -> None:
    COMMIT_STATE_UNKNOWN.labels(table).inc()


def commit_read_back(table: str, published: bool) -> None:
    COMMIT_READ_BACKS.labels(table, "published" if published else "not_published").inc()


def commit_callback_failed(table: str, callback: str) -> None:
    COMMIT_CALLBACK_FAILURES.labels(table, callback).inc()


def commit_compaction_abandoned(table: str, result: str) -> None:
    """A commit's own compaction was abandoned after its batch published; `result`: recovered,
    not_visible or none (see COMMIT_COMPACTIONS_ABANDONED)."""
    COMMIT_COMPACTIONS_ABANDONED.labels(table, result).inc()


def commit_published(table: str, kind: str, snapshot: Snapshot, entries: Iterable[ManifestEntry]) -> None:
    """A snapshot landed: files and bytes it added and deleted, records appended, latest snapshot."""
    kind = kind.lower()
    added_files = deleted_files = added_bytes = deleted_bytes = added_rows = 0
    for entry in entries:
        if entry.kind.name == "ADD":
            added_files += 1
            added_bytes += entry.file.file_size
            added_rows += entry.file.row_count
        else:
            deleted_files += 1
            deleted_bytes += entry.file.file_size
    FILES_ADDED.labels(table, kind).inc(added_files)
    FILES_DELETED.labels(table, kind).inc(deleted_files)
    BYTES_ADDED.labels(table, kind).inc(added_bytes)
    BYTES_DELETED.labels(table, kind).inc(deleted_bytes)
    if kind != "compact":
        RECORDS_APPENDED.labels(table).inc(added_rows)
    SNAPSHOT_ID.labels(table).set(snapshot.id)
    with _lock:
        known = table in _snapshot_times
        _snapshot_times[table] = snapshot.time_millis / 1000
    if not known:
        SNAPSHOT_AGE.labels(table).set_function(lambda: time.time() - _snapshot_times[table])


# -- write helpers ------------------------------------------------------------------------------------
class _BufferedWriter(Protocol):
    buffered_bytes: int

    def has_pending(self) -> bool: ...


class WriteMetrics:
    """What one TableWrite reports: records written, its share of the buffer gauge, flushes."""

    def __init__(self, table: str, buffer_limit: int):
        self.table = table
        self._buffered = 0
        WRITE_BUFFER_LIMIT.labels(table).set(buffer_limit)
        if _first_time("write", table):
            for reason in ("full", "commit"):
                WRITE_FLUSHES.labels(table, reason)
            WRITE_BUFFER.labels(table)
            WRITE_SPILLS.labels(table)
            WRITE_SPILL_BYTES.labels(table)

    def written(self, records: int, writers: Iterable[_BufferedWriter]) -> None:
        WRITE_RECORDS.labels(self.table).inc(records)
        self.buffered(sum(w.buffered_bytes for w in writers))

    def buffered(self, total: int) -> None:
        """This writer now buffers `total` bytes (the gauge sums every writer of the table)."""
        WRITE_BUFFER.labels(self.table).inc(total - self._buffered)
        self._buffered = total

    def flushed(self, reason: str, count: int = 1) -> None:
        if count:
            WRITE_FLUSHES.labels(self.table, reason).inc(count)

    def spilled(self, disk_bytes: int) -> None:
        WRITE_SPILLS.labels(self.table).inc()
        WRITE_SPILL_BYTES.labels(self.table).inc(disk_bytes)

    def committing(self, writers: Iterable[_BufferedWriter]) -> None:
        """Before prepare_commit flushes: every writer with rows to flush (buffered or spilled)
        makes a commit flush."""
        self.flushed("commit", sum(1 for w in writers if w.has_pending()))

    def committed(self, levels: Sequence[Levels]) -> None:
        """After prepare_commit: buffers are empty; the LSM shape of the writer's buckets."""
        self.buffered(0)
        record_levels(self.table, levels)


def record_levels(table: str, levels: Sequence[Levels]) -> None:
    """Max and average level-0 files and sorted runs over the buckets of a writer."""
    if not levels:
        return
    level0 = [len(lv.level0) for lv in levels]
    runs = [lv.number_of_sorted_runs() for lv in levels]
    LSM_LEVEL0_MAX.labels(table).set(max(level0))
    LSM_LEVEL0_AVG.labels(table).set(sum(level0) / len(level0))
    LSM_RUNS_MAX.labels(table).set(max(runs))
    LSM_RUNS_AVG.labels(table).set(sum(runs) / len(runs))


# -- compaction helpers -------------------------------------------------------------------------------
class _CompactResult(Protocol):
    before: list[DataFileMeta]
    after: list[DataFileMeta]


R = TypeVar("R", bound=_CompactResult)


def _init_compaction(table: str) -> None:
    if _first_time("compaction", table):
        for result in ("success", "failed"):
            COMPACTIONS.labels(table, result)
        for counter in (WRITE_STALLS, WRITE_STALL_SECONDS, COMPACTION_INPUT_BYTES, COMPACTION_OUTPUT_BYTES,
                        COMPACTION_INPUT_FILES, COMPACTION_OUTPUT_FILES):
            counter.labels(table)
        COMPACTION_RUNNING.labels(table)


def submit_compaction(table: str, executor: Executor, runner: Callable[..., R], *args: Any) -> Future[R]:
    """Submit a compaction, counting it as queued until a thread picks it up, then running."""
    _init_compaction(table)
    COMPACTION_QUEUED.labels(table).inc()

    def run() -> R:
        COMPACTION_QUEUED.labels(table).dec()
        COMPACTION_RUNNING.labels(table).inc()
        started = time.monotonic()
        try:
            result = runner(*args)
        except BaseException:
            COMPACTIONS.labels(table, "failed").inc()
            raise
        finally:
            COMPACTION_RUNNING.labels(table).dec()
        compaction_finished(table, time.monotonic() - started, result.before, result.after)
        return result

    future = executor.submit(run)
    future.add_done_callback(lambda f: COMPACTION_QUEUED.labels(table).dec() if f.cancelled() else None)
    return future


def compaction_finished(table: str, seconds: float, before: Sequence[DataFileMeta],
                        after: Sequence[DataFileMeta]) -> None:
    """A compaction replaced `before` with `after` (files kept under a new level count as neither)."""
    _init_compaction(table)
    kept = {f.file_name for f in before} & {f.file_name for f in after}
    read = [f for f in before if f.file_name not in kept]
    written = [f for f in after if f.file_name not in kept]
    COMPACTIONS.labels(table, "success").inc()
    COMPACTION_DURATION.labels(table).observe(seconds)
    COMPACTION_INPUT_FILES.labels(table).inc(len(read))
    COMPACTION_OUTPUT_FILES.labels(table).inc(len(written))
    COMPACTION_INPUT_BYTES.labels(table).inc(sum(f.file_size for f in read))
    COMPACTION_OUTPUT_BYTES.labels(table).inc(sum(f.file_size for f in written))


@contextmanager
def write_stall(table: str) -> Iterator[None]:
    """Around a writer waiting for compaction because of the stop trigger."""
    started = time.monotonic()
    try:
        yield
    finally:
        WRITE_STALLS.labels(table).inc()
        WRITE_STALL_SECONDS.labels(table).inc(time.monotonic() - started)


# -- scan helpers -------------------------------------------------------------------------------------
class _ScanCounts(Protocol):  # strata.scan.planner.ScanStats
    manifests_read: int
    manifests_skipped: int
    files_scanned: int
    files_skipped: int


def scan_finished(table: str, seconds: float, stats: _ScanCounts) -> None:
    SCAN_DURATION.labels(table).observe(seconds)
    SCAN_MANIFESTS_READ.labels(table).inc(stats.manifests_read)
    SCAN_MANIFESTS_SKIPPED.labels(table).inc(stats.manifests_skipped)
    SCAN_FILES_SCANNED.labels(table).inc(stats.files_scanned)
    SCAN_FILES_SKIPPED.labels(table).inc(stats.files_skipped)


# -- Kafka log store helpers --------------------------------------------------------------------------
def log_produced(table: str, records: int, latency_seconds: float) -> None:
    """`records` were acknowledged by the broker `latency_seconds` after being produced."""
    LOG_RECORDS.labels(table).inc(records)
    LOG_PRODUCE_LATENCY.labels(table).observe(latency_seconds)


def log_transaction(table: str, committed: bool) -> None:
    if _first_time("log", table):
        for result in ("commit", "abort"):
            LOG_TRANSACTIONS.labels(table, result)
        LOG_FALLBACKS.labels(table)
    LOG_TRANSACTIONS.labels(table, "commit" if committed else "abort").inc()


def log_consumer_lag(table: str, bucket: int, lag_records: int) -> None:
    LOG_CONSUMER_LAG.labels(table, str(bucket)).set(lag_records)


def log_hybrid_fallback(table: str) -> None:
    LOG_FALLBACKS.labels(table).inc()


# -- Spark sink helpers -------------------------------------------------------------------------------
def spark_sink_batch(table: str, rows: int, seconds: float, result: str = "committed") -> None:
    """One micro-batch: result is committed, duplicate (replay skipped) or aborted."""
    if _first_time("spark", table):
        for name in ("committed", "duplicate", "aborted"):
            SPARK_BATCHES.labels(table, name)
    SPARK_BATCHES.labels(table, result).inc()
    SPARK_BATCH_DURATION.labels(table).observe(seconds)
    SPARK_BATCH_ROWS.labels(table).observe(rows)


# -- maintenance helpers ------------------------------------------------------------------------------
def expire_finished(table: str, seconds: float, snapshots_deleted: int, files_deleted: int,
                    ok: bool = True) -> None:
    EXPIRE_RUNS.labels(table, "success" if ok else "failed").inc()
    EXPIRE_DURATION.labels(table).observe(seconds)
    EXPIRE_SNAPSHOTS.labels(table).inc(snapshots_deleted)
    EXPIRE_FILES.labels(table).inc(files_deleted)
    if ok:
        EXPIRE_LAST_SUCCESS.labels(table).set(time.time())


def orphan_cleanup_finished(table: str, files_deleted: int, bytes_deleted: int, ok: bool = True) -> None:
    ORPHAN_RUNS.labels(table, "success" if ok else "failed").inc()
    ORPHAN_FILES.labels(table).inc(files_deleted)
    ORPHAN_BYTES.labels(table).inc(bytes_deleted)
    if ok:
        ORPHAN_LAST_SUCCESS.labels(table).set(time.time())


def iceberg_sync_failed(table: str, lag_snapshots: int) -> None:
    ICEBERG_SYNC_FAILURES.labels(table).inc()
    ICEBERG_SYNC_LAG.labels(table).set(lag_snapshots)


def iceberg_statistics_failed(table: str) -> None:
    ICEBERG_STATISTICS_FAILURES.labels(table).inc()


def iceberg_sync_succeeded(table: str) -> None:
    if _first_time("iceberg", table):
        ICEBERG_SYNC_FAILURES.labels(table)  # the series starts at zero: increase() sees the first failure
    ICEBERG_SYNC_LAG.labels(table).set(0)


class _ExpireOutcome(Protocol):
    expired: list[int]
    data_files_deleted: int
    metadata_files_deleted: int


class _OrphanOutcome(Protocol):
    deleted: list[str]
    deleted_bytes: int


P = ParamSpec("P")
E = TypeVar("E", bound=_ExpireOutcome)
OR = TypeVar("OR", bound=_OrphanOutcome)


def _table_of(args: Any) -> str:
    table = args[0] if args else ""
    return str(getattr(table, "identifier", table))


def expiry_run(func: Callable[P, E]) -> Callable[P, E]:
    """Decorates ``expire_snapshots(table, ...)``: each call is a run (failed if it raises)."""

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> E:
        started = time.monotonic()
        try:
            result = func(*args, **kwargs)
        except Exception:
            expire_finished(_table_of(args), time.monotonic() - started, 0, 0, ok=False)
            raise
        expire_finished(_table_of(args), time.monotonic() - started, len(result.expired),
                        result.data_files_deleted + result.metadata_files_deleted)
        return result

    return run


def orphan_cleanup_run(func: Callable[P, OR]) -> Callable[P, OR]:
    """Decorates ``remove_orphan_files(table, ..., dry_run=...)``; dry runs are not counted."""
    signature = inspect.signature(func)

    @functools.wraps(func)
    def run(*args: P.args, **kwargs: P.kwargs) -> OR:
        dry_run = bool(signature.bind(*args, **kwargs).arguments.get("dry_run", False))
        try:
            result = func(*args, **kwargs)
        except Exception:
            if not dry_run:
                orphan_cleanup_finished(_table_of(args), 0, 0, ok=False)
            raise
        if not dry_run:
            orphan_cleanup_finished(_table_of(args), len(result.deleted), result.deleted_bytes)
        return result

    return run


# -- exposure -----------------------------------------------------------------------------------------
class MetricsUnavailableError(RuntimeError):
    """prometheus-client (the `metrics` extra) is not installed."""


def _require() -> Any:
    """prometheus-client, with the `_created` series off: the text format exposes them as one
    extra gauge per counter and histogram series, which nothing here reads."""
    if _prom is None:
        raise MetricsUnavailableError("Prometheus metrics need prometheus-client: pip install 'strata[metrics]'")
    _prom.disable_created_metrics()
    return _prom


def serve_metrics(port: int, host: str = DEFAULT_HOST) -> Any:
    """Serve /metrics of this process on host:port (loopback by default) from a daemon thread;
    returns the HTTP server (call ``shutdown()`` to stop it). Port 0 picks a free port
    (``server.server_port``)."""
    prom = _require()
    server, _thread = prom.start_http_server(port, addr=host)
    return server


def write_textfile(path: str) -> None:
    """Write this process's Strata metrics (``strata_*``; not the process/runtime ones, which mean
    nothing once a short-lived job has exited) to `path` atomically, in the text format the Strata
    exporter's METRICS_TEXTFILE_DIR and node exporter's textfile collector read. Name the file
    after the job (``<job>.prom``); its directory is created if missing."""
    prom = _require()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(_StrataOnly(prom.REGISTRY))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    prom.write_to_textfile(path, registry)


class _StrataOnly:
    """A collector serving the `strata_` families of another registry."""

    def __init__(self, source: Any):
        self.source = source

    def collect(self) -> Iterator[Any]:
        return (family for family in self.source.collect() if family.name.startswith("strata_"))
