"""Vectorized sorting and grouping of key-value tables (sorted by key, then sequence number)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.io.arrays import to_numpy


def _numeric(column: pa.ChunkedArray | pa.Array) -> bool:
    t = column.type
    return (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_date(t)
            or pa.types.is_timestamp(t)) and column.null_count == 0


def sort_by_key(table: pa.Table, key_names: Sequence[str], seq_name: str | None) -> np.ndarray:
    """Indices sorting `table` by key columns then sequence number (both ascending)."""
    keys = [table.column(k) for k in key_names]
    if all(_numeric(k) for k in keys):
        columns = [to_numpy(k) for k in reversed(keys)]
        if seq_name is not None:
            seq = to_numpy(table.column(seq_name))
            if len(columns) == 1 and not pa.types.is_floating(keys[0].type):
                order = _key_order_if_ties_in_sequence(columns[0], seq)
                if order is not None:
                    return order
            columns.insert(0, seq)
        if len(columns) == 1:
            return np.argsort(columns[0], kind="stable")
        return np.lexsort(columns)
    sort_keys = [(k, "ascending") for k in key_names]
    if seq_name is not None:
        sort_keys.append((seq_name, "ascending"))
    return pc.sort_indices(table, sort_keys=sort_keys).to_numpy()


def _key_order_if_ties_in_sequence(key: np.ndarray, seq: np.ndarray) -> np.ndarray | None:
    """A stable sort by the key alone, if equal keys then come in one sequence order throughout:
    ascending (sorted runs concatenated oldest first) as they are, descending (newest first, as
    compactions list their runs) reversed within each key; None otherwise.

    Much cheaper than a lexsort by (key, sequence): timsort merges the concatenated sorted runs
    instead of sorting twice, and the check is two gathers and a comparison."""
    order = np.argsort(key, kind="stable")
    sorted_key, sorted_seq = key[order], seq[order]
    ties = sorted_key[1:] == sorted_key[:-1]
    down = sorted_seq[1:] < sorted_seq[:-1]
    if not np.any(ties & down):
        return order
    if np.any(ties & ~down):
        return None
    # every tie descends: reverse each group of equal keys in place
    starts = np.flatnonzero(np.concatenate(([True], ~ties)))
    ends = np.append(starts[1:], len(key)) - 1
    group = np.repeat(np.arange(len(starts)), ends - starts + 1)
    return order[starts[group] + ends[group] - np.arange(len(key))]


def group_ends(table: pa.Table, key_names: Sequence[str]) -> np.ndarray:
    """Boolean mask: True where a row is the last of its key group (table sorted by key)."""
    n = table.num_rows
    mask = np.ones(n, dtype=bool)
    if n < 2:
        return mask
    differs = np.zeros(n - 1, dtype=bool)
    for name in key_names:
        column = table.column(name)
        if _numeric(column):
            values = to_numpy(column)
            differs |= values[:-1] != values[1:]
        else:
            column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
            neq = pc.not_equal(column.slice(0, n - 1), column.slice(1))
            differs |= neq.to_numpy(zero_copy_only=False)
    mask[:-1] = differs
    return mask


def group_starts(ends: np.ndarray) -> np.ndarray:
    """From a group-end mask, the mask of group starts."""
    starts = np.ones_like(ends)
    starts[1:] = ends[:-1]
    return starts
