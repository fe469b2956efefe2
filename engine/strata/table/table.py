"""Table: one Paimon table, with the builders for writing and reading it and a convenient API."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from strata.fs import FileIO
from strata.operation.commit import CommitResult
from strata.operation.manifests import ManifestStore
from strata.options import CoreOptions
from strata.scan.planner import DataSplit, TableScan
from strata.scan.predicate import Predicate
from strata.schema.schema_manager import SchemaManager
from strata.schema.table_schema import TableSchema
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.table.commit import TableCommit
from strata.table.paths import PathFactory, partition_path
from strata.table.read import TableRead
from strata.table.write import TableWrite

if TYPE_CHECKING:
    from strata.catalog.base import Catalog, Identifier
    from strata.schema.evolution import SchemaChange


class Table:
    def __init__(self, file_io: FileIO, path: str, identifier: Identifier, schema: TableSchema,
                 catalog: Catalog | None = None):
        self.file_io = file_io
        self.path = path.rstrip("/")
        self.identifier = identifier
        self.schema = schema
        self.catalog = catalog
        self.options = dict(schema.options)
        self.core = CoreOptions(self.options)
        self.snapshot_manager = SnapshotManager(file_io, self.path)
        self.schema_manager = SchemaManager(file_io, self.path)
        self.paths = PathFactory(self.path)

    def __repr__(self) -> str:
        return f"Table({self.identifier}, {self.path})"

    @cached_property
    def manifest_store(self) -> ManifestStore:
        return ManifestStore(self.file_io, self.path, self.schema)

    @cached_property
    def tags(self) -> Any:
        from strata.table.tags import TagManager

        return TagManager(self.file_io, self.path)

    def schema_at(self, schema_id: int) -> TableSchema:
        return self.schema if schema_id == self.schema.id else self.schema_manager.schema(schema_id)

    def partition_dir(self, values: Sequence[Any]) -> str:
        return partition_path(self.schema.partition_fields(), values,
                              str(self.core.get("partition.default-name")))

    def snapshot_publisher(self) -> Callable[[SnapshotManager, Snapshot], bool] | None:
        """How snapshot-N is published; catalogs with locks override this."""
        hook = getattr(self.catalog, "snapshot_publisher", None)
        return hook(self) if callable(hook) else None

    # -- builders (pypaimon-style) -------------------------------------------------------------
    def new_write(self, commit_user: str | None = None) -> TableWrite:
        """`commit_user`: the committer's, so the log store (log.system=kafka) can derive a stable
        transactional id from it."""
        return TableWrite(self, commit_user=commit_user)

    def new_commit(self, commit_user: str | None = None) -> TableCommit:
        return TableCommit(self, commit_user)

    def new_scan(self, filter: Predicate | None = None, snapshot_id: int | None = None,
                 timestamp_millis: int | None = None, tag: str | None = None,
                 read_optimized: bool = False) -> TableScan:
        return TableScan(self, snapshot_id, timestamp_millis, tag, filter, read_optimized)

    def new_read(self, columns: Sequence[str] | None = None, filter: Predicate | None = None) -> TableRead:
        return TableRead(self, columns, filter)

    # -- one-call API ---------------------------------------------------------------------------
    def write(self, data: pa.Table | pa.RecordBatch | pd.DataFrame, mode: str = "append",
              row_kind: Any = None, partition: Mapping[str, Any] | None = None,
              commit_user: str | None = None, identifier: int | None = None) -> CommitResult:
        """Write and commit in one call. mode: 'append' (upsert for PK tables), 'overwrite'
        (whole table, or the static `partition`), 'overwrite-dynamic' (partitions written)."""
        if mode not in ("append", "overwrite", "overwrite-dynamic"):
            raise ValueError(f"unknown write mode {mode!r}: use append, overwrite or overwrite-dynamic")
        with self.new_write(commit_user) as writer:
            writer.write_arrow(data, row_kind=row_kind)
            messages = writer.prepare_commit()
        commit = self.new_commit(commit_user)
        ident = identifier if identifier is not None else 2**63 - 1
        if mode == "append":
            return commit.commit(messages, ident)
        return commit.overwrite(messages, partition, ident, dynamic=mode == "overwrite-dynamic")

    def delete(self, keys: pa.Table | pd.DataFrame) -> CommitResult:
        """Delete rows by primary key (the data must carry every column)."""
        return self.write(keys, row_kind="-D")

    def scan(self, filter: Predicate | None = None, snapshot_id: int | None = None,
             timestamp_millis: int | None = None, tag: str | None = None,
             read_optimized: bool = False) -> list[DataSplit]:
        return self.new_scan(filter, snapshot_id, timestamp_millis, tag, read_optimized).plan().splits

    def to_arrow(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                 snapshot_id: int | None = None, timestamp_millis: int | None = None,
                 tag: str | None = None, read_optimized: bool = False) -> pa.Table:
        """Rows of the table (latest snapshot unless time travel); `read_optimized` reads only the
        fully compacted top level of primary-key tables, without merging (Paimon's $ro)."""
        splits = self.scan(filter, snapshot_id, timestamp_millis, tag, read_optimized)
        return self.new_read(columns, filter).to_arrow(splits)

    read = to_arrow

    def to_batches(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                   snapshot_id: int | None = None) -> Iterator[pa.RecordBatch]:
        splits = self.scan(filter, snapshot_id)
        return self.new_read(columns, filter).to_batches(splits)

    def to_pandas(self, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                  snapshot_id: int | None = None) -> pd.DataFrame:
        return self.to_arrow(columns, filter, snapshot_id).to_pandas()

    def read_incremental(self, start_exclusive: int, end_inclusive: int,
                         columns: Sequence[str] | None = None) -> pa.Table:
        """Changes of snapshots (start, end], with a `_ROW_KIND` column (+I/-U/+U/-D): the
        changelog files with a changelog producer, else the records each commit wrote."""
        scan = self.new_scan()
        splits = [s for sid in range(start_exclusive + 1, end_inclusive + 1) for s in scan.plan_changes(sid)]
        read = self.new_read(columns)
        if not splits:
            return read._schema(True).empty_table()
        return read.to_arrow(splits)

    def compact(self, full: bool = False, partition: Mapping[str, Any] | None = None,
                commit_user: str | None = None) -> CommitResult:
        """The dedicated compaction job for this table (or one partition): a COMPACT snapshot."""
        partitions = None
        if partition is not None:
            partitions = [self.new_commit()._partition_bytes(partition)]
        if self.schema.primary_keys:
            with TableWrite(self, compaction=True) as writer:
                writer.compact(full=full, partitions=partitions)
                messages = writer.prepare_commit()
        else:
            from strata.operation.append_compact import plan_append_compaction, run_append_compaction

            messages = [run_append_compaction(self, task)
                        for task in plan_append_compaction(self, full, partitions)]
        return self.new_commit(commit_user).commit(messages)

    # -- metadata -----------------------------------------------------------------------------------
    def latest_snapshot(self) -> Snapshot | None:
        return self.snapshot_manager.latest()

    def snapshots(self) -> list[Snapshot]:
        return list(self.snapshot_manager.snapshots())

    def system_table(self, name: str, **kwargs: Any) -> pa.Table:
        """A system table of this table as Arrow: 'snapshots', 'schemas', 'options', 'files',
        'manifests', 'partitions', 'buckets', 'tags', 'consumers', 'audit_log', 'ro' (Paimon's
        ``t$name``); `kwargs` such as snapshot_id pick the snapshot the file-level ones describe."""
        from strata.table.system_tables import read_system_table

        return read_system_table(self, name, **kwargs)

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
        return Table(self.file_io, self.path, self.identifier, schema)

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
