"""Small-file compaction of append tables: a coordinator plans tasks (picklable, so many workers
can run them), a worker rewrites each task's files into files of the target size.

Within a bucket only contiguous files (by sequence number) are merged, so bucketed append tables
keep their write order."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from strata import metrics
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.table.commit_message import CommitMessage
from strata.table.paths import PathFactory

if TYPE_CHECKING:
    from strata.table.table import Table


@dataclass
class AppendCompactTask:
    partition: bytes
    bucket: int
    total_buckets: int
    files: list[DataFileMeta]


def plan_append_compaction(table: Table, full: bool = False,
                           partitions: list[bytes] | None = None) -> list[AppendCompactTask]:
    """Contiguous runs of small files (at least compaction.min.file-num, at most .max.file-num)."""
    target = table.core.target_file_size(False)
    min_files = 2 if full else int(table.core.get("compaction.min.file-num"))
    max_files = int(table.core.get("compaction.max.file-num"))
    buckets: dict[tuple[bytes, int, int], list[DataFileMeta]] = defaultdict(list)
    for entry in table.new_scan().plan_entries():
        if partitions is None or entry.partition in partitions:
            buckets[(entry.partition, entry.bucket, entry.total_buckets)].append(entry.file)
    tasks = []
    for (partition, bucket, total), files in buckets.items():
        files.sort(key=lambda f: f.min_sequence_number)
        run: list[DataFileMeta] = []
        for f in [*files, None]:
            small = f is not None and (full or f.file_size < target)
            if small and f is not None and len(run) < max_files:
                run.append(f)
                continue
            if len(run) >= min_files:
                tasks.append(AppendCompactTask(partition, bucket, total, run))
            run = [f] if small and f is not None else []
    return tasks


def run_append_compaction(table: Table, task: AppendCompactTask) -> CommitMessage:
    """Rewrite a task's files (in order) into new files; the message replaces them."""
    from strata.schema.evolution import check_rewritable
    from strata.table.write import TableWrite

    started = time.monotonic()
    config = TableWrite(table).config
    partition_dir = table.partition_dir(table.new_scan()._partition_values(task.partition))
    paths = PathFactory(table.path)
    bucket_dir = paths.bucket_dir(partition_dir, task.bucket)
    writer = DataFileWriter(table.file_io, paths, bucket_dir, config)
    names = table.schema.field_names

    def batches():
        for f in task.files:
            check_rewritable(table.schema, f.schema_id, f.file_name, str(table.identifier))
            mapping = ColumnMapping(table.schema, table.schema_at(f.schema_id), names)
            yield from read_file(table.file_io, f"{bucket_dir}/{f.file_name}", mapping)

    after = writer.write_stream(batches(), level=0, file_source=FILE_SOURCE_COMPACT,
                                first_sequence=task.files[0].min_sequence_number)
    metrics.compaction_finished(str(table.identifier), time.monotonic() - started, task.files, after)
    return CommitMessage(task.partition, task.bucket, task.total_buckets,
                         compact_before=list(task.files), compact_after=after)
