"""Rows matched by key sets, vectorized: ``is_in`` on one key column, or a hash join on the key
columns alone with a row index. Arrow's hash join refuses nested columns (MAP, ARRAY, ROW,
MULTISET) outside its keys, so a table's value columns never take part in a join: the matched
positions select them afterwards."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_ROW = "__strata_key_set_row"


def unique_keys(table: pa.Table, key_names: Sequence[str]) -> pa.Table:
    """The distinct keys of `table` (its key columns only)."""
    if len(key_names) == 1:
        return pa.table({key_names[0]: pc.unique(table.column(key_names[0]))})
    return table.select(list(key_names)).group_by(list(key_names)).aggregate([])


def rows_with_keys(table: pa.Table, keys: pa.Table, key_names: Sequence[str]) -> pa.Table:
    """The rows of `table` whose key is one of `keys`, in their original order."""
    if table.num_rows == 0:
        return table
    return table.filter(pa.array(key_mask(table, keys, key_names)))


def key_mask(table: pa.Table, keys: pa.Table, key_names: Sequence[str]) -> np.ndarray:
    """True for the rows of `table` whose key is one of `keys`."""
    if len(key_names) == 1:
        name = key_names[0]
        return pc.is_in(table.column(name), value_set=keys.column(name)).to_numpy(zero_copy_only=False)
    probe = table.select(list(key_names)).append_column(_ROW, pa.array(np.arange(table.num_rows)))
    matched = probe.join(keys.select(list(key_names)), keys=list(key_names), join_type="left semi")
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[matched.column(_ROW).to_numpy()] = True
    return mask
