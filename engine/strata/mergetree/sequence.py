"""Ordering of the records of one key, and vectorized per-key-group helpers for merge functions.

Paimon orders the records of a key by ``sequence.field`` (one or more fields, compared in order,
each ascending or, with ``sequence.field.sort-order=descending``, descending) and then by the
system sequence number; the record that sorts last is merged last. Nulls sort first in either
direction (Paimon's generated RecordComparator puts null before any value and applies the sort
direction to non-null values only). Sequence groups of partial-update compare their fields the
same way, ascending.

Values compare like Java's ``InternalRowUtils.compare``: numbers by value (``Float.compare`` /
``Double.compare`` for floating point: -0.0 < 0.0, NaN above +inf), strings and binaries byte-wise,
booleans false < true.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.mergetree.sorting import group_ends

_I64_MIN = np.iinfo(np.int64).min


def as_array(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """One contiguous Arrow array (dictionary-encoded columns are decoded)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    return column


def validity(array: pa.Array) -> np.ndarray:
    """Boolean numpy mask of non-null slots."""
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    return np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def order_key(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """int64 keys that order the non-null values as Java compares them, and the validity mask.

    Keys of null slots are meaningless (0)."""
    array = as_array(column)
    n = len(array)
    valid = validity(array)
    t = array.type
    keys: np.ndarray
    if pa.types.is_boolean(t):
        keys = np.asarray(pc.fill_null(array, False).to_numpy(zero_copy_only=False), dtype=np.int64)
    elif pa.types.is_integer(t):
        keys = pc.fill_null(array, 0).to_numpy().astype(np.int64)
    elif pa.types.is_floating(t):
        keys = _float_keys(pc.fill_null(array, 0).to_numpy())
    elif pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_time(t) or pa.types.is_duration(t):
        width = pa.int32() if t.bit_width == 32 else pa.int64()
        keys = pc.fill_null(array.view(width), 0).to_numpy().astype(np.int64)
    elif pa.types.is_decimal128(t) and t.precision <= 18:
        # the low 64-bit word of a decimal128 is the whole (signed) unscaled value
        words = np.frombuffer(array.buffers()[1], dtype=np.int64, count=2 * (array.offset + n))
        keys = words[2 * array.offset::2].copy()
    else:  # strings, binaries, wide decimals: dense ranks (Arrow orders bytes like Java does)
        keys = np.asarray(pc.rank(array, sort_keys="ascending", tiebreaker="dense")
                          .to_numpy(zero_copy_only=False), dtype=np.int64)
    if not valid.all():
        keys = np.where(valid, keys, 0)
    return keys, valid


def _float_keys(values: np.ndarray) -> np.ndarray:
    """Integers ordered like Float.compare / Double.compare (total order, canonical NaN)."""
    if values.dtype == np.float16:
        values = values.astype(np.float32)
    if values.dtype == np.float32:
        bits = values.view(np.int32).astype(np.int64)
        keys = bits ^ ((bits >> 31) & 0x7FFFFFFF)
        nan_key = 0x7FC00000
    else:
        bits = values.astype(np.float64).view(np.int64)
        keys = bits ^ ((bits >> 63) & 0x7FFFFFFFFFFFFFFF)
        nan_key = 0x7FF8000000000000
    nan = np.isnan(values)
    return np.where(nan, nan_key, keys) if nan.any() else keys


def tuple_sort_keys(columns: Sequence[pa.ChunkedArray | pa.Array], descending: bool = False) -> list[np.ndarray]:
    """Sort keys (most significant first) ordering rows by a tuple of fields, nulls first."""
    keys: list[np.ndarray] = []
    for column in columns:
        k, valid = order_key(column)
        if descending:
            k = ~k  # reverses the order without overflow
        keys.append(valid.astype(np.int8))
        keys.append(k)
    return keys


def lexsort(keys: Sequence[np.ndarray]) -> np.ndarray:
    """Stable sort by keys given most significant first."""
    return np.lexsort(list(reversed(keys)))


def tuple_rank(columns: Sequence[pa.ChunkedArray | pa.Array]) -> np.ndarray:
    """Dense rank of each row's tuple (ascending, nulls first); 0 for an all-null tuple, else >= 1."""
    n = len(columns[0])
    keys = tuple_sort_keys(columns)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if len(columns) == 1:  # a narrow range needs no sort: the value itself is a rank
        valid, k = keys
        if valid.any():
            low, high = int(k[valid == 1].min()), int(k[valid == 1].max())
            if high - low < 2**31:
                return np.where(valid == 1, k - low + 1, 0)
    order = lexsort(keys)
    change = np.zeros(n, dtype=bool)
    for k in keys:
        ks = k[order]
        change[1:] |= ks[1:] != ks[:-1]
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.cumsum(change) + 1
    empty = np.ones(n, dtype=bool)
    for k in keys[0::2]:
        empty &= k == 0
    rank[empty] = 0
    return rank


@dataclass
class KeyGroups:
    """Contiguous groups of rows (one per key): their first and last rows and each row's group."""

    n: int
    starts: np.ndarray
    ends: np.ndarray
    gid: np.ndarray

    @staticmethod
    def of_table(table: pa.Table, key_names: Sequence[str]) -> KeyGroups:
        return KeyGroups.of_ends(group_ends(table, key_names))

    @staticmethod
    def of_ends(end_mask: np.ndarray) -> KeyGroups:
        n = len(end_mask)
        ends = np.flatnonzero(end_mask).astype(np.int64)
        starts = np.empty_like(ends)
        if len(ends):
            starts[0] = 0
            starts[1:] = ends[:-1] + 1
        gid = np.repeat(np.arange(len(ends), dtype=np.int64), ends - starts + 1)
        return KeyGroups(n, starts, ends, gid)

    @staticmethod
    def of_gid(gid: np.ndarray) -> KeyGroups:
        """Groups of a non-decreasing array of group ids (ids need not be dense)."""
        n = len(gid)
        end_mask = np.ones(n, dtype=bool)
        if n > 1:
            end_mask[:-1] = gid[1:] != gid[:-1]
        groups = KeyGroups.of_ends(end_mask)
        return groups

    @property
    def count(self) -> int:
        return len(self.starts)

    @property
    def sizes(self) -> np.ndarray:
        return self.ends - self.starts + 1

    def first_where(self, mask: np.ndarray) -> np.ndarray:
        """Per group, the first row where mask is set, or -1."""
        if mask.all():
            return self.starts.copy()
        idx = np.flatnonzero(mask)
        out = np.full(self.count, -1, dtype=np.int64)
        if len(idx):
            g = self.gid[idx]
            first = np.ones(len(idx), dtype=bool)
            first[1:] = g[1:] != g[:-1]
            out[g[first]] = idx[first]
        return out

    def last_where(self, mask: np.ndarray) -> np.ndarray:
        """Per group, the last row where mask is set, or -1."""
        if mask.all():
            return self.ends.copy()
        idx = np.flatnonzero(mask)
        out = np.full(self.count, -1, dtype=np.int64)
        if len(idx):
            g = self.gid[idx]
            last = np.ones(len(idx), dtype=bool)
            last[:-1] = g[1:] != g[:-1]
            out[g[last]] = idx[last]
        return out

    def any(self, mask: np.ndarray) -> np.ndarray:
        if mask.all():
            return np.ones(self.count, dtype=bool)
        out = np.zeros(self.count, dtype=bool)
        out[self.gid[mask]] = True
        return out

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Per-group sums of integers (exact while each group's sum fits in int64: the prefix
        sums wrap around, their differences do not)."""
        total = np.cumsum(values, dtype=np.int64)
        before = np.zeros(self.count, dtype=np.int64)
        before[1:] = total[self.ends[:-1]]
        return total[self.ends] - before

    def cummax(self, values: np.ndarray) -> np.ndarray:
        """Running maximum of non-negative integers, restarting at each group."""
        if self.n == 0:
            return values
        span = int(values.max()) + 1
        shifted = self.gid * span + values
        return np.maximum.accumulate(shifted) - self.gid * span


def take_or_null(array: pa.Array | pa.ChunkedArray, idx: np.ndarray) -> pa.Array:
    """array[idx], null where idx < 0."""
    neg = idx < 0
    indices = pa.array(idx, type=pa.int64(), mask=neg) if neg.any() else pa.array(idx, type=pa.int64())
    return as_array(pc.take(array, indices))


class SequenceOrder:
    """Orders the records of each key by ``sequence.field`` (then by arrival order)."""

    def __init__(self, fields: Sequence[str], descending: bool = False):
        self.fields = list(fields)
        self.descending = descending

    def permutation(self, table: pa.Table, groups: KeyGroups) -> np.ndarray | None:
        """Stable permutation sorting rows by (key group, sequence fields); None if already so."""
        if table.num_rows < 2:
            return None
        missing = [f for f in self.fields if f not in table.column_names]
        if missing:
            raise KeyError(f"sequence.field column(s) {missing} are needed to merge but were not read")
        keys = tuple_sort_keys([table.column(f) for f in self.fields], self.descending)
        order = lexsort([groups.gid, *keys])
        if (order == np.arange(len(order))).all():
            return None
        return order

    def winners(self, table: pa.Table, groups: KeyGroups) -> np.ndarray:
        """Per key, the row merged last (the largest sequence; the latest arrival on ties)."""
        if len(self.fields) > 1:
            order = self.permutation(table, groups)
            return groups.ends if order is None else order[groups.ends]
        if self.fields[0] not in table.column_names:
            raise KeyError(f"sequence.field column {self.fields[0]!r} is needed to merge but was not read")
        keys, valid = order_key(table.column(self.fields[0]))
        if self.descending:
            keys = ~keys
        if valid.all():
            best = np.maximum.reduceat(keys, groups.starts)
            return groups.last_where(keys == best[groups.gid])
        has_value = groups.any(valid)
        best = np.maximum.reduceat(np.where(valid, keys, _I64_MIN), groups.starts)
        hit = np.where(has_value[groups.gid], valid & (keys == best[groups.gid]), True)
        return groups.last_where(hit)

    def reorder(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        """The table with each key's records in merge order (input: sorted by key, then arrival)."""
        groups = KeyGroups.of_table(table, key_names)
        order = self.permutation(table, groups)
        return table if order is None else table.take(order)
