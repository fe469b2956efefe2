"""Batch and streaming writes from Spark: executors write files, the driver commits them.

Each Spark task opens its own ``TableWrite``, writes the Arrow batches Spark gives it into new
data files (invisible until committed) and returns their ``CommitMessage``\\ s. The driver then
publishes all tasks' files as ONE snapshot (``commit``) or deletes them (``abort``).

Exactly-once streaming: a micro-batch is committed with commit user = a hash of the query's
checkpoint location (or the option ``commit-user``) and commit identifier = the batch id, in the
snapshot itself. Spark re-runs a batch whose ``commits/<id>`` marker is missing with the same id
and offsets; the committer finds that (user, id) already published and drops the replay's files.

Distribution and sequence numbers: Spark's write API cannot ask for a distribution, so the rows
of one bucket may reach several tasks, each writing its own files. Merging orders the records
of a key by sequence number; if two tasks numbered theirs from the same start (the bucket's
maximum + 1), a key written by both would tie, and Strata, Paimon and Trino could resolve the tie
differently until compaction. So task p numbers its records of a primary-key table from
maximum + 1 + p * 2^24 (``SEQUENCE_STRIDE``): within one commit, a later Spark partition wins, the
same way in every reader (unless a task writes more than 2^24 records to one bucket). The
numbers grow by about (partitions x 2^24) per commit, which leaves 2^63 room for billions of
commits. Which of two rows of one key in a DataFrame wins is still Spark's arbitrary partition
order: to control it, ``strata.spark.write_table`` / ``distribute_by_bucket`` repartition by
(partition, bucket), so each bucket is written by exactly one task, in its input order.

Spark writers run write-only by default (no compaction in the tasks: two tasks compacting one
bucket would conflict); compact with ``Table.compact`` / ``strata compact``, or pass
``write-only=false`` when the data is distributed by bucket. A compacting task waits for its
compactions before it returns, so their results are part of the micro-batch's commit.

Sink options for pipelines (streaming, and ``watermark.column`` also for batch appends):

``watermark.column``  an event-time column (TIMESTAMP, DATE or an integer type, taken as epoch
    milliseconds). Each task computes the maximum of the column over the rows it wrote and hands
    it to the driver with its commit messages; the snapshot records the maximum over the tasks
    as its ``watermark`` (milliseconds), never below the previous snapshot's, so a downstream
    ``scan.bounded.watermark`` can end a stream there. A batch without rows keeps the previous
    watermark. Not with ``outputMode("complete")`` / overwrites (their commits take none).
``lineage.job``       record lineage on every micro-batch commit (``strata.lineage``): the job
    name, and for each ``strata`` source of the query the snapshot the micro-batch consumed up
    to, read from Spark's offset log (``<checkpointLocation>/offsets/<batchId>``, local or
    ``file:`` checkpoints), where the source's offset also names its table. The upstream roots
    are copied forward, so ``consistent_set`` / ``lineage_graph`` see the stage.
``lineage.source``    the upstream table (``<warehouse>#<db>.<table>``, or ``<db>.<table>`` in the
    sink's warehouse) for a source offset that names no table (a checkpoint from before the
    source named it).

Throughput: Spark hands a task Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
rows (10,000 by default); the task coalesces them to COALESCE_ROWS before writing, but a larger
setting (e.g. 100,000) also saves Spark's per-batch conversion work.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from strata.errors import CommitStateUnknownError, CorruptMetadataError, OptionError, SnapshotNotFoundError
from strata.format import binary_row
from strata.manifest.commit_message import CommitMessage
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, NO_WATERMARK
from strata.spark.options import (
    TableRef,
    commit_user_for_checkpoint,
    get_bool,
    get_int,
    normalize,
    parse_partition_spec,
    table_ref,
)
from strata.spark.types import ROW_KIND_COLUMN, truncate_timestamps
from strata.table.commit import TableCommitResult
from strata.table.table import Table
from strata.table.write import TableWrite

log = logging.getLogger(__name__)
SEQUENCE_STRIDE = 1 << 24  # sequence numbers set aside per Spark task and bucket in one commit
COALESCE_ROWS = 128 * 1024
WATERMARK_COLUMN = "watermark.column"
LINEAGE_JOB = "lineage.job"
LINEAGE_SOURCE = "lineage.source"
_MILLIS_PER = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}  # (multiply, divide)


@dataclass
class StrataWriterMessage(WriterCommitMessage):
    """What one Spark task hands the driver: the commit messages of the files it wrote."""

    messages: list[CommitMessage] = field(default_factory=list)
    rows: int = 0
    partition_id: int = -1
    watermark: int | None = None  # max event time (epoch millis) of the rows, with watermark.column


# -- executor side ---------------------------------------------------------------------------------
def write_task(ref: TableRef, batches: Iterable[pa.RecordBatch], write_only: bool,
               commit_user: str, watermark_column: str | None = None, overwrite: bool = False) -> StrataWriterMessage:
    """Write one task's rows into new files (and the maximum of `watermark_column` over them);
    on failure delete what was written. `overwrite`: the rows replace their partitions (dynamic
    buckets are placed from an empty hash index)."""
    table = ref.load()
    partition_id = _partition_id()
    offset = max(partition_id, 0) * SEQUENCE_STRIDE if table.schema.primary_keys else 0
    # compaction=False: no compaction in this task; None: as the table says (`write-only`)
    writer = TableWrite(table, compaction=False if write_only else None, commit_user=commit_user,
                        sequence_offset=offset, overwrite=overwrite)
    rows = 0
    watermark: int | None = None
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            pending.append(batch)
            pending_rows += batch.num_rows
            if pending_rows >= COALESCE_ROWS:  # Spark's batches are small (10k rows): fewer, larger writes
                rows, watermark = _write_pending(writer, table, pending, watermark_column, rows, watermark)
                pending, pending_rows = [], 0
        rows, watermark = _write_pending(writer, table, pending, watermark_column, rows, watermark)
        # the task's writer is closed right after: a compaction still running would be lost
        messages = writer.prepare_commit(wait_compaction=not write_only)
    except BaseException:
        _discard_partial(table, writer)
        raise
    finally:
        writer.close()
    return StrataWriterMessage(messages, rows, partition_id, watermark)


def _write_pending(writer: TableWrite, table: Table, batches: list[pa.RecordBatch], watermark_column: str | None,
                   rows: int, watermark: int | None) -> tuple[int, int | None]:
    """Write `batches`; the running row count and event-time maximum."""
    if not batches:
        return rows, watermark
    data, kinds = to_table_rows(pa.Table.from_batches(batches), table)
    writer.write_arrow(data, row_kind=kinds)
    if watermark_column is not None:
        watermark = _later(watermark, event_time_millis(data.column(watermark_column)))
    return rows + data.num_rows, watermark


def event_time_millis(column: pa.ChunkedArray) -> int | None:
    """The maximum of an event-time column as epoch milliseconds (None without values)."""
    t = column.type
    if pa.types.is_timestamp(t):
        raw = pc.max(column.cast(pa.int64())).as_py()
        multiply, divide = _MILLIS_PER[t.unit]
        return None if raw is None else raw * multiply // divide
    if pa.types.is_date32(t):
        days = pc.max(column.cast(pa.int32())).as_py()
        return None if days is None else days * 86_400_000
    top = pc.max(column).as_py()
    return None if top is None else int(top)


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def to_table_rows(data: pa.Table, table: Table) -> tuple[pa.Table, pa.Array | None]:
    """Spark's columns renamed to the table's (Spark matches names case-insensitively),
    timestamps truncated to the table's precision, and the optional `_ROW_KIND` column split off
    as the row kinds (+I/-U/+U/-D) of a primary-key table."""
    by_lower = {n.lower(): n for n in table.schema.field_names}
    kinds = None
    names: list[str | None] = []
    for name in data.column_names:
        if name not in table.schema.field_names and name.lower() == ROW_KIND_COLUMN.lower():
            kinds = data.column(name).combine_chunks()
            names.append(None)
        else:
            names.append(name if name in table.schema.field_names else by_lower.get(name.lower(), name))
    if kinds is not None:
        keep = [i for i, n in enumerate(names) if n is not None]
        data = data.select(keep)
        names = [names[i] for i in keep]
    data = data.rename_columns([n for n in names if n is not None])
    return truncate_timestamps(data, table.schema), kinds


def _discard_partial(table: Table, writer: TableWrite) -> None:
    try:
        delete_files(table, writer.prepare_commit())
    except Exception:  # best effort: what remains is left to orphan-file cleanup
        log.warning("could not delete the files of a failed Spark task writing %s", table.identifier,
                    exc_info=True)


def _partition_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.partitionId() if context is not None else -1


# -- driver side -----------------------------------------------------------------------------------
def collect(messages: Sequence[Any]) -> list[CommitMessage]:
    """The commit messages of the tasks that succeeded (Spark passes None for failed ones)."""
    return [m for task in messages if isinstance(task, StrataWriterMessage) for m in task.messages]


def batch_watermark(table: Table, messages: Sequence[Any]) -> int | None:
    """The tasks' event-time maximum, never below the latest snapshot's watermark (None when no
    task saw an event time: the commit keeps the previous watermark)."""
    found = [task.watermark for task in messages
             if isinstance(task, StrataWriterMessage) and task.watermark is not None]
    if not found:
        return None
    latest = table.latest_snapshot()
    previous = latest.watermark if latest is not None and latest.watermark != NO_WATERMARK else None
    return _later(max(found), previous)


def written_paths(table: Table, messages: Sequence[CommitMessage]) -> list[str]:
    """Paths of the files the messages created (never `compact_before`: those were live)."""
    fields = table.schema.partition_fields()
    types = [f.type.to_arrow() for f in fields]
    out = []
    for m in messages:
        values = binary_row.deserialize(m.partition, types) if fields else []
        bucket_dir = table.paths.bucket_dir(table.partition_dir(values), m.bucket)
        for f in (*m.new_files, *m.changelog_files, *m.compact_after, *m.compact_changelog_files):
            out.append(f.external_path or f"{bucket_dir}/{f.file_name}")
            out.extend(f"{bucket_dir}/{extra}" for extra in f.extra_files)
    return out


def delete_files(table: Table, messages: Sequence[CommitMessage]) -> int:
    live = {f.file_name for m in messages for f in m.compact_before}
    paths = [p for p in written_paths(table, messages) if p.rsplit("/", 1)[-1] not in live]
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            table.file_io.delete(path)
    return len(paths)


def committed_since(table: Table, commit_user: str, after_snapshot: int, identifier: int | None = None) -> bool:
    """Did `commit_user` publish a snapshot (with `identifier`, if given) after `after_snapshot`?
    Snapshots that cannot be read make it unknown (CommitStateUnknownError), never "no": the
    answer decides whether files are deleted."""
    manager = table.snapshot_manager
    try:
        latest = manager.latest_id() or 0
        for sid in range(latest, after_snapshot, -1):
            try:
                snap = manager.snapshot(sid)
            except SnapshotNotFoundError:
                continue  # expired meanwhile
            if snap.commit_user == commit_user and (identifier is None or snap.commit_identifier == identifier):
                return True
    except (OSError, CorruptMetadataError) as exc:
        raise CommitStateUnknownError(f"cannot tell whether commit user {commit_user!r} committed to "
                                      f"{table.identifier} after snapshot {after_snapshot}: {exc}") from exc
    return False


def _keep_files_unknown(table: Table, exc: Exception, count: int) -> None:
    log.warning("%s: aborting a write whose commit may have landed (%s); kept its %d file(s), orphan-file "
                "cleanup removes them if it did not", table.identifier, exc, count)


def check_columns(names: Sequence[str], table: Table) -> None:
    """Fail on the driver, before any task runs, when the DataFrame's columns do not match."""
    lowered = {n.lower() for n in names}
    missing = [n for n in table.schema.field_names if n not in names and n.lower() not in lowered]
    known = {n.lower() for n in table.schema.field_names} | {ROW_KIND_COLUMN.lower()}
    unknown = [n for n in names if n.lower() not in known]
    if missing or unknown:
        raise OptionError(f"the DataFrame written to {table.identifier} "
                          + (f"lacks column(s) {missing}" if missing else "")
                          + (" and " if missing and unknown else "")
                          + (f"has column(s) {unknown} the table does not have" if unknown else "")
                          + f"; the table's columns are {table.schema.field_names}")


def _watermark_column(name: str | None, table: Table, overwrite: bool) -> str | None:
    """The table column of option watermark.column, checked: it must hold event times."""
    if name is None:
        return None
    if overwrite:
        raise OptionError(f"option {WATERMARK_COLUMN} works with appends only (an overwrite commit records no "
                          "watermark); use outputMode('append') / mode('append')")
    by_lower = {n.lower(): n for n in table.schema.field_names}
    column = name if name in table.schema.field_names else by_lower.get(name.lower())
    if column is None:
        raise OptionError(f"option {WATERMARK_COLUMN}={name!r} is not a column of {table.identifier} "
                          f"({table.schema.field_names})")
    t = table.schema.field(column).type.to_arrow()
    if not (pa.types.is_timestamp(t) or pa.types.is_date32(t) or pa.types.is_integer(t)):
        raise OptionError(f"option {WATERMARK_COLUMN}: column {column!r} of {table.identifier} is {t}; an event "
                          "time must be a TIMESTAMP, DATE or integer (epoch milliseconds) column")
    return column


def _check_log_store(table: Table) -> None:
    """A transactional Kafka log store commits its transaction in the process that wrote the
    records; Spark writes on executors and commits on the driver."""
    from strata.log.options import log_enabled, log_options

    if log_enabled(table) and log_options(table).transactional:
        raise OptionError(f"table {table.identifier} has log.system=kafka with log.consistency=transactional, "
                          "which Spark cannot write (its tasks write, the driver commits); use "
                          "log.consistency=eventual or write with Strata's own writer")


_Commit = TypeVar("_Commit", bound=Callable[..., None])


def cause_first(commit: _Commit) -> _Commit:
    """Spark reports a failed commit as 'Failed to commit or abort Python data source write: '
    followed by the commit worker's traceback, the cause last after every frame. The traceback goes
    to the driver's log instead and the message is the error alone ('ValueError: ...'): the worker
    formats it under SPARK_HIDE_TRACEBACK (pyspark.util.handle_worker_exception), and exits after a
    failure (pyspark.sql.worker.utils.worker_run), so the setting ends with it."""

    @functools.wraps(commit)
    def surfacing(*args: Any, **kwargs: Any) -> None:
        try:
            commit(*args, **kwargs)
        except Exception:
            log.exception("Spark commit failed")
            os.environ["SPARK_HIDE_TRACEBACK"] = "1"
            raise

    return surfacing  # type: ignore[return-value]


class _Committer:
    """Settings shared by the batch and streaming writers (created on the driver, pickled to
    the executors and to the driver-side commit worker)."""

    def __init__(self, ref: TableRef, settings: dict[str, str], overwrite: bool, schema: StructType | None = None):
        self.ref = ref
        self.settings = settings
        self.overwrite = overwrite
        self.write_only = get_bool(settings, "write-only", True)
        mode = settings.get("overwrite-mode", settings.get("partitionoverwritemode", "static")).lower()
        if mode not in ("static", "dynamic"):
            raise OptionError(f"overwrite-mode must be static or dynamic, got {mode!r}")
        self.dynamic = mode == "dynamic"
        spec = settings.get("overwrite-partition")
        self.static_partition = parse_partition_spec(spec) if spec else None
        if (self.dynamic or self.static_partition) and not overwrite:
            raise OptionError("overwrite-mode=dynamic and overwrite-partition need mode('overwrite')")
        if self.dynamic and self.static_partition:
            raise OptionError("overwrite-partition (static) and overwrite-mode=dynamic exclude each other")
        table = ref.load()
        self.base_snapshot = table.snapshot_manager.latest_id() or 0
        _check_log_store(table)
        if schema is not None:
            check_columns(schema.fieldNames(), table)
        self.watermark_column = _watermark_column(settings.get(WATERMARK_COLUMN), table, overwrite)

    def _typed_partition(self, table: Table) -> dict[str, Any] | None:
        """'dt=2024-01-01,h=3' as the partition columns' own Python values."""
        if self.static_partition is None:
            return None
        out: dict[str, Any] = {}
        by_lower = {k.lower(): k for k in table.schema.partition_keys}
        for key, text in self.static_partition.items():
            name = key if key in table.schema.partition_keys else by_lower.get(key.lower())
            if name is None:
                raise OptionError(f"overwrite-partition names {key!r}, which is not a partition key of "
                                  f"{table.identifier} ({table.schema.partition_keys})")
            arrow_type = table.schema.field(name).type.to_arrow()
            out[name] = pa.scalar(text).cast(arrow_type).as_py()
        return out

    def _publish(self, table: Table, commit_user: str, messages: list[CommitMessage], identifier: int,
                 properties: dict[str, str] | None, watermark: int | None = None) -> TableCommitResult:
        """Commit the tasks' messages. A batch of a deletion-vector table that is durable but not
        yet visible (its compaction kept failing) is logged; the committer counted it in
        strata_commit_compactions_abandoned_total{result="not_visible"}."""
        commit = table.new_commit(commit_user)
        if not self.overwrite:
            result = commit.commit(messages, identifier, properties, watermark)
        else:
            partition = self._typed_partition(table)
            result = commit.overwrite(messages, partition, identifier, dynamic=self.dynamic, properties=properties)
        if result.not_yet_visible is not None:
            log.warning("%s: batch %s of %s is committed (the query goes on) but not yet visible: %s",
                        table.identifier, identifier, commit_user, result.not_yet_visible)
        return result


class StrataBatchWriter(_Committer, DataSourceArrowWriter):
    """``df.write.format("strata")``: append (upsert for primary-key tables) or, with
    ``mode("overwrite")``, replace the whole table, the static ``overwrite-partition`` or, with
    ``overwrite-mode=dynamic``, the partitions the data touches. Idempotent batch writes (as
    Delta's txnAppId/txnVersion): options ``commit-user`` + ``commit-identifier``."""

    def __init__(self, ref: TableRef, settings: dict[str, str], overwrite: bool, schema: StructType | None = None):
        super().__init__(ref, settings, overwrite, schema)
        import uuid

        self.identifier = get_int(settings, "commit-identifier")
        user = settings.get("commit-user")
        if self.identifier is not None and not user:
            raise OptionError("commit-identifier needs commit-user (a stable name of the writing job)")
        self.commit_user = user or f"spark-batch-{uuid.uuid4()}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StrataWriterMessage:
        return write_task(self.ref, iterator, self.write_only, self.commit_user, self.watermark_column,
                          self.overwrite)

    @cause_first
    def commit(self, messages: list[Any]) -> None:
        table = self.ref.load()
        files = collect(messages)
        identifier = self.identifier if self.identifier is not None else BATCH_COMMIT_IDENTIFIER
        result = self._publish(table, self.commit_user, files, identifier, None, batch_watermark(table, messages))
        if result.skipped_as_duplicate:
            removed = delete_files(table, files)
            log.info("%s: commit %s of %s already published; removed %d new files", table.identifier,
                     identifier, self.commit_user, removed)

    def abort(self, messages: list[Any]) -> None:
        table = self.ref.load()
        files = collect(messages)
        try:
            if committed_since(table, self.commit_user, self.base_snapshot, self.identifier):
                return  # the commit landed after all (e.g. failure after publishing): keep the files
        except CommitStateUnknownError as exc:
            _keep_files_unknown(table, exc, len(files))
            return
        delete_files(table, files)


class StrataStreamWriter(_Committer, DataSourceStreamArrowWriter):
    """``df.writeStream.format("strata")``: one snapshot per micro-batch, exactly once.
    ``outputMode("complete")`` overwrites the table with each batch."""

    def __init__(self, ref: TableRef, settings: dict[str, str], overwrite: bool, schema: StructType | None = None):
        super().__init__(ref, settings, overwrite, schema)
        user = settings.get("commit-user")
        if not user:
            location = settings.get("checkpointlocation")
            if not location:
                raise OptionError("the strata streaming sink needs a checkpoint location "
                                  "(option checkpointLocation) or the option commit-user")
            user = commit_user_for_checkpoint(location)
        self.commit_user = user
        self.lineage_job = settings.get(LINEAGE_JOB)
        if self.lineage_job is not None and not settings.get("checkpointlocation"):
            raise OptionError(f"option {LINEAGE_JOB} needs the query's checkpointLocation (the consumed upstream "
                              "snapshots are read from its offset log)")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StrataWriterMessage:
        return write_task(self.ref, iterator, self.write_only, self.commit_user, self.watermark_column,
                          self.overwrite)

    @cause_first
    def commit(self, messages: list[Any], batchId: int) -> None:
        table = self.ref.load()
        files = collect(messages)
        last = table.new_commit(self.commit_user).last_committed_identifier()
        if last is not None and batchId < last:
            delete_files(table, files)
            raise RuntimeError(
                f"micro-batch {batchId} of commit user {self.commit_user} is older than batch {last}, which is "
                f"already committed to {table.identifier}: the checkpoint was deleted or replaced. Use a new "
                "checkpoint location together with a new option commit-user, or restore the checkpoint.")
        result = None
        if last is None or batchId > last:
            properties = {"spark.batch-id": str(batchId), **self._lineage(batchId)}
            result = self._publish(table, self.commit_user, files, batchId, properties,
                                   batch_watermark(table, messages))
        if result is None or result.skipped_as_duplicate:
            removed = delete_files(table, files)
            log.warning("%s: micro-batch %d of %s was already committed; dropped the replay (%d files)",
                        table.identifier, batchId, self.commit_user, removed)

    def _lineage(self, batch_id: int) -> dict[str, str]:
        """With lineage.job: the lineage properties of micro-batch `batch_id` (the snapshots its
        strata sources consumed up to, from the checkpoint's offset log)."""
        if self.lineage_job is None:
            return {}
        from strata.lineage.record import lineage_properties
        from strata.spark.offset_log import source_offsets

        checkpoint = self.settings["checkpointlocation"]
        reads = {self._upstream(offset, checkpoint): int(offset["snapshot"])
                 for offset in source_offsets(checkpoint, batch_id)}
        return lineage_properties(self.lineage_job, reads=reads)

    def _upstream(self, offset: dict, checkpoint: str) -> Table:
        name = offset.get("table") or self.settings.get(LINEAGE_SOURCE)
        if not name:
            raise OptionError(f"micro-batch offsets in {checkpoint} do not name the upstream table: set the option "
                              f"{LINEAGE_SOURCE} ('<warehouse>#<db>.<table>')")
        path = name if "#" in name else f"{self.ref.warehouse}#{name}"
        catalog = {k: v for k, v in self.settings.items() if k.startswith("catalog.")}
        return table_ref(normalize({**catalog, "path": path})).load()

    def abort(self, messages: list[Any], batchId: int) -> None:
        table = self.ref.load()
        files = collect(messages)
        try:
            last = table.new_commit(self.commit_user).last_committed_identifier()
        except (OSError, CorruptMetadataError) as exc:
            _keep_files_unknown(table, exc, len(files))
            return
        if last is not None and last >= batchId:
            return  # this batch (or its earlier run) is committed: its files may be live
        delete_files(table, files)
