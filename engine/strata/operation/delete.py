"""DELETE ... WHERE on append tables with deletion vectors (``deletion-vectors.enabled=true`` on a
table without primary key): the rows a predicate selects are marked in the deletion vectors of the
files that hold them, without rewriting any file (Paimon's DeletionVector-based DELETE).

One delete plans the live files the predicate may touch (partition, file and row-group statistics
prune as for a read), reads only the predicate's columns of those files with each row's position
(rows already deleted left out), and marks the matching positions in the vectors of their
(partition, bucket) as of the same snapshot. The new index files are committed as one snapshot
(OVERWRITE kind: rows were removed). Reads drop the marked rows; compaction rewrites the files
without them.

The commit checks each data file's vector against the latest snapshot
(``operation.conflicts.check_deletion_vector_conflicts``): a concurrent delete of rows of the same
file, or a compaction that rewrote it, fails the commit with CommitConflictError naming the file.
``delete_where`` then plans again on the new latest snapshot and retries (``commit.max-retries``):
the predicate is applied to the table as it now is, so no delete is lost.

Primary-key tables delete by key instead: the selected rows are written as -D records.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from strata.deletionvectors import BucketDeletionVectors, deleted_positions
from strata.errors import CommitConflictError
from strata.expressions import Predicate
from strata.expressions.literals import bind
from strata.io.data_file_reader import ROW_POSITION, ColumnMapping, read_file
from strata.manifest.commit_message import CommitMessage
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind
from strata.operation.committer import NewCommit
from strata.scan.planner import DataSplit, TableScan
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER
from strata.store import FileStore, HasStore, store_of
from strata.table.read import read_arrow
from strata.table.write import write_messages

if TYPE_CHECKING:
    from strata.snapshot.snapshot import Snapshot


@dataclass
class DeleteResult:
    snapshot_id: int | None  # None: no row matched, nothing was committed
    deleted_rows: int
    files: int  # data files that got rows marked (primary-key tables: 0)
    attempts: int = 1


@dataclass
class PreparedDelete:
    """What one delete marks, as of one snapshot, ready to commit."""

    snapshot_id: int | None
    messages: list[CommitMessage]
    deleted_rows: int
    files: int

    def written_index_files(self) -> list[IndexManifestEntry]:
        return [e for m in self.messages for e in m.index_changes if e.kind == FileKind.ADD]


def delete_where(table: FileStore | HasStore, predicate: Predicate, new_commit: NewCommit,
                 commit_user: str | None = None, identifier: int | None = None) -> DeleteResult:
    """Delete the rows `predicate` selects (see the module's docstring) and commit through
    `new_commit` (the table's); `identifier` is the commit identifier (a streaming batch id: see
    ``last_committed_identifier``)."""
    store = store_of(table)
    predicate = _check(store, predicate)
    if store.schema.primary_keys:
        return _delete_keys(store, predicate, new_commit, commit_user, identifier)
    retries = int(store.core.get("commit.max-retries"))
    for attempt in range(1, retries + 2):
        prepared = prepare_delete(table, predicate)
        if not prepared.messages:
            return DeleteResult(None, 0, 0, attempt)
        try:
            result = new_commit(commit_user).commit(
                prepared.messages, BATCH_COMMIT_IDENTIFIER if identifier is None else identifier)
        except CommitConflictError:
            _delete_index_files(store, prepared.written_index_files())  # nothing was published
            if attempt > retries:
                raise
            continue
        snapshot_id = result.snapshot_ids[-1] if result.snapshot_ids else None
        return DeleteResult(snapshot_id, prepared.deleted_rows, prepared.files, attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def prepare_delete(table: FileStore | HasStore, predicate: Predicate,
                   snapshot: Snapshot | None = None) -> PreparedDelete:
    """Mark the rows `predicate` selects in the vectors of `snapshot` (default: the latest) and
    write the new index files; the messages commit them."""
    table = store_of(table)
    predicate = _check(table, predicate)
    if table.schema.primary_keys:
        raise ValueError(f"prepare_delete marks deletion vectors of append tables; {table.identifier} has a "
                         "primary key (use delete_where)")
    snapshot = snapshot if snapshot is not None else table.snapshot_manager.latest()
    if snapshot is None:
        return PreparedDelete(None, [], 0, 0)
    splits = TableScan(table, snapshot_id=snapshot.id, filter=predicate).plan().splits
    reads = [(split, f) for split in splits for f in split.files]
    workers = min(len(reads), os.cpu_count() or 1)
    if workers > 1:  # decoding and filtering release the GIL
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="strata-delete") as pool:
            found = list(pool.map(lambda r: _matching_positions(table, predicate, *r), reads))
    else:
        found = [_matching_positions(table, predicate, split, f) for split, f in reads]
    by_bucket: dict[tuple[bytes, int], list[tuple[DataSplit, DataFileMeta, np.ndarray]]] = defaultdict(list)
    for (split, f), positions in zip(reads, found, strict=True):
        if len(positions):
            by_bucket[(split.partition, max(split.bucket, 0))].append((split, f, positions))
    if not by_bucket:
        return PreparedDelete(snapshot.id, [], 0, 0)
    index: dict[tuple[bytes, int], list[IndexManifestEntry]] = defaultdict(list)
    for entry in table.manifest_store.read_index_manifest(snapshot.index_manifest):
        if entry.index_type == INDEX_TYPE_DELETION_VECTORS:
            index[(entry.partition, entry.bucket)].append(entry)
    target = table.core.get("deletion-vectors.index-file.target-size") \
        or table.core.get("deletion-vector.index-file.target-size")
    messages, rows = [], 0
    try:
        for (partition, bucket), marked in by_bucket.items():
            vectors = BucketDeletionVectors(table.file_io, table.paths, partition, bucket, index[(partition, bucket)],
                                            bool(table.core.get("deletion-vectors.bitmap64")),
                                            int(target) if table.core.bucket < 1 else None)
            for _, f, positions in marked:
                vectors.mark(f.file_name, positions)
                rows += len(positions)
            split = marked[0][0]
            messages.append(CommitMessage(partition, split.bucket, split.total_buckets,
                                          index_changes=vectors.prepare_commit()))
    except BaseException:
        _delete_index_files(table, [e for m in messages for e in m.index_changes if e.kind == FileKind.ADD])
        raise
    return PreparedDelete(snapshot.id, messages, rows, sum(len(m) for m in by_bucket.values()))


def _check(table: FileStore, predicate: Predicate) -> Predicate:
    """The predicate bound to the table (FilterError names an unknown column or a bad literal)."""
    if predicate is None:
        raise ValueError(f"delete_where on {table.identifier} needs a predicate (strata.col(...)); "
                         "to empty a table, overwrite it")
    bound = bind(predicate, table.schema)
    assert bound is not None
    if not table.schema.primary_keys and not table.core.get("deletion-vectors.enabled"):
        raise ValueError(f"delete_where on append table {table.identifier} needs deletion vectors: set "
                         "'deletion-vectors.enabled' = 'true' (rows are marked, files are not rewritten)")
    return bound


def _matching_positions(table: FileStore, predicate: Predicate, split: DataSplit, f: DataFileMeta) -> np.ndarray:
    """Positions (sorted) of the live rows of a data file that `predicate` selects."""
    fields = sorted(predicate.fields())
    mapping = ColumnMapping(table.schema, table.schema_at(f.schema_id), fields)
    vector = (split.deletion_files or {}).get(f.file_name)
    deleted = deleted_positions(table.file_io, vector) if vector is not None else None
    parts = [t.column(ROW_POSITION).to_numpy() for t in read_file(
        table.file_io, split.file_path(f), mapping, prune=predicate, use_threads=False, deleted=deleted, positions=True,
        row_filter=predicate) if t.num_rows]
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _delete_keys(table: FileStore, predicate: Predicate, new_commit: NewCommit, commit_user: str | None,
                 identifier: int | None) -> DeleteResult:
    rows = read_arrow(table, filter=predicate)
    if rows.num_rows == 0:
        return DeleteResult(None, 0, 0)
    messages = write_messages(table, rows, row_kind="-D", commit_user=commit_user)
    result = new_commit(commit_user).commit(messages, BATCH_COMMIT_IDENTIFIER if identifier is None else identifier)
    return DeleteResult(result.snapshot_ids[-1] if result.snapshot_ids else None, rows.num_rows, 0)


def _delete_index_files(table: FileStore, entries: Sequence[IndexManifestEntry]) -> None:
    for e in entries:
        table.file_io.delete(e.external_path or f"{table.paths.index_dir()}/{e.file_name}")
