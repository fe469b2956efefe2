"""The filesystem catalog: metadata only in files, ``<warehouse>/<db>.db/<table>``."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from strata import metrics
from strata.catalog.base import Catalog
from strata.errors import (
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.fs import FileIO, file_io_for
from strata.names import check_database_name, check_table_name, path_under
from strata.schema.schema_manager import SchemaManager
from strata.schema.table_schema import TableSchema
from strata.store import Identifier
from strata.table.table import Table

DB_SUFFIX = ".db"


class FileSystemCatalog(Catalog):
    def __init__(self, warehouse: str, options: Mapping[str, str] | None = None,
                 file_io: FileIO | None = None):
        self.warehouse = warehouse.rstrip("/")
        self.options = dict(options or {})
        self.file_io = file_io or file_io_for(self.warehouse, self.options)

    def database_path(self, name: str) -> str:
        """``<warehouse>/<name>.db``; a name that breaks a naming rule, or a path that would leave
        the warehouse, raises InvalidNameError (every database method comes through here)."""
        return path_under(self.warehouse, f"{check_database_name(name)}{DB_SUFFIX}")

    def table_path(self, ident: Identifier) -> str:
        return path_under(self.database_path(ident.database), ident.table)

    # -- databases ---------------------------------------------------------------------
    def create_database(self, name: str, ignore_if_exists: bool = False) -> None:
        if self._database_exists(name):
            if ignore_if_exists:
                return
            raise TableAlreadyExistsError(f"database {name!r} already exists")
        self.file_io.mkdirs(self.database_path(name))

    def _database_exists(self, name: str) -> bool:
        return self.file_io.exists(self.database_path(name))

    def drop_database(self, name: str, ignore_if_not_exists: bool = False, cascade: bool = False) -> None:
        if not self._database_exists(name):
            if ignore_if_not_exists:
                return
            raise DatabaseNotFoundError(f"database {name!r} does not exist")
        if self.list_tables(name) and not cascade:
            raise DatabaseNotEmptyError(f"database {name!r} is not empty; use cascade=True")
        self.file_io.delete_dir(self.database_path(name))

    def list_databases(self) -> list[str]:
        return sorted(s.path.rsplit("/", 1)[-1][: -len(DB_SUFFIX)]
                      for s in self.file_io.list_status(self.warehouse)
                      if s.is_dir and s.path.endswith(DB_SUFFIX))

    def list_tables(self, database: str) -> list[str]:
        if not self._database_exists(database):
            raise DatabaseNotFoundError(f"database {database!r} does not exist")
        names = []
        for status in self.file_io.list_status(self.database_path(database)):
            if status.is_dir and self.file_io.exists(f"{status.path}/schema/schema-0"):
                names.append(status.path.rsplit("/", 1)[-1])
        return sorted(names)

    # -- tables ----------------------------------------------------------------------
    def create_table(self, name: str | Identifier, schema: pa.Schema | TableSchema,
                     partition_keys: list[str] | None = None, primary_keys: list[str] | None = None,
                     options: Mapping[str, str] | None = None, comment: str | None = None,
                     ignore_if_exists: bool = False) -> Table:
        ident = Identifier.parse(name)
        check_table_name(ident.table)  # not a system table or a branch (as Paimon)
        table_schema = self._new_table_schema(ident, schema, partition_keys, primary_keys, options, comment)
        manager = SchemaManager(self.file_io, self.table_path(ident))
        try:
            manager.create(table_schema, str(ident))
        except TableAlreadyExistsError:
            if ignore_if_exists:
                return self.get_table(ident)
            raise
        return self._mirrored(self.get_table(ident))

    def get_table(self, name: str | Identifier) -> Table:
        ident = Identifier.parse(name)
        system = self._system_table(ident)  # db.t$snapshots, db.t$files, ...
        if system is not None:
            return system
        path = self.table_path(ident)
        schema = SchemaManager(self.file_io, path).latest()
        if schema is None:
            raise TableNotFoundError(f"table {ident} does not exist")
        return Table(self.file_io, path, ident, schema, catalog=self)

    def drop_table(self, name: str | Identifier, ignore_if_not_exists: bool = False) -> None:
        from strata.iceberg.sync import drop_mirror

        ident = Identifier.parse(name)
        check_table_name(ident.table)  # not a system table or a branch (as Paimon)
        try:
            table = self.get_table(ident)
        except TableNotFoundError:
            if ignore_if_not_exists:
                return
            raise
        drop_mirror(table)
        self.file_io.delete_dir(self.table_path(ident))
        metrics.forget_table(str(ident))
