"""Strata: a Python table store whose tables are Apache Paimon tables.

    import strata
    catalog = strata.load_catalog("/tmp/warehouse")
    catalog.create_database("db", ignore_if_exists=True)
    table = catalog.create_table("db.orders", arrow_schema, primary_keys=["id"], options={"bucket": "4"})
    table.write(arrow_table)
    table.to_arrow(filter=strata.col("id") > 10)
"""

from strata.catalog import Catalog, FileSystemCatalog, Identifier, load_catalog
from strata.scan.predicate import col
from strata.schema.evolution import Move, SchemaChange
from strata.table.table import Table

__all__ = ["Catalog", "FileSystemCatalog", "Identifier", "Move", "SchemaChange", "Table", "col", "load_catalog"]
