"""The ``aggregation`` merge engine and its per-field aggregate functions, vectorized.

Semantics follow Paimon's ``AggregateMergeFunction`` and ``Field*Agg`` classes: the records of a
key are folded in merge order, field by field; an insert (+I/+U) calls ``agg(acc, value)``, a
retraction (-U/-D) calls ``retract(acc, value)``. The fold is computed for all keys at once from
group boundaries (no Python loop per row or per key):

* ``sum``: sum of non-null values, retractions subtract (``retract(null, x) = -x``); null if no
  non-null value. Integer overflow raises (Paimon's ``addExact``); a DECIMAL sum that does not
  fit the column's precision becomes null (``Decimal.fromBigDecimal``).
* ``product``: product of non-null values; a retraction divides (integer division truncates) and
  is ignored while the accumulator is still null.
* ``max`` / ``min`` (ties keep the earlier / later record, as Java does), ``bool_and``,
  ``bool_or``: over non-null values.
* ``last_value``: the last record's value, null if that record is a retraction.
* ``last_non_null_value`` (the default): the last record with a non-null value; null if that
  record is a retraction.
* ``first_value`` / ``first_non_null_value`` (legacy name ``first_not_null_value``): the first
  insert's value / the first non-null inserted value.
* ``listagg``: non-blank strings joined by ``fields.<f>.list-agg-delimiter`` (default ``,``);
  with ``fields.<f>.distinct`` a token (split by the delimiter) already present is not appended
  again (the first value is kept as is).
* ``collect``: concatenated arrays (``fields.<f>.distinct``: each element once); a retraction
  removes one earlier occurrence per retracted element.
* ``merge_map``: maps merged, later values win; a retraction removes the retracted keys.

Only sum, product, collect, merge_map, last_value and last_non_null_value accept retractions;
for the other functions a retraction is an error unless ``fields.<f>.ignore-retract=true``.
The merged record is an insert (+I) carrying the last record's sequence number, except with
``aggregation.remove-record-on-delete``: a -D resets the row to the -D record's values, and a key
whose last record is a -D merges to a -D. With ``ignore-delete`` retractions are dropped (Paimon
drops them when writing, for every engine).

Merging in steps (flush, partial compaction) gives the same result as merging all records at
once for every function on inserts, and for sum and last_value retractions. As in Paimon, whose
merged record keeps no trace of a retraction, it does not when a retraction meets an empty
accumulator in one merge and the value it should cancel in a later one (product, collect,
merge_map, last_non_null_value), nor for rows re-seeded by a -D (remove-record-on-delete).

Differences from a sequential Java fold: floating-point sums and products may differ in the last
bits (pairwise summation); integer overflow is detected on the result, not on each step; a
DECIMAL sum/product that overflows becomes null without restarting from the next value; DECIMAL
products are rounded by Arrow; ``first_value`` on a row re-seeded by a -D keeps the seed.
"""

from __future__ import annotations

import decimal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.errors import OptionError
from strata.mergetree.merge_base import (
    DELETE,
    INSERT,
    MergeError,
    MergeFunction,
    drop_retractions,
    retraction_mask,
)
from strata.mergetree.sequence import (
    KeyGroups,
    SequenceOrder,
    as_array,
    order_key,
    take_or_null,
    validity,
)
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND

LAST_NON_NULL = "last_non_null_value"
LAST_VALUE = "last_value"
PRIMARY_KEY = "primary-key"
FUNCTIONS = ("sum", "product", "max", "min", "last_value", "last_non_null_value", "first_value",
             "first_non_null_value", "listagg", "bool_and", "bool_or", "collect", "merge_map")
ALIASES = {"first_not_null_value": "first_non_null_value"}
RETRACTABLE = frozenset({"sum", "product", "collect", "merge_map", "last_value", "last_non_null_value",
                         PRIMARY_KEY})
# Paimon functions Strata cannot compute (yet): a table using them is refused, not misread
NOT_SUPPORTED = ("rbm32", "rbm64", "nested_update", "nested_partial_update", "merge_map_with_keytime",
                 "hll_sketch", "theta_sketch")
_COLLECTIONS = frozenset({"ARRAY", "MAP", "MULTISET"})
_NUMERIC = frozenset({"TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL"})


@dataclass(frozen=True)
class FieldAgg:
    """The aggregate function of one field and its per-field options."""

    field: str
    function: str
    ignore_retract: bool = False
    delimiter: str = ","
    distinct: bool = False

    @property
    def accepts_retract(self) -> bool:
        return self.ignore_retract or self.function in RETRACTABLE


def _flag(options: Mapping[str, str], key: str) -> bool:
    value = options.get(key)
    if value is None:
        return False
    if value.lower() not in ("true", "false"):
        raise OptionError(f"option {key!r} must be true or false, got {value!r}")
    return value.lower() == "true"


def function_name(options: Mapping[str, str], field: str) -> str | None:
    """The configured function of a field (its own, else fields.default-aggregate-function)."""
    name = options.get(f"fields.{field}.aggregate-function")
    if name is None:
        name = options.get("fields.default-aggregate-function")
    return None if name is None else ALIASES.get(name, name)


def field_agg(options: Mapping[str, str], field: str, function: str) -> FieldAgg:
    return FieldAgg(field, function,
                    ignore_retract=_flag(options, f"fields.{field}.ignore-retract"),
                    delimiter=options.get(f"fields.{field}.list-agg-delimiter", ","),
                    distinct=_flag(options, f"fields.{field}.distinct"))


def check_function(field: str, function: str, type_root: str | None, string_length: int | None,
                   where: str) -> None:
    """Reject unknown functions and functions on types they do not support (naming the field)."""
    if function == "count":
        raise OptionError(f"{where}: field {field!r}: Paimon has no 'count' aggregate function; use 'sum' "
                          "over a column of 1s (or a condition as 1/0) instead")
    if function in NOT_SUPPORTED:
        raise OptionError(f"{where}: field {field!r}: aggregate function {function!r} is not supported by Strata yet")
    if function not in FUNCTIONS:
        raise OptionError(f"{where}: field {field!r}: unknown aggregate function {function!r}; "
                          f"expected one of {', '.join(FUNCTIONS)}")
    if type_root is None:
        return
    problem = None
    if function in ("sum", "product") and type_root not in _NUMERIC:
        problem = "a numeric column"
    elif function in ("bool_and", "bool_or") and type_root != "BOOLEAN":
        problem = "a BOOLEAN column"
    elif function == "listagg" and (type_root != "VARCHAR" or string_length != 2147483647):
        problem = "a STRING (unbounded VARCHAR) column"
    elif function == "collect" and type_root != "ARRAY":
        problem = "an ARRAY column"
    elif function == "merge_map" and type_root != "MAP":
        problem = "a MAP column"
    elif function in ("max", "min") and type_root in _COLLECTIONS:
        problem = "a comparable (atomic) column"
    if problem:
        raise OptionError(f"{where}: aggregate function {function!r} of field {field!r} needs {problem}, "
                          f"not {type_root}")


def retraction_error(spec: FieldAgg) -> MergeError:
    return MergeError(
        f"aggregate function {spec.function!r} of field {spec.field!r} does not accept retractions "
        f"(-U/-D records); set 'fields.{spec.field}.ignore-retract'='true' to ignore them")


# -- the fold ---------------------------------------------------------------------------------------

def fold(spec: FieldAgg, column: pa.Array | pa.ChunkedArray, gid: np.ndarray, retract: np.ndarray,
         n_groups: int) -> pa.Array:
    """Aggregate rows into ``n_groups`` values; rows are in merge order, ``gid`` is non-decreasing
    (a group without rows gives null)."""
    values = as_array(column)
    if retract.any():
        if spec.ignore_retract:
            keep = np.flatnonzero(~retract)
            values, gid, retract = as_array(values.take(pa.array(keep))), gid[keep], retract[keep]
        elif spec.function not in RETRACTABLE:
            raise retraction_error(spec)
    if len(values) == 0:
        return pa.nulls(n_groups, type=values.type)
    groups = KeyGroups.of_gid(gid)
    result = _KERNELS[spec.function](spec, values, groups, retract)
    present = gid[groups.starts]
    if len(present) == n_groups:
        return result
    mapping = np.full(n_groups, -1, dtype=np.int64)
    mapping[present] = np.arange(len(present))
    return take_or_null(result, mapping)


Kernel = Callable[[FieldAgg, pa.Array, KeyGroups, np.ndarray], pa.Array]


def _filled(values: pa.Array, fill: object) -> np.ndarray:
    return np.asarray(pc.fill_null(values, pa.scalar(fill, values.type)).to_numpy(zero_copy_only=False))


def _int_range(t: pa.DataType) -> tuple[int, int]:
    info = np.iinfo(t.to_pandas_dtype())
    return int(info.min), int(info.max)


def _check_range(values: np.ndarray, t: pa.DataType, spec: FieldAgg) -> None:
    low, high = _int_range(t)
    bad = np.asarray((values < low) | (values > high), dtype=bool)
    if bad.any():
        raise MergeError(f"{spec.function} of field {spec.field!r} overflows {t}")


def _group_reduce(values: pa.Array, groups: KeyGroups, how: str) -> pa.Array:
    table = pa.table({"g": groups.gid, "v": values})
    out = table.group_by("g", use_threads=False).aggregate([("v", how)])
    return as_array(out.column(1))


def _fit_decimal(values: pa.Array, t: pa.DataType) -> pa.Array:
    """Values that need more than the column's precision become null (Decimal.fromBigDecimal)."""
    wide = pa.decimal128(38, t.scale)
    values = pc.cast(values, wide, safe=False) if values.type != wide else values
    limit = pa.scalar(decimal.Decimal(10) ** (t.precision - t.scale), wide)
    fits = pc.less(pc.abs(values), limit)
    return as_array(pc.cast(pc.if_else(fits, values, pa.scalar(None, wide)), t))


def _sum(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    t = values.type
    valid = validity(values)
    has = groups.any(valid)
    neg = retract & valid
    if pa.types.is_decimal(t):
        signed = pc.if_else(pa.array(neg), pc.negate(values), values) if neg.any() else values
        return _fit_decimal(_group_reduce(signed, groups, "sum"), t)
    if pa.types.is_integer(t):
        x = _filled(values, 0).astype(np.int64)
        if neg.any():
            x = np.where(neg, -x, x)
        total = groups.sum(x)
        magnitude = np.bincount(groups.gid, weights=np.abs(x.astype(np.float64)), minlength=groups.count)
        if (magnitude >= 2.0 ** 62).any():  # int64 may have wrapped: redo exactly
            _check_range(np.add.reduceat(x.astype(object), groups.starts), t, spec)
        else:
            _check_range(total, t, spec)
        return pa.array(total.astype(t.to_pandas_dtype()), type=t, mask=~has)
    if pa.types.is_floating(t):
        x = _filled(values, 0)
        if neg.any():
            x = np.where(neg, -x, x)
        if x.dtype == np.float64:  # bincount adds in row order, like Java's sequential fold
            total = np.bincount(groups.gid, weights=x, minlength=groups.count)
        else:
            total = np.add.reduceat(x, groups.starts)
        return pa.array(total, type=t, mask=~has)
    raise MergeError(f"sum of field {spec.field!r} needs a numeric column, not {t}")


def _product(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    t = values.type
    valid = validity(values)
    has = groups.any(valid & ~retract)
    active = retract & valid
    if pa.types.is_decimal(t):
        if active.any():
            raise MergeError(f"product of DECIMAL field {spec.field!r}: retractions are not supported by Strata")
        return _fit_decimal(_group_reduce(values, groups, "product"), t)
    if not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        raise MergeError(f"product of field {spec.field!r} needs a numeric column, not {t}")
    integer = pa.types.is_integer(t)
    raw = _filled(values, 1)
    if integer:
        raw = raw.astype(np.int64)
    x = np.where(valid & ~retract, raw, raw.dtype.type(1))
    result = np.multiply.reduceat(x, groups.starts)
    if integer:
        log_size = np.add.reduceat(np.log2(np.maximum(np.abs(x.astype(np.float64)), 1.0)), groups.starts)
        if (log_size >= 62).any():
            _check_range(np.multiply.reduceat(x.astype(object), groups.starts), t, spec)
        else:
            _check_range(result, t, spec)
    if active.any():  # keys with retractions: an exact sequential fold, all such keys at once
        affected = groups.any(active)
        rows = np.flatnonzero(affected[groups.gid])
        acc, _ = _lockstep_product(spec, t, raw, valid, retract, groups, rows)
        result = result.copy()
        result[np.flatnonzero(affected)] = acc
    if integer:
        result = result.astype(t.to_pandas_dtype())
    return pa.array(result, type=t, mask=~has)


def _lockstep_product(spec: FieldAgg, t: pa.DataType, x: np.ndarray, valid: np.ndarray, retract: np.ndarray,
                      groups: KeyGroups, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sequential product/division fold for the groups of ``rows`` (whole groups, in order).

    The loop runs over positions within a group (at most the largest group's size), each step
    vectorized over all groups."""
    integer = pa.types.is_integer(t)
    gid = groups.gid[rows]
    dense = np.unique(gid, return_inverse=True)[1]
    pos = rows - groups.starts[gid]
    order = np.argsort(pos, kind="stable")
    cuts = np.flatnonzero(np.diff(pos[order])) + 1
    n_acc = int(dense.max()) + 1
    acc = np.ones(n_acc, dtype=np.int64 if integer else x.dtype)
    has = np.zeros(n_acc, dtype=bool)
    low, high = _int_range(t) if integer else (0, 0)
    for step in np.split(order, cuts):
        r = rows[step]
        g = dense[step]
        v = x[r].astype(acc.dtype)
        add = valid[r] & ~retract[r]
        ga, va = g[add], v[add]
        product = np.where(has[ga], acc[ga] * va, va)
        if integer:
            exact = np.abs(np.where(has[ga], acc[ga], 1).astype(np.float64) * va.astype(np.float64))
            if (exact >= 2.0 ** 63).any() or ((product < low) | (product > high)).any():
                raise MergeError(f"product of field {spec.field!r} overflows {t}")
        acc[ga] = product
        has[ga] = True
        sub = valid[r] & retract[r] & has[g]
        gs, vs = g[sub], v[sub]
        if integer:
            if (vs == 0).any():
                raise MergeError(f"product of field {spec.field!r}: retraction divides by zero")
            q = acc[gs] // vs
            q += ((acc[gs] % vs) != 0) & ((acc[gs] < 0) != (vs < 0))  # truncate toward zero, as Java
            acc[gs] = q
        else:
            with np.errstate(divide="ignore", invalid="ignore"):
                acc[gs] = acc[gs] / vs
    return acc, has


def _extreme(values: pa.Array, groups: KeyGroups, largest: bool) -> pa.Array:
    keys, valid = order_key(values)
    if largest:
        best = np.maximum.reduceat(np.where(valid, keys, np.iinfo(np.int64).min), groups.starts)
        return take_or_null(values, groups.first_where(valid & (keys == best[groups.gid])))
    best = np.minimum.reduceat(np.where(valid, keys, np.iinfo(np.int64).max), groups.starts)
    return take_or_null(values, groups.last_where(valid & (keys == best[groups.gid])))


def _max(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    return _extreme(values, groups, largest=True)


def _min(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    return _extreme(values, groups, largest=False)


def _last_value(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    idx = np.where(retract[groups.ends], -1, groups.ends)
    return take_or_null(values, idx)


def _last_non_null(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    idx = groups.last_where(validity(values))
    idx = np.where((idx >= 0) & retract[np.maximum(idx, 0)], -1, idx)
    return take_or_null(values, idx)


def _primary_key(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    return take_or_null(values, groups.ends)


def _first_value(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    return take_or_null(values, groups.first_where(~retract))


def _first_non_null(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    return take_or_null(values, groups.first_where(validity(values) & ~retract))


def _bool(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    if not pa.types.is_boolean(values.type):
        raise MergeError(f"{spec.function} of field {spec.field!r} needs a BOOLEAN column, not {values.type}")
    valid = validity(values)
    both = spec.function == "bool_and"
    x = _filled(values, both).astype(bool)
    reduce = np.logical_and if both else np.logical_or
    return pa.array(reduce.reduceat(x, groups.starts), type=values.type, mask=~groups.any(valid))


def _offsets(counts: np.ndarray, large: bool = False) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets, type=pa.int64() if large else pa.int32())


def _codes(values: pa.Array, spec: FieldAgg) -> np.ndarray:
    """Equal values get equal integer codes (nulls included)."""
    try:
        encoded = pc.dictionary_encode(values, null_encoding="encode")
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
        raise MergeError(f"{spec.function} of field {spec.field!r}: cannot compare elements of type "
                         f"{values.type}") from None
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def _listagg(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    if not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        raise MergeError(f"listagg of field {spec.field!r} needs a STRING column, not {values.type}")
    keep = validity(values) & ~_blank(values)
    rows = np.flatnonzero(keep)
    has = groups.any(keep)
    kept = as_array(values.take(pa.array(rows, type=pa.int64())))
    kgid = groups.gid[rows]
    if not spec.distinct:
        lists = pa.ListArray.from_arrays(_offsets(np.bincount(kgid, minlength=groups.count)), kept,
                                         mask=pa.array(~has))
        return as_array(pc.binary_join(lists, spec.delimiter))
    tokens = pc.split_pattern(kept, pattern=spec.delimiter)
    flat = as_array(pc.list_flatten(tokens))
    parent = np.asarray(pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False), dtype=np.int64)
    first_kept = np.ones(len(rows), dtype=bool)
    first_kept[1:] = kgid[1:] != kgid[:-1]
    tgid = kgid[parent]
    codes = _codes(flat, spec)
    pair = tgid * (int(codes.max(initial=0)) + 1) + codes
    first_seen = np.zeros(len(flat), dtype=bool)
    first_seen[np.unique(pair, return_index=True)[1]] = True
    keep_token = first_kept[parent] | (first_seen & ~_blank(flat))
    chosen = np.flatnonzero(keep_token)
    lists = pa.ListArray.from_arrays(_offsets(np.bincount(tgid[chosen], minlength=groups.count)),
                                     flat.take(pa.array(chosen, type=pa.int64())), mask=pa.array(~has))
    return as_array(pc.binary_join(lists, spec.delimiter))


def _blank(values: pa.Array) -> np.ndarray:
    """StringUtils.isBlank: empty or whitespace only."""
    blank = pc.or_(pc.equal(pc.utf8_length(values), 0), pc.utf8_is_space(values))
    return np.asarray(pc.fill_null(blank, False).to_numpy(zero_copy_only=False), dtype=bool)


def _segment_cumsum(x: np.ndarray, groups: KeyGroups) -> np.ndarray:
    total = np.cumsum(x)
    before = total[groups.starts] - x[groups.starts]
    return total - before[groups.gid]


def _elements(values: pa.Array, groups: KeyGroups, retract: np.ndarray
              ) -> tuple[pa.Array, np.ndarray, np.ndarray, np.ndarray]:
    """Flattened elements of the non-null lists: elements, their group, retraction flag, and
    which groups have a non-null insert."""
    valid = validity(values)
    has = groups.any(valid & ~retract)
    rows = np.flatnonzero(valid)
    sub = as_array(values.take(pa.array(rows, type=pa.int64())))
    flat = as_array(pc.list_flatten(sub))
    parent = np.asarray(pc.list_parent_indices(sub).to_numpy(zero_copy_only=False), dtype=np.int64)
    erow = rows[parent]
    return flat, groups.gid[erow], retract[erow], has


def _collect(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    t = values.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        raise MergeError(f"collect of field {spec.field!r} needs an ARRAY column, not {t}")
    flat, egid, eret, has = _elements(values, groups, retract)
    m = len(flat)
    if spec.distinct or eret.any():
        codes = _codes(flat, spec)
        pair = egid * (int(codes.max(initial=0)) + 1) + codes
        order = np.argsort(pair, kind="stable")  # events of one (key, element), in merge order
        pairs = KeyGroups.of_gid(pair[order])
        is_add = ~eret[order]
        if spec.distinct:
            # a set: present iff the last event is an insert; placed at the first insert after
            # the last retraction
            present = is_add[pairs.ends]
            last_retract = pairs.last_where(~is_add)
            first_add = pairs.first_where(is_add & (np.arange(m) > last_retract[pairs.gid]))
            chosen = np.sort(order[first_add[present]])
        else:
            # a multiset with FIFO removal: the survivors are the latest c inserts, where c is the
            # floor-at-zero walk (+1 insert, -1 retraction) at the end
            walk = _segment_cumsum(np.where(is_add, 1, -1), pairs)
            survivors = walk[pairs.ends] - np.minimum(0, np.minimum.reduceat(walk, pairs.starts))
            add_rank = _segment_cumsum(is_add.astype(np.int64), pairs) - 1
            adds = add_rank[pairs.ends] + 1
            chosen = np.sort(order[is_add & (add_rank >= (adds - survivors)[pairs.gid])])
    else:
        chosen = np.arange(m)
    large = pa.types.is_large_list(t)
    cls = pa.LargeListArray if large else pa.ListArray
    out = cls.from_arrays(_offsets(np.bincount(egid[chosen], minlength=groups.count), large),
                          flat.take(pa.array(chosen, type=pa.int64())), type=t, mask=pa.array(~has))
    return as_array(out)


def _merge_map(spec: FieldAgg, values: pa.Array, groups: KeyGroups, retract: np.ndarray) -> pa.Array:
    t = values.type
    if not pa.types.is_map(t):
        raise MergeError(f"merge_map of field {spec.field!r} needs a MAP column, not {t}")
    valid = validity(values)
    has = groups.any(valid & ~retract)
    rows = np.flatnonzero(valid)
    sub = as_array(values.take(pa.array(rows, type=pa.int64())))
    offsets = np.asarray(sub.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys = as_array(sub.keys).slice(first, last - first)
    items = as_array(sub.items).slice(first, last - first)
    erow = rows[np.repeat(np.arange(len(sub)), np.diff(offsets))]
    egid = groups.gid[erow]
    codes = _codes(keys, spec)
    pair = egid * (int(codes.max(initial=0)) + 1) + codes
    order = np.argsort(pair, kind="stable")
    pairs = KeyGroups.of_gid(pair[order])
    last_event = order[pairs.ends]
    chosen = np.sort(last_event[~retract[erow[last_event]]])
    take = pa.array(chosen, type=pa.int64())
    out = pa.MapArray.from_arrays(_offsets(np.bincount(egid[chosen], minlength=groups.count)),
                                  keys.take(take), items.take(take), type=t, mask=pa.array(~has))
    return as_array(out)


_KERNELS: dict[str, Kernel] = {
    "sum": _sum, "product": _product, "max": _max, "min": _min, "last_value": _last_value,
    "last_non_null_value": _last_non_null, "first_value": _first_value,
    "first_non_null_value": _first_non_null, "listagg": _listagg, "bool_and": _bool, "bool_or": _bool,
    "collect": _collect, "merge_map": _merge_map, PRIMARY_KEY: _primary_key,
}


# -- the merge engine -------------------------------------------------------------------------------

class AggregateMerge(MergeFunction):
    """merge-engine=aggregation."""

    def __init__(self, options: Mapping[str, str], primary_keys: Sequence[str] = (),
                 sequence: SequenceOrder | None = None):
        self.options = dict(options)
        self.primary_keys = set(primary_keys)
        self.sequence = sequence
        self.sequence_fields = set(sequence.fields) if sequence else set()
        self.remove_on_delete = _flag(self.options, "aggregation.remove-record-on-delete")
        self.ignore_delete = _flag(self.options, "ignore-delete")  # Paimon drops them at write
        self._specs: dict[str, FieldAgg] = {}

    def spec(self, field: str) -> FieldAgg:
        spec = self._specs.get(field)
        if spec is None:
            if field in self.sequence_fields:
                function = LAST_VALUE
            elif field in self.primary_keys:
                function = PRIMARY_KEY
            else:
                function = function_name(self.options, field) or LAST_NON_NULL
            spec = self._specs[field] = field_agg(self.options, field, function)
        return spec

    def required_columns(self, columns: Sequence[str]) -> list[str]:
        return [f for f in self.sequence.fields if f not in columns] if self.sequence else []

    def check_kinds(self, kinds: np.ndarray, columns: Sequence[str]) -> None:
        retract = retraction_mask(kinds)
        if self.remove_on_delete:
            retract &= kinds != DELETE
        if self.ignore_delete or not retract.any():
            return
        for name in columns:
            if name in self.primary_keys:
                continue
            spec = self.spec(name)
            if not spec.accepts_retract:
                raise retraction_error(spec)

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        if self.ignore_delete:
            table = drop_retractions(table)
        n = table.num_rows
        if n == 0:
            return table
        groups = KeyGroups.of_table(table, key_names)
        if self.sequence is not None:
            order = self.sequence.permutation(table, groups)
            if order is not None:
                table = table.take(order)
        kinds = table.column(VALUE_KIND).to_numpy()
        retract = retraction_mask(kinds)
        rows: np.ndarray | None = None
        out_kind = np.full(groups.count, INSERT, dtype=np.int8)
        if self.remove_on_delete:
            last_delete = groups.last_where(kinds == DELETE)
            reset = last_delete >= 0
            if reset.any():
                # a -D replaces the row by its own values; later records aggregate onto it
                start = np.where(reset, last_delete, groups.starts)
                rows = np.flatnonzero(np.arange(n) >= start[groups.gid])
                retract = retract.copy()
                retract[last_delete[reset]] = False
            out_kind[kinds[groups.ends] == DELETE] = DELETE
        keys = set(key_names)
        columns = []
        for name in table.column_names:
            column = table.column(name)
            if name in keys or name == SEQUENCE_NUMBER:
                columns.append(take_or_null(column, groups.ends))
            elif name == VALUE_KIND:
                columns.append(pa.array(out_kind, type=pa.int8()))
            elif KEY_PREFIX + name in keys:
                columns.append(take_or_null(column, groups.ends))
            elif rows is None:
                columns.append(fold(self.spec(name), column, groups.gid, retract, groups.count))
            else:
                sub = as_array(column).take(pa.array(rows, type=pa.int64()))
                columns.append(fold(self.spec(name), sub, groups.gid[rows], retract[rows], groups.count))
        return build_table(columns, table.schema)


def build_table(columns: Sequence[pa.Array], schema: pa.Schema) -> pa.Table:
    fixed = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(fixed, schema=schema)


def validate_aggregation(schema_fields: Mapping[str, tuple[str, int | None]], primary_keys: Sequence[str],
                         options: Mapping[str, str], sequence_fields: Sequence[str], where: str) -> None:
    """Check the per-field functions of an aggregation table (name -> (type root, length))."""
    remove = _flag(options, "aggregation.remove-record-on-delete")
    for name, (root, length) in schema_fields.items():
        if name in primary_keys or name in sequence_fields:
            continue
        function = function_name(options, name) or LAST_NON_NULL
        check_function(name, function, root, length, where)
        if remove and _flag(options, f"fields.{name}.ignore-retract"):
            raise OptionError(f"{where}: 'aggregation.remove-record-on-delete' and "
                              f"'fields.{name}.ignore-retract' conflict; set only one")
