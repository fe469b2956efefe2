"""The filesystem catalog: metadata only in files, ``<warehouse>/<db>.db/<table>``."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from strata import options as opts
from strata.catalog.base import Catalog, Identifier
from strata.errors import (
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    OptionError,
    SchemaMismatchError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.fs import FileIO, file_io_for
from strata.mergetree.merge_function import validate_merge_options
from strata.schema.schema_manager import SchemaManager
from strata.schema.table_schema import TableSchema, schema_from_arrow
from strata.table.table import Table

DB_SUFFIX = ".db"


class FileSystemCatalog(Catalog):
    def __init__(self, warehouse: str, options: Mapping[str, str] | None = None,
                 file_io: FileIO | None = None):
        self.warehouse = warehouse.rstrip("/")
        self.options = dict(options or {})
        self.file_io = file_io or file_io_for(self.warehouse, self.options)

    def database_path(self, name: str) -> str:
        return f"{self.warehouse}/{name}{DB_SUFFIX}"

    def table_path(self, ident: Identifier) -> str:
        return f"{self.database_path(ident.database)}/{ident.table}"

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
        if not self._database_exists(ident.database):
            raise DatabaseNotFoundError(f"database {ident.database!r} does not exist")
        table_schema = build_schema(schema, partition_keys, primary_keys, options, comment)
        validate_schema(table_schema, str(ident))
        manager = SchemaManager(self.file_io, self.table_path(ident))
        try:
            manager.create(table_schema, str(ident))
        except TableAlreadyExistsError:
            if ignore_if_exists:
                return self.get_table(ident)
            raise
        return self.get_table(ident)

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
        ident = Identifier.parse(name)
        if not self.table_exists(ident):
            if ignore_if_not_exists:
                return
            raise TableNotFoundError(f"table {ident} does not exist")
        self.file_io.delete_dir(self.table_path(ident))


def build_schema(schema: pa.Schema | TableSchema, partition_keys: list[str] | None,
                 primary_keys: list[str] | None, options: Mapping[str, str] | None,
                 comment: str | None) -> TableSchema:
    if isinstance(schema, TableSchema):
        return schema
    opt = dict(options or {})
    pks = primary_keys if primary_keys is not None else _split(opt.pop("primary-key", None))
    parts = partition_keys if partition_keys is not None else _split(opt.pop("partition", None))
    return schema_from_arrow(schema, parts, pks, opt, comment)


def _split(value: str | None) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


def validate_schema(schema: TableSchema, where: str) -> None:
    """Reject what Strata (or Paimon) cannot store, naming the column or option."""
    opts.validate(schema.options, f"table {where}")
    names = schema.field_names
    if len(set(names)) != len(names):
        raise SchemaMismatchError(f"duplicate column names in table {where}: {names}")
    for key in schema.partition_keys + schema.primary_keys:
        if key not in names:
            raise SchemaMismatchError(f"key column {key!r} of table {where} is not a column: {names}")
    if schema.primary_keys and not set(schema.partition_keys) <= set(schema.primary_keys):
        raise SchemaMismatchError(
            f"primary key {schema.primary_keys} of table {where} must contain the partition keys "
            f"{schema.partition_keys} (cross-partition upsert is not supported)")
    core = opts.CoreOptions(schema.options)
    bucket = core.bucket
    if schema.primary_keys and bucket < 1:
        raise SchemaMismatchError(
            f"primary-key table {where} needs a fixed bucket count: set option 'bucket' to N > 0 "
            "(dynamic and postpone buckets are not supported)")
    if not schema.primary_keys and bucket > 0 and not core.bucket_key():
        raise SchemaMismatchError(f"append table {where} with bucket={bucket} needs option 'bucket-key'")
    if not schema.primary_keys and bucket == -2:
        raise SchemaMismatchError(f"postpone bucket is not supported (table {where})")
    validate_merge_options(schema, f"table {where}")
    _check_supported(schema, core, where)
    for key in schema.bucket_keys() if bucket > 0 else []:
        if key not in names:
            raise SchemaMismatchError(f"bucket-key column {key!r} of table {where} is not a column")
        if key in schema.partition_keys:
            raise SchemaMismatchError(f"bucket-key {key!r} of table {where} cannot be a partition key")
        if schema.primary_keys and key not in schema.primary_keys:
            raise SchemaMismatchError(f"bucket-key {key!r} of table {where} must be part of the primary key")


def _check_supported(schema: TableSchema, core: opts.CoreOptions, where: str) -> None:
    """Refuse features Strata would silently get wrong (rather than write an unreadable table)."""
    from strata.mergetree.merge_function import merge_function_for

    if schema.primary_keys:
        try:
            merge_function_for(schema.options)
        except NotImplementedError as exc:
            raise OptionError(f"table {where}: {exc}") from None
    if core.get("deletion-vectors.enabled"):
        raise OptionError(f"table {where}: deletion-vectors.enabled=true is not supported yet")
    if not core.get("partition.legacy-name"):
        raise OptionError(f"table {where}: partition.legacy-name=false is not supported yet")
    rowkind = core.get_str("rowkind.field")
    if rowkind and (rowkind not in schema.field_names or not schema.field(rowkind).type.is_string):
        raise SchemaMismatchError(f"rowkind.field {rowkind!r} of table {where} must name a STRING column")


def load_catalog(warehouse: str, **options: str) -> Catalog:
    """The catalog for a warehouse: ``metastore=jdbc`` picks the JDBC catalog, else filesystem."""
    if options.get("metastore") == "jdbc":
        from strata.catalog.jdbc import JdbcCatalog  # optional extra

        return JdbcCatalog(warehouse, options)
    return FileSystemCatalog(warehouse, options)
