"""Strata: a Python table store whose tables are Apache Paimon tables.

    import strata
    catalog = strata.load_catalog("/tmp/warehouse")
    catalog.create_database("db", ignore_if_exists=True)
    table = catalog.create_table("db.orders", arrow_schema, primary_keys=["id"], options={"bucket": "4"})
    table.write(arrow_table)
    table.to_arrow(filter=strata.col("id") > 10)

The names below load on first use (PEP 562), so ``import strata`` stays cheap for a CLI call or
a short job; pandas, Spark, Kafka and boto3 are imported only by the code paths that use them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from strata.catalog import Catalog, FileSystemCatalog, Identifier, load_catalog
    from strata.expressions import col, in_rows
    from strata.schema.evolution import Move, SchemaChange
    from strata.table.table import Table

_EXPORTS = {
    "Catalog": "strata.catalog", "FileSystemCatalog": "strata.catalog", "Identifier": "strata.catalog",
    "load_catalog": "strata.catalog", "col": "strata.expressions", "in_rows": "strata.expressions",
    "Move": "strata.schema.evolution",
    "SchemaChange": "strata.schema.evolution", "Table": "strata.table.table",
}

__all__ = ["Catalog", "FileSystemCatalog", "Identifier", "Move", "SchemaChange", "Table", "col", "in_rows",
           "load_catalog"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'strata' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
