"""The Catalog interface shared by every catalog implementation."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from strata.errors import StrataError
from strata.store.identifier import Identifier

if TYPE_CHECKING:
    from strata.fs import FileIO
    from strata.schema.evolution import SchemaChange
    from strata.schema.table_schema import TableSchema
    from strata.table.table import Table


class CatalogOperationNotSupportedError(StrataError):
    """A catalog call this catalog cannot do safely (Paimon's UnsupportedOperationException)."""


class Catalog(ABC):
    file_io: FileIO  # the warehouse's storage

    @abstractmethod
    def table_path(self, ident: Identifier) -> str:
        """The directory of a table (checked to lie under the warehouse)."""

    @abstractmethod
    def create_database(self, name: str, ignore_if_exists: bool = False) -> None: ...

    @abstractmethod
    def drop_database(self, name: str, ignore_if_not_exists: bool = False, cascade: bool = False) -> None: ...

    @abstractmethod
    def list_databases(self) -> list[str]: ...

    @abstractmethod
    def list_tables(self, database: str) -> list[str]: ...

    @abstractmethod
    def create_table(self, name: str | Identifier, schema: pa.Schema | TableSchema,
                     partition_keys: list[str] | None = None, primary_keys: list[str] | None = None,
                     options: Mapping[str, str] | None = None, comment: str | None = None,
                     ignore_if_exists: bool = False) -> Table: ...

    @abstractmethod
    def get_table(self, name: str | Identifier) -> Table: ...

    @abstractmethod
    def drop_table(self, name: str | Identifier, ignore_if_not_exists: bool = False) -> None: ...

    @abstractmethod
    def _database_exists(self, name: str) -> bool: ...

    def _new_table_schema(self, ident: Identifier, schema: pa.Schema | TableSchema,
                          partition_keys: list[str] | None, primary_keys: list[str] | None,
                          options: Mapping[str, str] | None, comment: str | None) -> TableSchema:
        """The validated schema-0 of a table about to be created in an existing database."""
        from strata.errors import DatabaseNotFoundError
        from strata.schema.definition import build_schema, validate_schema

        if not self._database_exists(ident.database):
            raise DatabaseNotFoundError(f"database {ident.database!r} does not exist")
        table_schema = build_schema(schema, partition_keys, primary_keys, options, comment)
        validate_schema(table_schema, str(ident))
        return table_schema

    @staticmethod
    def _mirrored(table: Table) -> Table:
        """A new or altered table's schema-only Iceberg metadata (``metadata.iceberg.storage``,
        before its first snapshot): Iceberg readers see the table from its creation on."""
        from strata.iceberg.sync import publish_schema

        publish_schema(table)
        return table

    def rename_table(self, source: str | Identifier, target: str | Identifier) -> Table:
        """Catalogs that keep a table's location apart from its name rename by metadata; here a
        table's directory is its name, so a rename would copy every file, and a commit racing the
        copy would be lost."""
        raise CatalogOperationNotSupportedError(
            f"rename {source} to {target}: this catalog finds a table by its directory, so renaming would copy "
            "every file and could lose a concurrent commit; use the JDBC catalog (metastore=jdbc)")

    def table_exists(self, name: str | Identifier) -> bool:
        from strata.errors import TableNotFoundError

        try:
            self.get_table(name)
            return True
        except TableNotFoundError:
            return False

    # -- schema evolution ------------------------------------------------------------------------
    def alter_table(self, name: str | Identifier, changes: Sequence[SchemaChange],
                    ignore_if_not_exists: bool = False) -> Table | None:
        """Apply schema changes (``strata.schema.evolution.SchemaChange``) as one new schema
        version; returns the table with its new schema (None if absent and ignored)."""
        from strata.errors import TableNotFoundError
        from strata.schema.evolution import SchemaChangeError, commit_changes
        from strata.snapshot.branches import split_branch_table

        ident = Identifier.parse(name)
        if split_branch_table(ident.table)[2] is not None:
            raise SchemaChangeError(f"system table {ident} is read-only")
        try:
            table = self.get_table(ident)
        except TableNotFoundError:
            if ignore_if_not_exists:
                return None
            raise
        with self.schema_change_lock(table):
            commit_changes(table.schema_manager, changes, str(ident),
                           has_snapshots=lambda: table.snapshot_manager.latest() is not None)
        return self._mirrored(self.get_table(ident))

    def schema_change_lock(self, table: Table) -> contextlib.AbstractContextManager[object]:
        """Held around publishing a schema version; catalogs with table locks override it."""
        return contextlib.nullcontext()

    def _system_table(self, ident: Identifier) -> Table | None:
        """``db.t$snapshots`` -> the read-only system table of ``db.t``; ``db.t$branch_b1`` -> the
        table on branch b1 (``db.t$branch_b1$files``: its system table); None for a plain name."""
        if "$" not in ident.table:
            return None
        from strata.errors import TableNotFoundError
        from strata.snapshot.branches import BranchNotFoundError, split_branch_table
        from strata.table.system_table import SystemTable

        base, branch, system = split_branch_table(ident.table)
        table = self.get_table(Identifier(ident.database, base))
        if branch is not None:
            try:
                table = table.on_branch(branch)
            except BranchNotFoundError as exc:
                raise TableNotFoundError(f"table {ident} does not exist: {exc}") from None
        return table if system is None else SystemTable(table, system)
