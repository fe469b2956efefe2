"""Catalogs: where databases and tables live (filesystem; JDBC with locks for object stores)."""

from strata.catalog.base import Catalog, CatalogOperationNotSupportedError
from strata.catalog.filesystem import FileSystemCatalog
from strata.store import Identifier

__all__ = ["Catalog", "CatalogOperationNotSupportedError", "FileSystemCatalog", "Identifier", "load_catalog"]


def load_catalog(warehouse: str, **options: str) -> Catalog:
    """The catalog for a warehouse: ``metastore=jdbc`` picks the JDBC catalog, else filesystem."""
    if options.get("metastore") == "jdbc":
        from strata.catalog.jdbc import JdbcCatalog  # optional extra

        return JdbcCatalog(warehouse, options)
    return FileSystemCatalog(warehouse, options)
