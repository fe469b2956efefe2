"""Catalog changes Strata's catalogs have no call for yet, done as Paimon's catalogs do them:
renaming a table (its directory moves; Paimon's files name each other relatively) and changing a
database's properties (the JDBC catalog's ``paimon_database_properties`` rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow.fs as pafs
from sqlalchemy import text

from strata.catalog import Catalog, Identifier
from strata.errors import OptionError, TableAlreadyExistsError
from strata.fs import FileIO
from strata.table.table import Table


def copy_tree(file_io: FileIO, source: str, target: str) -> int:
    """Copy every file under `source` to the same relative path under `target`; how many."""
    fs, _ = file_io.arrow_fs()
    root, dest = file_io.arrow_path(source).rstrip("/"), file_io.arrow_path(target).rstrip("/")
    copied = 0
    for info in fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True)):
        if info.type == pafs.FileType.File:
            relative = info.path[len(root):].lstrip("/")
            fs.create_dir(f"{dest}/{relative}".rsplit("/", 1)[0], recursive=True)
            fs.copy_file(info.path, f"{dest}/{relative}")
            copied += 1
    return copied


def rename_table(catalog: Catalog, table: Table, target: Identifier) -> None:
    """Move `table` to `target` (same warehouse). Its Iceberg mirror names absolute paths, so it
    is written afresh at the new place."""
    from strata.catalog.jdbc import JdbcCatalog
    from strata.iceberg.location import enabled
    from strata.iceberg.sync import drop_mirror, publish_schema, sync_after_commit

    if isinstance(catalog, JdbcCatalog):
        catalog.check_lock_id(target)
    target_path: str = catalog.table_path(target)
    if catalog.file_io.list_status(target_path):
        raise TableAlreadyExistsError(f"table {target}: {target_path} already holds files")
    drop_mirror(table)
    copy_tree(table.file_io, table.path, target_path)
    mirrored = enabled(table)
    if mirrored:
        table.file_io.delete_dir(f"{target_path}/metadata")
    _register_rename(catalog, table.identifier, target)
    table.file_io.delete_dir(table.path)
    if mirrored:
        moved = catalog.get_table(target)
        if moved.snapshot_manager.latest() is None:
            publish_schema(moved)
        else:
            sync_after_commit(moved)


def _register_rename(catalog: Catalog, source: Identifier, target: Identifier) -> None:
    from strata.catalog.jdbc import TABLES, JdbcCatalog

    if not isinstance(catalog, JdbcCatalog):
        return  # a filesystem catalog's tables are their directories
    with catalog.engine.begin() as conn:
        conn.execute(text(f"UPDATE {TABLES} SET database_name = :db2, table_name = :t2 WHERE catalog_key = :key "
                          "AND database_name = :db AND table_name = :t"),
                     {"key": catalog.catalog_key, "db": source.database, "t": source.table,
                      "db2": target.database, "t2": target.table})


def alter_database_properties(catalog: Catalog, name: str, updates: Mapping[str, str],
                              removals: Sequence[str]) -> list[str]:
    """Set and remove a database's properties in one transaction; the removed keys that were
    not there (Paimon's AlterDatabaseResponse ``missing``)."""
    from strata.catalog.jdbc import DATABASE_PROPERTIES, EXISTS_PROPERTY, JdbcCatalog

    if not isinstance(catalog, JdbcCatalog):
        raise OptionError("database properties are kept by the JDBC catalog only (metastore=jdbc)")
    if EXISTS_PROPERTY in updates or EXISTS_PROPERTY in removals:
        raise OptionError(f"database property {EXISTS_PROPERTY!r} is the catalog's own")
    present = catalog.database_properties(name)
    where = "catalog_key = :key AND database_name = :db AND property_key = :pk"
    with catalog.engine.begin() as conn:
        for key in [*updates, *removals]:
            conn.execute(text(f"DELETE FROM {DATABASE_PROPERTIES} WHERE {where}"),
                         {"key": catalog.catalog_key, "db": name, "pk": key})
        for key, value in updates.items():
            conn.execute(text(f"INSERT INTO {DATABASE_PROPERTIES} (catalog_key, database_name, property_key, "
                              "property_value) VALUES (:key, :db, :pk, :pv)"),
                         {"key": catalog.catalog_key, "db": name, "pk": key, "pv": value})
    return [key for key in removals if key not in present]
