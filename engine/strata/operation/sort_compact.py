"""Sort compaction of append tables (Paimon's ``compact`` with ``order_strategy`` and ``order_by``).

Rewrites every data file of the selected partitions into files sorted by some columns, so that
each file covers a narrow range of them and file-level min/max statistics prune range queries:

- ``order``: lexicographic by the columns (nulls first); best for filters on the first column.
- ``zorder``: by the interleaved bits of the columns' order-preserving bytes
  (``strata.operation.zorder``); clusters on every column at once, for filters on any of them.

Only unaware-bucket append tables (``bucket = -1``) qualify, as in Paimon: the files of a
bucketed append table keep write order within a bucket (readers may rely on it, like a queue),
and primary-key files are ordered by key. The result is one COMPACT snapshot that deletes the old
files and adds the sorted ones; a concurrent compaction of the same files fails it with
CommitConflictError (concurrent appends are kept). A partition is sorted in memory, as a whole.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from strata import metrics
from strata.deletionvectors import DeletionFile, deleted_positions
from strata.errors import CommitConflictError, CommitFailedError
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.io.paths import PathFactory
from strata.manifest.commit_message import CommitMessage
from strata.manifest.data_file_meta import DataFileMeta
from strata.operation.append_compact import AppendCompactTask, DeletionState, compaction_index_changes
from strata.operation.commit import CommitResult
from strata.operation.committer import NewCommit
from strata.operation.zorder import check_zorder_type, zorder_sort_indices
from strata.scan.planner import TableScan
from strata.store import FileStore, HasStore, store_of
from strata.table.write import TableWrite

ORDER = "order"
ZORDER = "zorder"
SORT_STRATEGIES = (ORDER, ZORDER)


class SortCompactTask(AppendCompactTask):
    """All live files of one partition (bucket-0 of an unaware-bucket table), with their deletion
    vectors and the partition's index files as of the planning snapshot."""


def sort_compact(table: FileStore | HasStore, columns: Sequence[str], new_commit: NewCommit, strategy: str = ORDER,
                 partitions: list[bytes] | None = None, commit_user: str | None = None) -> CommitResult:
    """Sort-compact `partitions` (serialized; None: every partition) and commit one COMPACT
    snapshot. On a failure that surely published nothing, the files written so far are deleted;
    after an unknown outcome (CommitStateUnknownError) they are kept: the snapshot may yet name them."""
    table = store_of(table)
    columns = check_sort_compaction(table, columns, strategy)
    messages: list[CommitMessage] = []
    try:
        tasks = plan_sort_compaction(table, partitions)
        for task in tasks:
            messages.append(run_sort_compaction(table, task, columns, strategy))
        messages += compaction_index_changes(table, tasks)  # deletion vectors of the rewritten files
    except BaseException:
        _delete_written(table, messages)
        raise
    try:
        return new_commit(commit_user).commit(messages)
    except (CommitConflictError, CommitFailedError):
        _delete_written(table, messages)  # definitely not published (an unknown outcome raises otherwise)
        raise


def check_sort_compaction(table: FileStore | HasStore, columns: Sequence[str], strategy: str) -> list[str]:
    """Refuse tables, strategies and columns sort compaction cannot handle; the sort columns."""
    table = store_of(table)
    where = f"table {table.identifier}"
    if table.schema.primary_keys:
        raise ValueError(f"sort compaction of {where} is not supported: it has a primary key "
                         f"{table.schema.primary_keys} (its files are ordered by key); use compact()")
    if table.core.bucket != -1:
        raise ValueError(f"sort compaction of {where} needs bucket = -1 (unaware-bucket append table); "
                         f"it has bucket = {table.core.bucket}, whose files keep write order per bucket")
    if strategy not in SORT_STRATEGIES:
        raise ValueError(f"unknown sort strategy {strategy!r} for {where}: use one of {list(SORT_STRATEGIES)}")
    names = [c.strip() for c in (columns.split(",") if isinstance(columns, str) else columns) if c.strip()]
    if not names:
        raise ValueError(f"sort compaction of {where} needs at least one column to sort by")
    for name in names:
        if name not in table.schema.field_names:
            raise ValueError(f"sort column {name!r} is not a column of {where}: "
                             f"columns are {table.schema.field_names}")
    if len(set(names)) != len(names):
        raise ValueError(f"sort columns of {where} repeat a column: {names}")
    if strategy == ZORDER:
        for name in names:
            try:
                check_zorder_type(name, table.schema.field(name).type.to_arrow())
            except TypeError as exc:
                raise ValueError(f"{where}: {exc}") from None
    return names


def plan_sort_compaction(table: FileStore | HasStore, partitions: list[bytes] | None = None) -> list[SortCompactTask]:
    """One task per selected partition that has files."""
    table = store_of(table)
    groups: dict[tuple[bytes, int, int], list[DataFileMeta]] = defaultdict(list)
    scan = TableScan(table)
    snapshot = scan.snapshot()
    for entry in scan.plan_entries(snapshot):
        if partitions is None or entry.partition in partitions:
            groups[(entry.partition, entry.bucket, entry.total_buckets)].append(entry.file)
    state = DeletionState.of(table, snapshot.index_manifest if snapshot else None) \
        if table.core.get("deletion-vectors.enabled") else None
    tasks = []
    for (partition, bucket, total), files in groups.items():
        task = SortCompactTask(partition, bucket, total, sorted(files, key=lambda f: f.min_sequence_number))
        if state is not None:
            vectors = state.files.get((partition, bucket), {})
            task.deletion_files = {f.file_name: vectors[f.file_name] for f in files if f.file_name in vectors}
            task.index_entries = list(state.index.get((partition, bucket), []))
        tasks.append(task)
    return tasks


def run_sort_compaction(table: FileStore | HasStore, task: SortCompactTask, columns: Sequence[str],
                        strategy: str) -> CommitMessage:
    """Read the task's files, sort the rows and write them into files of about the target size."""
    table = store_of(table)
    started = time.monotonic()
    config = TableWrite(table).config
    paths = PathFactory(table.path)
    bucket_dir = paths.bucket_dir(table.partition_dir(TableScan(table)._partition_values(task.partition)),
                                  task.bucket)
    tables = list(_read(table, bucket_dir, task.files, task.deletion_files))
    # every row deleted: the files are dropped, nothing is written
    data = pa.concat_tables(tables) if tables else table.schema.arrow_schema().empty_table()
    data = data.take(sort_indices(table, data, columns, strategy))
    writer = DataFileWriter(table.file_io, paths, bucket_dir, config)
    step = _rows_per_file(task.files, config.target_file_size)
    sequence = task.files[0].min_sequence_number
    after: list[DataFileMeta] = []
    try:
        for start in range(0, data.num_rows, step):
            # one write per slice closes a file there: sizes follow the target even where the
            # writer's own rolling checks size only every ROLL_CHECK_ROWS rows
            after += writer.write(data.slice(start, step), level=0, file_source=FILE_SOURCE_COMPACT,
                                  first_sequence=sequence + start)
    except BaseException:
        _delete_files(table, bucket_dir, after)
        raise
    metrics.compaction_finished(str(table.identifier), time.monotonic() - started, task.files, after)
    return CommitMessage(task.partition, task.bucket, task.total_buckets,
                         compact_before=list(task.files), compact_after=after)


def sort_indices(table: FileStore | HasStore, data: pa.Table, columns: Sequence[str], strategy: str) -> pa.Array:
    table = store_of(table)
    if strategy == ZORDER:
        return zorder_sort_indices(data, columns, int(table.core.get("zorder.var-length-contribution")))
    return pc.sort_indices(data, sort_keys=[(c, "ascending", "at_start") for c in columns])


def _read(table: FileStore, bucket_dir: str, files: list[DataFileMeta],
          vectors: dict[str, DeletionFile]) -> Iterator[pa.Table]:
    """The files' rows, without those their deletion vectors mark."""
    from strata.schema.evolution import check_rewritable

    names = table.schema.field_names
    for f in files:
        check_rewritable(table.schema, f.schema_id, f.file_name, str(table.identifier))
        mapping = ColumnMapping(table.schema, table.schema_at(f.schema_id), names)
        vector = vectors.get(f.file_name)
        deleted = deleted_positions(table.file_io, vector) if vector is not None else None
        yield from read_file(table.file_io, f"{bucket_dir}/{f.file_name}", mapping, deleted=deleted)


def _rows_per_file(files: list[DataFileMeta], target_size: int) -> int:
    """Rows that fill a file of `target_size`, judged by the input files' bytes per row."""
    rows = sum(f.row_count for f in files)
    size = sum(f.file_size for f in files)
    return max(1, int(target_size * rows / size)) if rows and size else max(1, rows)


def _delete_written(table: FileStore, messages: list[CommitMessage]) -> None:
    paths = PathFactory(table.path)
    for m in messages:
        partition_dir = table.partition_dir(TableScan(table)._partition_values(m.partition))
        _delete_files(table, paths.bucket_dir(partition_dir, m.bucket), m.compact_after)


def _delete_files(table: FileStore, bucket_dir: str, files: list[DataFileMeta]) -> None:
    for f in files:
        table.file_io.delete(f"{bucket_dir}/{f.file_name}")
