"""FileStore: one table's files and metadata, below the ``Table`` facade (Paimon's FileStore).

It holds the file IO, the table's paths and branch, its schema and options, and the snapshot,
schema, manifest, tag, consumer and branch managers. Operations, scans, the LSM writer, the log
store and the Iceberg mirror take a FileStore; ``strata.table.table.Table`` is built on one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, Protocol

from strata.fs import FileIO
from strata.io.paths import PathFactory, partition_path
from strata.manifest.manifest_store import ManifestStore
from strata.options import CoreOptions
from strata.schema.schema_manager import SchemaManager
from strata.schema.table_schema import TableSchema
from strata.snapshot.branches import BranchManager, branch_path, normalize_branch
from strata.snapshot.consumers import ConsumerManager
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.snapshot.tags import TagManager
from strata.store.identifier import Identifier

# publishes snapshot-N (False if another commit took N); None: the FileIO's create-if-absent
PublishFn = Callable[[SnapshotManager, Snapshot], bool]
# given the store, how its snapshots are published (a catalog with locks provides one)
PublisherFactory = Callable[["FileStore"], PublishFn | None]


class FileStore:
    def __init__(self, file_io: FileIO, path: str, identifier: Identifier, schema: TableSchema,
                 branch: str | None = None, publisher: PublisherFactory | None = None):
        """`path` is the table directory (data files, manifests, index files); `branch` (default
        the ``branch`` option, else main) picks whose snapshot/, schema/, tag/ and consumer/ are
        used (``<path>/branch/branch-<name>/``, strata.snapshot.branches)."""
        self.file_io = file_io
        self.path = path.rstrip("/")
        self.identifier = identifier
        self.schema = schema
        self.options = dict(schema.options)
        self.core = CoreOptions(self.options)
        self.branch = normalize_branch(branch if branch is not None else self.options.get("branch"))
        self.metadata_path = branch_path(self.path, self.branch)
        self.snapshot_manager = SnapshotManager(file_io, self.metadata_path)
        self.schema_manager = SchemaManager(file_io, self.metadata_path)
        self.paths = PathFactory(self.path)
        self.publisher = publisher

    def __repr__(self) -> str:
        return f"FileStore({self.identifier}, {self.metadata_path})"

    @cached_property
    def manifest_store(self) -> ManifestStore:
        return ManifestStore(self.file_io, self.path, self.schema)

    @cached_property
    def tags(self) -> TagManager:
        return TagManager(self.file_io, self.metadata_path)

    @cached_property
    def consumers(self) -> ConsumerManager:
        return ConsumerManager(self.file_io, self.metadata_path)

    @cached_property
    def branches(self) -> BranchManager:
        return BranchManager(self.file_io, self.path, self.branch)

    def schema_at(self, schema_id: int) -> TableSchema:
        return self.schema if schema_id == self.schema.id else self.schema_manager.schema(schema_id)

    def with_schema(self, schema: TableSchema) -> FileStore:
        """The same table and branch under another schema version (time travel, schema evolution)."""
        if schema is self.schema:
            return self
        return FileStore(self.file_io, self.path, self.identifier, schema, self.branch, self.publisher)

    def partition_dir(self, values: Sequence[Any]) -> str:
        return partition_path(self.schema.partition_fields(), values,
                              str(self.core.get("partition.default-name")))

    def snapshot_publisher(self) -> PublishFn | None:
        """How snapshot-N is published; catalogs with locks provide one."""
        return self.publisher(self) if self.publisher is not None else None


class HasStore(Protocol):
    """What is built on a FileStore (the ``Table`` facade): builders accept it for its store."""

    @property
    def store(self) -> FileStore: ...


def store_of(source: FileStore | HasStore) -> FileStore:
    """The FileStore itself, or the one a table is built on."""
    return source if isinstance(source, FileStore) else source.store
