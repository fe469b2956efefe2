"""Catalogs: where databases and tables live (filesystem; JDBC with locks for object stores)."""

from strata.catalog.base import Catalog, Identifier
from strata.catalog.filesystem import FileSystemCatalog, load_catalog

__all__ = ["Catalog", "FileSystemCatalog", "Identifier", "load_catalog"]
