"""Tables the Python data stack tests read: primary-key tables with deletes (merged on read, and
with deletion vectors), append tables, partitioned and not; NULLs in partition and data columns;
several files per bucket, so that pruning has something to prune."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import strata

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string()),
                    pa.field("k", pa.int32()), pa.field("v", pa.string()), pa.field("x", pa.float64())])
KINDS = ("pk", "pk_dv", "append", "append_partitioned")
ROWS_PER_BATCH = 2_000


def rows(start: int, count: int, null_dt: bool = True) -> pa.Table:
    """Rows `start`..`start+count`: dt cycles over two days and NULL (a third day where `dt` is
    part of the primary key), k is NULL every 7th row, v every 11th."""
    ids = np.arange(start, start + count, dtype=np.int64)
    dts = pa.array(np.array(["2024-01-01", "2024-01-02", None if null_dt else "2024-01-03"], dtype=object)[ids % 3])
    k = pa.array((ids % 50).astype(np.int32), mask=ids % 7 == 0)
    v = pa.array([f"v{i % 13}" for i in ids.tolist()], mask=ids % 11 == 0)
    return pa.table([ids, dts, k, v, (ids / 4).astype(np.float64)], schema=SCHEMA)


def make_table(catalog: strata.Catalog, kind: str, name: str = "t") -> strata.Table:
    """A table of `kind` with four commits of rows (the later ones overlapping the earlier ids:
    upserts of primary-key tables) and, for primary-key tables, a delete."""
    catalog.create_database("db", ignore_if_exists=True)
    options = {"bucket": "2"} if kind.startswith("pk") else {"bucket": "-1"}
    if kind == "pk_dv":
        options["deletion-vectors.enabled"] = "true"
    partitioned = kind in ("pk", "pk_dv", "append_partitioned")
    table = catalog.create_table(f"db.{name}", SCHEMA, partition_keys=["dt"] if partitioned else None,
                                 primary_keys=["id", "dt"] if kind.startswith("pk") else None,
                                 options=options)
    keyed = kind.startswith("pk")
    for start in range(0, 4 * ROWS_PER_BATCH, ROWS_PER_BATCH * 3 // 4):
        table.write(rows(start, ROWS_PER_BATCH, null_dt=not keyed))
    if keyed:
        every = rows(0, 6 * ROWS_PER_BATCH, null_dt=False)
        gone = every.filter(pc.equal(pc.bit_wise_and(every.column("id"), 15), 3))
        table.delete(gone.select(["id", "dt"]))
    return catalog.get_table(f"db.{name}")


def sorted_rows(data: pa.Table) -> pa.Table:
    """`data` in id order, with the table's column order where it has the columns."""
    return data.sort_by([("id", "ascending")]) if "id" in data.column_names else data
