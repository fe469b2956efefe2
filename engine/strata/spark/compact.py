"""Distributed compaction on Spark: plan on the driver, compact on the executors, commit once.

    from strata.spark.compact import compact
    result = compact(spark, "s3://wh#db.orders", full=False, **catalog_options)

The driver reads the table's live files once and plans per (partition, bucket): for a
primary-key table, every bucket whose sorted runs reach the compaction trigger (``full``: every
bucket with more than one run, or with files outside the top level); for an append table, the
tasks of the append compaction coordinator (``strata.operation.append_compact``). The units are
packed into Spark tasks by size; each task loads the table itself (schema, FileIO: the files
go through the object store, never through the driver) and returns its commit messages. The
driver then commits them all in ONE COMPACT snapshot. The commit checks every replaced file is
still live, so a concurrent compaction of the same files, or an overwrite, makes this one fail
with ``CommitConflictError``; the files this job wrote are deleted then, and nothing is published.
"""

from __future__ import annotations

import contextlib
import heapq
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.errors import CommitConflictError
from strata.spark.options import TableRef, normalize, table_ref

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from strata.manifest.commit_message import CommitMessage
    from strata.manifest.data_file_meta import DataFileMeta
    from strata.operation.append_compact import AppendCompactTask
    from strata.table.table import Table

DEFAULT_COMMIT_USER = "strata-spark-compaction"  # each run adds its own suffix (see compact)

BucketKey = tuple[bytes, int]


@dataclass
class BucketUnit:
    """One primary-key bucket to compact, with the live files the driver saw."""

    partition: bytes
    bucket: int
    files: list[DataFileMeta]

    @property
    def size(self) -> int:
        return sum(f.file_size for f in self.files)


@dataclass
class CompactionResult:
    snapshot_id: int | None  # None: nothing to compact
    units: int  # buckets (primary-key tables) or append compaction tasks planned
    tasks: int  # Spark tasks they ran in
    files_before: int
    files_after: int
    executors: list[str] = field(default_factory=list)  # hosts:pids that ran the tasks


def compact(spark: SparkSession, path: str | None = None, full: bool = False,
            partitions: Sequence[dict[str, Any]] | None = None, parallelism: int | None = None,
            commit_user: str | None = None, **options: str) -> CompactionResult:
    """Compact the table named by `path` (``<warehouse>#<db>.<table>``) / `options` (the data
    source's, ``catalog.*`` included) on Spark's executors; one COMPACT snapshot. Without
    `commit_user`, each run commits as a user of its own (as Paimon's compaction jobs do): two
    runs never share a user, so neither can take the other's snapshot for its own."""
    ref = table_ref(normalize({**options, **({"path": path} if path else {})}))
    table = ref.load()
    units = plan(table, full, partitions)
    if not units:
        return CompactionResult(None, 0, 0, 0, 0)
    messages, tasks, executors = run_tasks(spark, ref, units, full, parallelism)
    if not isinstance(units[0], BucketUnit):  # append tables: drop the rewritten files' deletion vectors
        from strata.operation.append_compact import compaction_index_changes

        messages += compaction_index_changes(table, units)
    snapshot_id = commit_once(table, messages, commit_user or f"{DEFAULT_COMMIT_USER}-{uuid.uuid4().hex}")
    return CompactionResult(snapshot_id, len(units), tasks, sum(len(m.compact_before) for m in messages),
                            sum(len(m.compact_after) for m in messages), executors)


def plan(table: Table, full: bool = False,
         partitions: Sequence[dict[str, Any]] | None = None) -> list[BucketUnit] | list[AppendCompactTask]:
    """The units of work, on the driver: primary-key buckets, or append compaction tasks."""
    wanted = None if partitions is None else [table.new_commit()._partition_bytes(p) for p in partitions]
    if table.schema.primary_keys:
        return plan_buckets(table, full, wanted)
    from strata.operation.append_compact import plan_append_compaction

    return plan_append_compaction(table, full, wanted)


def run_tasks(spark: SparkSession, ref: TableRef, units: Sequence[Any], full: bool,
              parallelism: int | None = None) -> tuple[list[CommitMessage], int, list[str]]:
    """Compact `units` on the executors; returns their non-empty messages, the number of Spark
    tasks, and which executors ran them."""
    slices = pack(units, parallelism or max(1, spark.sparkContext.defaultParallelism) * 2)
    primary_key = isinstance(units[0], BucketUnit)
    outputs = (spark.sparkContext.parallelize(slices, len(slices))
               .map(CompactTask(ref, full, primary_key)).collect())
    messages = [m for output in outputs for m in output["messages"] if not m.is_empty()]
    return messages, len(slices), sorted({o["executor"] for o in outputs})


def plan_buckets(table: Table, full: bool, partitions: list[bytes] | None) -> list[BucketUnit]:
    """The primary-key buckets worth a compaction task, from one scan of the live files."""
    by_bucket: dict[BucketKey, list[DataFileMeta]] = defaultdict(list)
    for entry in table.new_scan().plan_entries():
        if partitions is None or entry.partition in partitions:
            by_bucket[(entry.partition, entry.bucket)].append(entry.file)
    top = table.core.num_levels - 1
    trigger = table.core.compaction_trigger
    units = []
    for (partition, bucket), files in by_bucket.items():
        runs = sum(f.level == 0 for f in files) + len({f.level for f in files if f.level > 0})
        needed = (runs > 1 or any(f.level != top for f in files)) if full else runs >= trigger
        if needed:
            units.append(BucketUnit(partition, bucket, files))
    return units


def pack(units: Sequence[Any], tasks: int) -> list[list[Any]]:
    """`units` spread over at most `tasks` lists of similar total size (largest first, each to
    the lightest list)."""
    count = max(1, min(tasks, len(units)))
    heap = [(0, i) for i in range(count)]
    slices: list[list[Any]] = [[] for _ in range(count)]
    for unit in sorted(units, key=unit_size, reverse=True):
        load, i = heapq.heappop(heap)
        slices[i].append(unit)
        heapq.heappush(heap, (load + unit_size(unit), i))
    return [s for s in slices if s]


def unit_size(unit: Any) -> int:
    return sum(f.file_size for f in unit.files)


class CompactTask:
    """The executor side (picklable): compact one slice of units, return their messages."""

    def __init__(self, ref: TableRef, full: bool, primary_key: bool):
        self.ref, self.full, self.primary_key = ref, full, primary_key

    def __call__(self, units: list[Any]) -> dict[str, Any]:
        import os
        import socket

        table = self.ref.load()
        messages = self._primary_key(table, units) if self.primary_key else self._append(table, units)
        return {"messages": messages, "executor": f"{socket.gethostname()}:{os.getppid()}"}

    def _primary_key(self, table: Table, units: list[BucketUnit]) -> list[CommitMessage]:
        from strata.table.write import TableWrite

        with TableWrite(table, compaction=True) as writer:
            writer.compact(full=self.full, buckets={(u.partition, u.bucket): u.files for u in units})
            return writer.prepare_commit()

    def _append(self, table: Table, units: list[AppendCompactTask]) -> list[CommitMessage]:
        from strata.operation.append_compact import run_append_compaction

        return [run_append_compaction(table, task) for task in units]


def commit_once(table: Table, messages: list[CommitMessage], commit_user: str) -> int | None:
    """One COMPACT snapshot of every task's messages. On a conflict (nothing was published) the
    new files are deleted; other failures may have published, so their files stay (orphan
    cleanup removes them if not)."""
    from strata.spark.writer import delete_files

    if not messages:
        return None
    try:
        result = table.new_commit(commit_user).commit(messages)
    except CommitConflictError as exc:
        delete_written(table, messages, delete_files)
        raise CommitConflictError(f"distributed compaction of {table.identifier} conflicts with a concurrent "
                                  f"commit; its files were deleted and nothing was published: {exc}") from exc
    return result.snapshot_ids[-1] if result.snapshot_ids else None


def delete_written(table: Table, messages: list[CommitMessage], delete_files: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: orphan cleanup removes what is left
        delete_files(table, messages)
