"""Ray Data over Strata tables: parallel reads (one task per split) and writes committed once.

    ds = strata.ray.read(table, columns=["id", "v"], filter=col("dt") == "2024-01-01")
    strata.ray.write(ds.map_batches(enrich), table, commit_user="enrich-job", identifier=run_id)

Reads are planned once on the driver (one snapshot, the partitions, files and row groups the
filter keeps); each split (a partition's bucket) becomes a read task that merges its files.
Writes run a ``TableWrite`` per task, write-only (no compaction in the tasks, as the Spark sink's
tasks), each task numbering its records of a primary-key table from its own range (task index x
2^24, as Spark tasks do) so that keys written by two tasks never tie. The driver commits the tasks'
files as ONE snapshot with `commit_user` and `identifier` (the Spark sink's semantics: a replayed
(commit user, identifier) is skipped before anything is written; an identifier needs a stable
commit user). The files of a failed write, or of a replay that raced its first run, are left to
orphan cleanup.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.arrow_stream import ArrowScan
from strata.expressions import Predicate
from strata.scan.planner import DataSplit
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER
from strata.store import FileStore
from strata.table.read import TableRead
from strata.table.write import TableWrite

if TYPE_CHECKING:
    import ray.data

    from strata.manifest.commit_message import CommitMessage
    from strata.operation.commit import CommitResult
    from strata.table.table import Table

SEQUENCE_STRIDE = 1 << 24  # sequence numbers set aside per task and bucket in one commit


def read(table: Table, columns: Sequence[str] | None = None, filter: Predicate | None = None,
         snapshot_id: int | None = None, tag: str | None = None, **read_args: Any) -> ray.data.Dataset:
    """The table's rows as a Ray Dataset, one read task per split (`read_args`: to
    ``ray.data.read_datasource``, e.g. ``concurrency``)."""
    import ray.data

    return ray.data.read_datasource(datasource(table, columns, filter, snapshot_id, tag), **read_args)


def datasource(table: Table, columns: Sequence[str] | None = None, filter: Predicate | None = None,
               snapshot_id: int | None = None, tag: str | None = None) -> ray.data.Datasource:
    """A Ray datasource of the table, planned now: one read task per split."""
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    scan = ArrowScan(table, columns, filter, snapshot_id, tag)
    splits = scan.splits  # planned once, here on the driver
    store, schema = scan.store, scan.schema

    class StrataDatasource(Datasource):
        def estimate_inmemory_data_size(self) -> int:
            return sum(f.file_size for s in splits for f in s.files)

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[ReadTask]:
            return [ReadTask(functools.partial(_read_split, store, scan.read.columns, filter, split),
                             BlockMetadata(num_rows=None, size_bytes=sum(f.file_size for f in split.files),
                                           exec_stats=None, input_files=tuple(split.file_path(f) for f in split.files)),
                             schema=schema, per_task_row_limit=per_task_row_limit)
                    for split in splits]

        def get_name(self) -> str:
            return f"Strata({store.identifier})"

    return StrataDatasource()


def _read_split(store: FileStore, columns: list[str], filter: Predicate | None, split: DataSplit) -> Iterator[pa.Table]:
    yield from TableRead(store, columns, filter).read_split(split)


def write(dataset: ray.data.Dataset, table: Table, commit_user: str | None = None,
          identifier: int | None = None) -> CommitResult:
    """Append (upsert for primary-key tables) `dataset`'s rows to `table` in one snapshot."""
    from ray.data import Datasink

    if identifier is not None and not commit_user:
        raise ValueError(f"writing {table.identifier} from Ray: an identifier needs commit_user "
                         "(a stable name of the writing job)")
    user = commit_user or f"ray-{uuid.uuid4()}"
    ident = identifier if identifier is not None else BATCH_COMMIT_IDENTIFIER
    if identifier is not None:
        replay = table.new_commit(user).replay_of(identifier)
        if replay is not None:
            return replay  # committed before: nothing is written again
    store = table.store
    results: list[CommitResult] = []

    class StrataDatasink(Datasink):
        def write(self, blocks: Iterable[Any], ctx: Any) -> list[CommitMessage]:
            return _write_task(store, blocks, user, ctx.task_idx)

        def on_write_complete(self, write_result: Any) -> None:
            messages = [m for task in write_result.write_returns for m in task]
            results.append(table.new_commit(user).commit(messages, ident))

        def get_name(self) -> str:
            return f"Strata({store.identifier})"

    dataset.write_datasink(StrataDatasink())
    return results[0]


def _write_task(store: FileStore, blocks: Iterable[Any], commit_user: str, task_index: int) -> list[CommitMessage]:
    offset = task_index * SEQUENCE_STRIDE if store.schema.primary_keys else 0
    with TableWrite(store, compaction=False, commit_user=commit_user, sequence_offset=offset) as writer:
        for block in blocks:
            data = block if isinstance(block, pa.Table) else pa.Table.from_pandas(block, preserve_index=False)
            if data.num_rows:
                writer.write_arrow(data)
        return writer.prepare_commit()

