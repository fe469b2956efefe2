"""Changelog from a merge: compare each key's value before (the top level, what readers saw
after the previous full merge) with its value after the merge, vectorized.

Per key: new -> +I; gone -> -D (old value); present in both -> -U (old), +U (new), unless
`changelog-producer.row-deduplicate` is set and the value did not change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.mergetree.merge_function import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, live_rows_mask
from strata.mergetree.sorting import sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER, VALUE_KIND

_ROW = "__strata_row"
_ORDER = "__strata_order"


def diff_changelog(before: pa.Table, after: pa.Table, key_names: Sequence[str], value_names: Sequence[str],
                   row_deduplicate: bool) -> pa.Table:
    """Changelog rows (file layout) turning `before` into `after`; both are sorted by key."""
    before = before.filter(pa.array(live_rows_mask(before.column(VALUE_KIND).to_numpy()))) \
        if before.num_rows else before
    if after.num_rows == 0 and before.num_rows == 0:
        return after
    left = after.append_column(_ROW, pa.array(np.arange(after.num_rows)))
    right = before.select(list(key_names)).append_column(_ROW + "_b", pa.array(np.arange(before.num_rows)))
    joined = left.select([*key_names, _ROW]).join(right, keys=list(key_names), join_type="full outer")
    after_idx = joined.column(_ROW)
    before_idx = joined.column(_ROW + "_b")
    has_after = pc.is_valid(after_idx).to_numpy(zero_copy_only=False)
    has_before = pc.is_valid(before_idx).to_numpy(zero_copy_only=False)
    a_idx = pc.fill_null(after_idx, 0).to_numpy()
    b_idx = pc.fill_null(before_idx, 0).to_numpy()
    after_kinds = after.column(VALUE_KIND).to_numpy()
    after_live = np.zeros(len(joined), dtype=bool)
    after_live[has_after] = live_rows_mask(after_kinds[a_idx[has_after]])
    both = after_live & has_before
    if row_deduplicate and both.any():
        both[both] = ~_equal_values(before.take(b_idx[both]), after.take(a_idx[both]), value_names)
    parts = [
        _with_kind(after.take(a_idx[after_live & ~has_before]), INSERT, 2),
        _with_kind(before.take(b_idx[has_before & ~after_live]), DELETE, 0,
                   after.column(SEQUENCE_NUMBER).take(a_idx[has_before & ~after_live]) if has_after.any() else None),
        _with_kind(before.take(b_idx[both]), UPDATE_BEFORE, 0, after.column(SEQUENCE_NUMBER).take(a_idx[both])),
        _with_kind(after.take(a_idx[both]), UPDATE_AFTER, 1),
    ]
    table = pa.concat_tables([p for p in parts if p.num_rows]) if any(p.num_rows for p in parts) \
        else after.slice(0, 0).append_column(_ORDER, pa.array([], pa.int8()))
    order = sort_by_key(table, [*key_names, _ORDER], None)
    return table.take(order).drop_columns([_ORDER])


def _with_kind(rows: pa.Table, kind: int, order: int, seq: pa.ChunkedArray | pa.Array | None = None) -> pa.Table:
    n = rows.num_rows
    rows = rows.set_column(rows.schema.get_field_index(VALUE_KIND), VALUE_KIND,
                           pa.array(np.full(n, kind, dtype=np.int8)))
    if seq is not None and n:
        rows = rows.set_column(rows.schema.get_field_index(SEQUENCE_NUMBER), SEQUENCE_NUMBER, seq)
    return rows.append_column(_ORDER, pa.array(np.full(n, order, dtype=np.int8)))


def _equal_values(left: pa.Table, right: pa.Table, names: Sequence[str]) -> np.ndarray:
    equal = np.ones(left.num_rows, dtype=bool)
    for name in names:
        equal &= _same(left.column(name).combine_chunks(), right.column(name).combine_chunks())
    return equal


def _same(lhs: pa.Array, rhs: pa.Array) -> np.ndarray:
    """Per row: the values are equal, or both null. Arrow's `equal` has no kernel for nested
    types, so ROW fields are compared one by one and ARRAY, MULTISET and MAP elements in bulk:
    one comparison over the flattened elements, reduced per row."""
    null_l = lhs.is_null().to_numpy(zero_copy_only=False)
    null_r = rhs.is_null().to_numpy(zero_copy_only=False)
    kind = lhs.type
    if pa.types.is_struct(kind):
        same = np.ones(len(lhs), dtype=bool)
        for left_field, right_field in zip(lhs.flatten(), rhs.flatten(), strict=True):
            same &= _same(left_field, right_field)
    elif pa.types.is_map(kind):
        entries = pa.list_(pa.struct([kind.key_field, kind.item_field]))
        same = _same_lists(lhs.cast(entries), rhs.cast(entries))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        same = _same_lists(lhs, rhs)
    else:
        same = pc.fill_null(pc.equal(lhs, rhs), False).to_numpy(zero_copy_only=False)
    return np.where(null_l | null_r, null_l & null_r, same)


def _same_lists(lhs: pa.Array, rhs: pa.Array) -> np.ndarray:
    """Per row of two list arrays (nulls are settled by the caller): same length, same elements."""
    length_l = pc.fill_null(pc.list_value_length(lhs), 0).to_numpy(zero_copy_only=False)
    length_r = pc.fill_null(pc.list_value_length(rhs), 0).to_numpy(zero_copy_only=False)
    valid = (lhs.is_valid().to_numpy(zero_copy_only=False) & rhs.is_valid().to_numpy(zero_copy_only=False))
    same = length_l == length_r
    compared = same & valid & (length_l > 0)
    if compared.any():
        chosen = pa.array(compared)
        elements = _same(pc.list_flatten(lhs.filter(chosen)), pc.list_flatten(rhs.filter(chosen)))
        starts = np.concatenate(([0], np.cumsum(length_l[compared])[:-1]))
        same[compared] = np.logical_and.reduceat(elements, starts)
    return same
