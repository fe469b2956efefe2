"""Table: one Paimon table, with the builders for writing and reading it and a convenient API."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from strata.errors import SnapshotNotFoundError
from strata.expressions import Predicate
from strata.fs import FileIO
from strata.io.paths import PathFactory
from strata.manifest.manifest_store import ManifestStore
from strata.operation.commit import CommitResult
from strata.options import CoreOptions
from strata.scan.planner import DataSplit, TableScan
from strata.schema.schema_manager import SchemaManager
from strata.schema.table_schema import TableSchema
from strata.snapshot.branches import BranchManager, branch_path, is_main, normalize_branch
from strata.snapshot.consumers import ConsumerManager
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.snapshot.tags import TagInfo, TagManager
from strata.store import FileStore, Identifier, PublishFn
from strata.table.commit import TableCommit, TableCommitResult
from strata.table.read import TableRead, read_arrow, read_batches, read_changes
from strata.table.system_tables import read_system_table
from strata.table.write import TableWrite, write_messages

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import polars as pl

    from strata.arrow_stream import ArrowScan
    from strata.operation.delete import DeleteResult
    from strata.operation.expire import ExpireResult
    from strata.operation.orphan import OrphanResult
    from strata.operation.rollback import RollbackResult
    from strata.schema.evolution import SchemaChange
    from strata.stream import ChangeStream


class TableCatalog(Protocol):
    """What the table asks of the catalog that loaded it (``strata.catalog.base.Catalog``)."""

    def get_table(self, name: str | Identifier) -> Table: ...

    def alter_table(self, name: Identifier, changes: Sequence[SchemaChange]) -> Table | None: ...

    def schema_change_lock(self, table: Table) -> contextlib.AbstractContextManager[object]: ...


class Table:
    """The user's table, built on its FileStore (``table.store``): builders for writing and
    reading, the one-call API, maintenance, branches and schema evolution."""

    def __init__(self, file_io: FileIO, path: str, identifier: Identifier, schema: TableSchema,
                 catalog: TableCatalog | None = None, branch: str | None = None):
        """`path` is the table directory (data files, manifests, index files); `branch` (default
        the ``branch`` option, else main) picks whose snapshot/, schema/, tag/ and consumer/ are
        used (``<path>/branch/branch-<name>/``, strata.snapshot.branches)."""
        self.catalog = catalog
        hook = getattr(catalog, "snapshot_publisher", None)
        self.store = FileStore(file_io, path, identifier, schema, branch, hook if callable(hook) else None)

    @classmethod
    def _on_store(cls, store: FileStore, catalog: TableCatalog | None) -> Table:
        table = cls.__new__(cls)
        table.catalog, table.store = catalog, store
        return table

    def __repr__(self) -> str:
        return f"Table({self.identifier}, {self.metadata_path})"

    # -- the store's parts, as the table's ------------------------------------------------------
    @property
    def file_io(self) -> FileIO:
        return self.store.file_io

    @property
    def path(self) -> str:
        return self.store.path

    @property
    def identifier(self) -> Identifier:
        return self.store.identifier

    @property
    def schema(self) -> TableSchema:
        return self.store.schema

    @property
    def options(self) -> dict[str, str]:
        return self.store.options

    @property
    def core(self) -> CoreOptions:
        return self.store.core

    @property
    def branch(self) -> str:
        return self.store.branch

    @property
    def metadata_path(self) -> str:
        return self.store.metadata_path

    @property
    def snapshot_manager(self) -> SnapshotManager:
        return self.store.snapshot_manager

    @property
    def schema_manager(self) -> SchemaManager:
        return self.store.schema_manager

    @property
    def paths(self) -> PathFactory:
        return self.store.paths

    @property
    def manifest_store(self) -> ManifestStore:
        return self.store.manifest_store

    @property
    def tags(self) -> TagManager:
        return self.store.tags

    @property
    def consumers(self) -> ConsumerManager:
        return self.store.consumers

    @property
    def branches(self) -> BranchManager:
        return self.store.branches

    def schema_at(self, schema_id: int) -> TableSchema:
        return self.store.schema_at(schema_id)

    def partition_dir(self, values: Sequence[Any]) -> str:
        return self.store.partition_dir(values)

    def snapshot_publisher(self) -> PublishFn | None:
        """How snapshot-N is published; catalogs with locks provide one."""
        return self.store.snapshot_publisher()

    # -- builders (pypaimon-style) -------------------------------------------------------------
    def new_write(self, commit_user: str | None = None, overwrite: bool = False) -> TableWrite:
        """`commit_user`: the committer's, so the log store (log.system=kafka) can derive a stable
        transactional id from it; `overwrite`: the rows will replace their partitions (dynamic
        buckets are then placed afresh)."""
        return TableWrite(self.store, commit_user=commit_user, overwrite=overwrite)

    def new_commit(self, commit_user: str | None = None) -> TableCommit:
        return TableCommit(self, commit_user)

    def new_scan(self, filter: Predicate | None = None, snapshot_id: int | None = None,
                 timestamp_millis: int | None = None, tag: str | None = None,
                 read_optimized: bool = False) -> TableScan:
        return TableScan(self.store, snapshot_id, timestamp_millis, tag, filter, read_optimized)

    def new_read(self, columns: Sequence[str] | None = None, filter: Predicate | None = None) -> TableRead:
        return TableRead(self.store, columns, filter)

    # -- one-call API ---------------------------------------------------------------------------
    def write(self, data: pa.Table | pa.RecordBatch | pd.DataFrame, mode: str = "append",
              row_kind: Any = None, partition: Mapping[str, Any] | None = None,
              commit_user: str | None = None, identifier: int | None = None) -> TableCommitResult:
        """Write and commit in one call. mode: 'append' (upsert for PK tables), 'overwrite'
        (whole table, or the static `partition`), 'overwrite-dynamic' (partitions written)."""
        if mode not in ("append", "overwrite", "overwrite-dynamic"):
            raise ValueError(f"unknown write mode {mode!r}: use append, overwrite or overwrite-dynamic")
        commit = self.new_commit(commit_user)
        # a replay is skipped before any file is written, while the snapshot that holds it is
        # surely still retained (the commit checks again); with a log store it goes through the
        # commit, whose log callback repairs the published commit's log (strata.log.kafka)
        logged = str(self.store.core.get("log.system")) == "kafka"
        replay = commit.replay_of(identifier) if identifier is not None and not logged else None
        if replay is not None:
            return replay
        messages = write_messages(self.store, data, row_kind, commit_user, overwrite=mode != "append")
        ident = identifier if identifier is not None else 2**63 - 1
        if mode == "append":
            return commit.commit(messages, ident)
        return commit.overwrite(messages, partition, ident, dynamic=mode == "overwrite-dynamic")

    def delete(self, keys: pa.Table | pd.DataFrame) -> TableCommitResult:
        """Delete rows by primary key: `keys` holds the primary-key columns (and the partition
        columns outside the key); other columns may be left out."""
        from strata.table.conform import deletion_keys, to_arrow_table

        if self.schema.primary_keys:
            keys = deletion_keys(to_arrow_table(keys), self.schema, str(self.identifier))
        return self.write(keys, row_kind="-D")

    def delete_where(self, predicate: Predicate, commit_user: str | None = None,
                     identifier: int | None = None) -> DeleteResult:
        """Delete the rows `predicate` selects (``strata.col(...)`` expressions), in one snapshot.
        Append tables need ``deletion-vectors.enabled``: the rows are marked in the deletion
        vectors of their files, nothing is rewritten (compaction drops them later); a concurrent
        delete or compaction of the same files makes it plan again on the new latest snapshot.
        Primary-key tables delete the selected rows' keys (strata.operation.delete)."""
        from strata.operation.delete import delete_where

        return delete_where(self, predicate, self.new_commit, commit_user, identifier)

    def scan(self, filter: Predicate | None = None, snapshot_id: int | None = None,
             timestamp_millis: int | None = None, tag: str | None = None,
             read_optimized: bool = False) -> list[DataSplit]:
        return self.new_scan(filter, snapshot_id, timestamp_millis, tag, read_optimized).plan().splits

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                 snapshot_id: int | None = None, timestamp_millis: int | None = None,
                 tag: str | None = None, read_optimized: bool = False) -> pa.Table:
        """Rows of the table (latest snapshot unless time travel); `read_optimized` reads only the
        fully compacted top level of primary-key tables, without merging (Paimon's $ro)."""
        return read_arrow(self.store, columns, filter, snapshot_id, timestamp_millis, tag, read_optimized)

    read = to_arrow

    def to_batches(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                   snapshot_id: int | None = None) -> Iterator[pa.RecordBatch]:
        return read_batches(self.store, columns, filter, snapshot_id)

    def to_pandas(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                  snapshot_id: int | None = None) -> pd.DataFrame:
        return self.to_arrow(columns, filter, snapshot_id).to_pandas()

    # -- the Python data stack (strata.arrow_stream, strata.polars, strata.duckdb, strata.stream) --
    def arrow_scan(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                   snapshot_id: int | None = None, tag: str | None = None, timestamp_millis: int | None = None,
                   limit: int | None = None) -> ArrowScan:
        """A planned read that engines consume as an Arrow stream (``__arrow_c_stream__``):
        ``pa.RecordBatchReader.from_stream(scan)``, DuckDB, Polars, DataFusion."""
        from strata.arrow_stream import ArrowScan

        return ArrowScan(self.store, columns, filter, snapshot_id, tag, timestamp_millis, limit)

    def to_polars(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                  snapshot_id: int | None = None, tag: str | None = None,
                  lazy: bool = False) -> pl.DataFrame | pl.LazyFrame:
        """The rows as a Polars DataFrame; `lazy`: a LazyFrame (strata.polars.scan) whose own
        ``filter``/``select``/``head`` are pushed into the scan."""
        from strata import polars as strata_polars

        if not lazy:
            return strata_polars.to_polars(self, columns, filter, snapshot_id, tag)
        if filter is not None:
            raise ValueError(f"to_polars(lazy=True) of table {self.identifier} takes no Strata filter: "
                             "filter the LazyFrame (pl.col(...)), which is pushed into the scan")
        frame = strata_polars.scan(self, snapshot_id, tag)
        return frame.select(list(columns)) if columns is not None else frame

    def to_duckdb(self, con: duckdb.DuckDBPyConnection | None = None, name: str | None = None,
                  snapshot_id: int | None = None, tag: str | None = None,
                  native: bool = True) -> duckdb.DuckDBPyConnection:
        """Register the table as view `name` (default: the table's name) of `con` (default: a new
        in-memory connection); SQL on it streams batches with pushdown, or reads the files with
        DuckDB's own reader where it can (`native`: strata.duckdb.register)."""
        from strata.duckdb import register

        return register(self, con, name, snapshot_id, tag, native)

    def stream(self, from_snapshot: int | None = None, consumer_id: str | None = None,
               columns: Sequence[str] | None = None, poll_interval: float = 1.0,
               follow: bool = True, log: bool | None = None) -> ChangeStream:
        """The table's changes as batches with a `_ROW_KIND` column, following new snapshots
        (strata.stream.ChangeStream); `consumer_id` saves the position, and expiry keeps what it
        has not read; `follow=False` ends at the latest snapshot. A table with a Kafka log store
        is read from the log (sub-second), unless `log=False`."""
        from strata.stream import ChangeStream

        return ChangeStream(self.store, from_snapshot, consumer_id, columns, poll_interval, follow, log)

    def read_incremental(self, start_exclusive: int, end_inclusive: int,
                         columns: Sequence[str] | None = None) -> pa.Table:
        """Changes of snapshots (start, end], with a `_ROW_KIND` column (+I/-U/+U/-D): the
        changelog files with a changelog producer, else the records each commit wrote."""
        return read_changes(self.store, start_exclusive, end_inclusive, columns)

    def compact(self, full: bool = False, partition: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
                commit_user: str | None = None, sort_by: Sequence[str] | None = None,
                sort_strategy: str | None = None) -> CommitResult:
        """The dedicated compaction job for this table (or some partitions): a COMPACT snapshot.
        With `sort_by` (append tables with bucket -1), rewrite the partitions' files sorted by
        those columns, `sort_strategy` 'order' (default) or 'zorder' (strata.operation.sort_compact)."""
        partitions = None
        if partition is not None:
            specs = [partition] if isinstance(partition, Mapping) else list(partition)
            partitions = [self.new_commit()._partition_bytes(p) for p in specs]
        if sort_by is not None or sort_strategy is not None:
            from strata.operation.sort_compact import sort_compact

            if sort_by is None:
                raise ValueError(f"sort_strategy {sort_strategy!r} for table {self.identifier} needs sort_by columns")
            return sort_compact(self.store, sort_by, self.new_commit, sort_strategy or "order", partitions, commit_user)
        if self.schema.primary_keys:
            with TableWrite(self.store, compaction=True) as writer:
                writer.compact(full=full, partitions=partitions)
                messages = writer.prepare_commit()
        else:
            from strata.operation.append_compact import (
                compaction_index_changes,
                plan_append_compaction,
                run_append_compaction,
            )

            tasks = plan_append_compaction(self.store, full, partitions)
            messages = [run_append_compaction(self.store, task) for task in tasks]
            messages += compaction_index_changes(self.store, tasks)  # deletion vectors of the rewritten files
        return self.new_commit(commit_user).commit(messages)

    # -- metadata -----------------------------------------------------------------------------------
    def latest_snapshot(self) -> Snapshot | None:
        return self.snapshot_manager.latest()

    def snapshots(self) -> list[Snapshot]:
        return list(self.snapshot_manager.snapshots())

    # -- references and maintenance (strata.operation.expire / rollback / orphan / partition_expire) --
    def create_tag(self, name: str, snapshot_id: int | None = None, time_retained: Any = None,
                   ignore_if_exists: bool = False) -> Snapshot:
        """Tag a snapshot (default: the latest); `time_retained` ('7 d', a timedelta or millis)
        defaults to ``tag.default-time-retained``. ``tag.num-retained-max`` is then enforced."""
        from strata.operation.expire import create_tag

        return create_tag(self, name, snapshot_id, _millis(time_retained), ignore_if_exists)

    def delete_tag(self, name: str) -> bool:
        """Delete a tag and the files only it kept alive; False if there is no such tag."""
        from strata.operation.expire import delete_tag

        return delete_tag(self, name)

    def list_tags(self) -> list[TagInfo]:
        return list(self.tags.list_all())

    def expire_tags(self) -> list[str]:
        """Delete tags past their retention, and the oldest beyond ``tag.num-retained-max``."""
        from strata.operation.expire import expire_tags

        return expire_tags(self)

    def rollback_to(self, target: int | str) -> RollbackResult:
        """Make a snapshot (by id) or a tag (by name) the latest snapshot again; later snapshots,
        later tags and the files only they used are deleted. Stop the table's writers first."""
        from strata.operation.rollback import rollback_to

        return rollback_to(self.store, target)

    def expire_snapshots(self, retain_min: int | None = None, retain_max: int | None = None,
                         time_retained: Any = None, max_deletes: int | None = None) -> ExpireResult:
        """Expire snapshots by ``snapshot.num-retained.min/max``, ``snapshot.time-retained`` and
        ``snapshot.expire.limit`` (or these overrides), keeping what tags and consumers need.
        Commits do this automatically unless the table is ``write-only``."""
        from strata.operation.expire import expire_snapshots

        return expire_snapshots(self, retain_min, retain_max, _millis(time_retained), max_deletes)

    def expire_partitions(self, expiration_time: Any = None, max_expires: int | None = None,
                          strategy: str | None = None, dry_run: bool = False) -> list[dict[str, Any]]:
        """Drop partitions older than `expiration_time` (default ``partition.expiration-time``) in
        one OVERWRITE commit; returns the dropped partitions."""
        from strata.operation.partition_expire import expire_partitions

        return expire_partitions(self.store, _millis(expiration_time), max_expires=max_expires,
                                 strategy=strategy, dry_run=dry_run)

    def remove_orphan_files(self, older_than: Any = None, dry_run: bool = False) -> OrphanResult:
        """Delete files no snapshot or tag references that are older than `older_than` (a
        datetime, a timedelta or duration string such as '2 h', epoch millis; default 1 day)."""
        from strata.operation.orphan import cutoff_millis, remove_orphan_files

        return remove_orphan_files(self.store, cutoff_millis(older_than), dry_run)

    def reset_consumer(self, consumer_id: str, next_snapshot: int | None = None) -> None:
        """Move a consumer to `next_snapshot` (at most the latest snapshot + 1: it has read
        everything), or delete it when None."""
        if next_snapshot is None:
            self.consumers.delete(consumer_id)
            return
        latest = self.snapshot_manager.latest_id() or 0
        if next_snapshot > latest + 1:
            raise SnapshotNotFoundError(f"consumer {consumer_id!r} of table {self.identifier} cannot move to "
                                        f"snapshot {next_snapshot}: the latest is {latest or 'none'}, so the "
                                        f"next snapshot is at most {latest + 1}")
        self.consumers.reset(consumer_id, next_snapshot)

    def clear_consumers(self, including: str = ".*", excluding: str | None = None) -> list[str]:
        return list(self.consumers.clear(including, excluding))

    def system_table(self, name: str, **kwargs: Any) -> pa.Table:
        """A system table of this table as Arrow: 'snapshots', 'schemas', 'options', 'files',
        'manifests', 'partitions', 'buckets', 'tags', 'consumers', 'table_indexes', 'audit_log', 'ro' (Paimon's
        ``t$name``); `kwargs` such as snapshot_id pick the snapshot the file-level ones describe."""
        return read_system_table(self.store, name, **kwargs)

    # -- branches (strata.snapshot.branches) ------------------------------------------------------
    def create_branch(self, name: str, from_tag: str | None = None, from_snapshot: int | None = None) -> Table:
        """A branch of this table: empty with the current schemas, or starting at a tag or a
        snapshot. Returns the table on the new branch (``db.t$branch_<name>``)."""
        self.branches.create(name, from_tag, from_snapshot)
        return self.on_branch(name)

    def delete_branch(self, name: str) -> None:
        """Delete a branch's snapshots, schemas and tags; files only it wrote become orphans."""
        self.branches.delete(name)

    def list_branches(self) -> list[str]:
        return self.branches.names()

    def fast_forward(self, name: str) -> int:
        """Make this table's branch (main) what branch `name` is: its later snapshots, schemas
        and tags replace this branch's from the branch's first snapshot on. Returns the new
        latest snapshot id; a concurrent commit makes it fail with CommitConflictError."""
        latest = self.branches.fast_forward(name, self._commit_lock)
        if is_main(self.branch):
            from strata.iceberg import sync_after_commit

            sync_after_commit(self.on_branch(self.branch))
        return latest

    def _commit_lock(self) -> contextlib.AbstractContextManager[object]:
        """What excludes every publish of this table's snapshots: the catalog's table lock where
        its commits take one, else on local disk the lock every publish holds (an object store
        without a catalog lock has none: a nullcontext)."""
        if self.catalog is not None:
            held = self.catalog.schema_change_lock(self)
            if not isinstance(held, contextlib.nullcontext):
                return held
        return self.snapshot_manager.publish_lock() or contextlib.nullcontext()

    def on_branch(self, name: str) -> Table:
        """This table on branch `name` (Paimon's ``switchToBranch``); 'main' is the table itself."""
        from strata.errors import TableNotFoundError
        from strata.snapshot.branches import BRANCH_TABLE_SEPARATOR, split_branch_table

        self.branches.require(name)
        base = split_branch_table(self.identifier.table)[0]
        target = normalize_branch(name)
        schema = SchemaManager(self.file_io, branch_path(self.path, target)).latest()
        if schema is None:
            raise TableNotFoundError(f"branch {name!r} of table {self.identifier} has no schema")
        table_name = base if is_main(target) else f"{base}{BRANCH_TABLE_SEPARATOR}{target}"
        store = FileStore(self.file_io, self.path, Identifier(self.identifier.database, table_name), schema,
                          target, self.store.publisher)
        return Table._on_store(store, self.catalog)

    # -- schema evolution (each returns the table under its new schema; this object keeps the old) --
    def alter(self, *changes: SchemaChange) -> Table:
        """Apply schema changes (``strata.SchemaChange.add_column(...)``, ...) as one new schema."""
        from strata.schema.evolution import commit_changes

        if self.catalog is not None:
            altered = self.catalog.alter_table(self.identifier, list(changes))
            assert altered is not None
            return altered
        schema = commit_changes(self.schema_manager, list(changes), str(self.identifier),
                                has_snapshots=lambda: self.snapshot_manager.latest() is not None)
        return Table(self.file_io, self.path, self.identifier, schema, branch=self.branch)

    def add_column(self, name: str, data_type: Any, comment: str | None = None, first: bool = False,
                   after: str | None = None, before: str | None = None) -> Table:
        from strata.schema.evolution import SchemaChange

        return self.alter(SchemaChange.add_column(name, data_type, comment, first, after, before))

    def drop_column(self, name: str) -> Table:
        from strata.schema.evolution import SchemaChange

        return self.alter(SchemaChange.drop_column(name))

    def rename_column(self, name: str, new_name: str) -> Table:
        from strata.schema.evolution import SchemaChange

        return self.alter(SchemaChange.rename_column(name, new_name))

    def update_column_type(self, name: str, data_type: Any) -> Table:
        """Widen a column's type (its nullability stays as it is)."""
        from strata.schema.evolution import SchemaChange

        return self.alter(SchemaChange.update_column_type(name, data_type, keep_nullability=True))

    def set_options(self, **options: str) -> Table:
        """Set table options; keys with dashes or dots: ``set_options(**{"snapshot.num-retained.min": "5"})``."""
        from strata.schema.evolution import SchemaChange

        return self.alter(*(SchemaChange.set_option(k, str(v)) for k, v in options.items()))

    def remove_options(self, *keys: str) -> Table:
        from strata.schema.evolution import SchemaChange

        return self.alter(*(SchemaChange.remove_option(k) for k in keys))


def _millis(value: Any) -> int | None:
    """A duration as millis: None, int millis, a timedelta, or a string such as '7 d' or '2 h'."""
    import datetime as dt

    from strata.options import parse_duration_ms

    if value is None or isinstance(value, int):
        return value
    if isinstance(value, dt.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, str):
        return parse_duration_ms(value)
    raise TypeError(f"expected a duration (millis, timedelta or '2 h'), got {value!r}")
