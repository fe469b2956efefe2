"""Small-file compaction of append tables: a coordinator plans tasks (picklable, so many workers
can run them), a worker rewrites each task's files into files of the target size.

Within a bucket only contiguous files (by sequence number) are merged, so bucketed append tables
keep their write order.

With deletion vectors, a file whose deleted rows exceed ``compaction.delete-ratio-threshold`` of
its rows is rewritten even if it is large (alone if need be; a full compaction rewrites every file
with deletions), the rewrite leaves the deleted rows out, and the vectors of the rewritten files
are dropped from the index files once per (partition, bucket) by ``compaction_index_changes``,
on the committing side (tasks may run on other machines). The tasks carry the vectors they read
as of the planning snapshot; the commit checks they are still the live ones."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from strata import metrics
from strata.deletionvectors import BucketDeletionVectors, DeletionFile, deleted_positions, deletion_files
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.io.paths import PathFactory
from strata.manifest.commit_message import CommitMessage
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, IndexManifestEntry
from strata.scan.planner import TableScan
from strata.store import FileStore, HasStore, store_of
from strata.table.write import TableWrite


@dataclass
class AppendCompactTask:
    partition: bytes
    bucket: int
    total_buckets: int
    files: list[DataFileMeta]
    # deletion vectors: where the vector of each file is, and the bucket's live index files, as
    # of the planning snapshot
    deletion_files: dict[str, DeletionFile] = field(default_factory=dict)
    index_entries: list[IndexManifestEntry] = field(default_factory=list)


class RewriteTask(Protocol):
    """A task that rewrites some live files of one (partition, bucket) (compaction, sort compaction)."""

    partition: bytes
    bucket: int
    total_buckets: int
    files: list[DataFileMeta]
    index_entries: list[IndexManifestEntry]


@dataclass
class DeletionState:
    """The deletion vectors of a table as of one snapshot."""

    files: dict[tuple[bytes, int], dict[str, DeletionFile]]  # (partition, bucket) -> data file -> vector
    index: dict[tuple[bytes, int], list[IndexManifestEntry]]  # (partition, bucket) -> its index files

    @classmethod
    def of(cls, table: FileStore, index_manifest: str | None) -> DeletionState:
        entries = [e for e in table.manifest_store.read_index_manifest(index_manifest)
                   if e.index_type == INDEX_TYPE_DELETION_VECTORS]
        index: dict[tuple[bytes, int], list[IndexManifestEntry]] = defaultdict(list)
        for e in entries:
            index[(e.partition, e.bucket)].append(e)
        return cls(deletion_files(table.path, entries), dict(index))

    def deleted_rows(self, partition: bytes, bucket: int, f: DataFileMeta) -> int:
        found = self.files.get((partition, max(bucket, 0)), {}).get(f.file_name)
        return (found.cardinality or 0) if found is not None else 0


def plan_append_compaction(table: FileStore | HasStore, full: bool = False,
                           partitions: list[bytes] | None = None) -> list[AppendCompactTask]:
    """Contiguous runs of small files (at least compaction.min.file-num, at most .max.file-num);
    with deletion vectors, also files with many deleted rows (see the module's docstring)."""
    table = store_of(table)
    target = table.core.target_file_size(False)
    min_files = 2 if full else int(table.core.get("compaction.min.file-num"))
    max_files = int(table.core.get("compaction.max.file-num"))
    threshold = table.core.delete_ratio_threshold
    scan = TableScan(table)
    snapshot = scan.snapshot()
    state = DeletionState.of(table, snapshot.index_manifest if snapshot else None) \
        if table.core.get("deletion-vectors.enabled") else None
    buckets: dict[tuple[bytes, int, int], list[DataFileMeta]] = defaultdict(list)
    for entry in scan.plan_entries(snapshot):
        if partitions is None or entry.partition in partitions:
            buckets[(entry.partition, entry.bucket, entry.total_buckets)].append(entry.file)
    tasks = []
    for (partition, bucket, total), files in buckets.items():
        files.sort(key=lambda f: f.min_sequence_number)

        def rewrite_alone(f: DataFileMeta, partition: bytes = partition, bucket: int = bucket) -> bool:
            """Deleted rows make the file worth rewriting by itself."""
            deleted = state.deleted_rows(partition, bucket, f) if state is not None else 0
            return deleted > 0 and (full or deleted > threshold * f.row_count)

        run: list[DataFileMeta] = []
        for f in [*files, None]:
            small = f is not None and (full or f.file_size < target or rewrite_alone(f))
            if small and f is not None and len(run) < max_files:
                run.append(f)
                continue
            if len(run) >= min_files or any(rewrite_alone(g) for g in run):
                tasks.append(_task(partition, bucket, total, run, state))
            run = [f] if small and f is not None else []
    return tasks


def _task(partition: bytes, bucket: int, total: int, files: list[DataFileMeta],
          state: DeletionState | None) -> AppendCompactTask:
    if state is None:
        return AppendCompactTask(partition, bucket, total, files)
    key = (partition, max(bucket, 0))
    vectors = state.files.get(key, {})
    return AppendCompactTask(partition, bucket, total, files,
                             {f.file_name: vectors[f.file_name] for f in files if f.file_name in vectors},
                             list(state.index.get(key, [])))


def compaction_index_changes(table: FileStore | HasStore, tasks: Sequence[RewriteTask]) -> list[CommitMessage]:
    """Deletion vectors: the index changes dropping the vectors of every file the tasks rewrote,
    one message per (partition, bucket), to commit with the tasks' messages."""
    table = store_of(table)
    if not table.core.get("deletion-vectors.enabled") or table.schema.primary_keys:
        return []
    grouped: dict[tuple[bytes, int], list[RewriteTask]] = defaultdict(list)
    for task in tasks:
        grouped[(task.partition, max(task.bucket, 0))].append(task)
    paths = PathFactory(table.path)
    target = table.core.get("deletion-vectors.index-file.target-size") \
        or table.core.get("deletion-vector.index-file.target-size")
    messages = []
    for (partition, bucket), group in grouped.items():
        vectors = BucketDeletionVectors(table.file_io, paths, partition, bucket, group[0].index_entries,
                                        bool(table.core.get("deletion-vectors.bitmap64")),
                                        int(target) if table.core.bucket < 1 else None)
        for task in group:
            for f in task.files:
                vectors.remove(f.file_name)
        changes = vectors.prepare_commit()
        if changes:
            messages.append(CommitMessage(partition, group[0].bucket, group[0].total_buckets,
                                          compact_index_changes=changes))
    return messages


def run_append_compaction(table: FileStore | HasStore, task: AppendCompactTask) -> CommitMessage:
    """Rewrite a task's files (in order) into new files; the message replaces them."""
    table = store_of(table)
    from strata.schema.evolution import check_rewritable

    started = time.monotonic()
    config = TableWrite(table).config
    partition_dir = table.partition_dir(TableScan(table)._partition_values(task.partition))
    paths = PathFactory(table.path)
    bucket_dir = paths.bucket_dir(partition_dir, task.bucket)
    writer = DataFileWriter(table.file_io, paths, bucket_dir, config)
    names = table.schema.field_names

    def batches():
        for f in task.files:
            check_rewritable(table.schema, f.schema_id, f.file_name, str(table.identifier))
            mapping = ColumnMapping(table.schema, table.schema_at(f.schema_id), names)
            vector = task.deletion_files.get(f.file_name)
            deleted = deleted_positions(table.file_io, vector) if vector is not None else None
            yield from read_file(table.file_io, f"{bucket_dir}/{f.file_name}", mapping, deleted=deleted)

    after = writer.write_stream(batches(), level=0, file_source=FILE_SOURCE_COMPACT,
                                first_sequence=task.files[0].min_sequence_number)
    metrics.compaction_finished(str(table.identifier), time.monotonic() - started, task.files, after)
    return CommitMessage(task.partition, task.bucket, task.total_buckets,
                         compact_before=list(task.files), compact_after=after)
