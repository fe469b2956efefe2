"""Catalog changes Strata's catalogs have no call for yet, done as Paimon's catalogs do them:
changing a database's properties (the JDBC catalog's ``paimon_database_properties`` rows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlalchemy import text

from strata.catalog import Catalog
from strata.errors import OptionError


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
