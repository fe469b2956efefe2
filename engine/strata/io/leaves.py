"""Where a top-level column sits among a Parquet file's columns (its leaves).

Parquet keeps one column chunk (with its statistics, page index and dictionary) per leaf of the
schema, depth first: a ROW, ARRAY, MAP or MULTISET column takes one per leaf field inside it, so a
column after it is not at its top-level (Arrow) position. Strata's, pypaimon's and Paimon's Java
writers all lay leaves out in this order, which is the order Arrow's schema of the file has.
"""

from __future__ import annotations

import pyarrow as pa


def leaf_count(t: pa.DataType) -> int:
    """Parquet columns (leaves) of an Arrow type: a MAP's entries are a struct of key and value."""
    return sum(leaf_count(t.field(i).type) for i in range(t.num_fields)) if t.num_fields else 1


def primitive_leaves(schema: pa.Schema) -> dict[str, int]:
    """Each top-level column stored as one Parquet column -> that column's index. Nested columns
    are left out: a leaf's statistics (of one field inside them) are not the column's."""
    leaf, found = 0, {}
    for f in schema:
        width = leaf_count(f.type)
        if not f.type.num_fields:
            found[f.name] = leaf
        leaf += width
    return found
