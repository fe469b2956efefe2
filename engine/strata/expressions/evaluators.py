"""Evaluating expressions: on rows (Arrow compute expressions and boolean masks) and on min/max
statistics (may a partition, file or row group hold a match?). The expression classes of
``strata.expressions`` call these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True)
class ColumnStats:
    """What is known of a column in some unit (partition, file, row group); None = unknown."""

    min: Any
    max: Any
    null_count: int | None
    row_count: int | None


StatsLookup = Callable[[str], ColumnStats | None]


class LeafTerms(Protocol):
    """A leaf predicate as the evaluators read it (``strata.expressions.Leaf``)."""

    @property
    def field(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def literals(self) -> tuple[Any, ...]: ...

    def _scalar(self) -> Any: ...

    def _value_set(self, column_type: pa.DataType | None) -> Any: ...


def leaf_expression(leaf: LeafTerms) -> pc.Expression:
    """A leaf as an Arrow compute expression (a row filter)."""
    f = pc.field(leaf.field)
    lit = leaf._scalar()
    ops: dict[str, Callable[[], pc.Expression]] = {
        "eq": lambda: f == lit, "ne": lambda: f != lit, "lt": lambda: f < lit,
        "le": lambda: f <= lit, "gt": lambda: f > lit, "ge": lambda: f >= lit,
        "in": lambda: f.isin(leaf._value_set(None)), "is_null": f.is_null,
        "is_not_null": f.is_valid,
        "starts_with": lambda: pc.starts_with(f, pattern=leaf.literals[0]),
    }
    return ops[leaf.op]()


def leaf_mask(leaf: LeafTerms, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """A leaf evaluated on the rows of `table`: a boolean mask."""
    column = table.column(leaf.field)
    lit = leaf._scalar()
    ops: dict[str, Callable[[], pa.ChunkedArray | pa.Array]] = {
        "eq": lambda: pc.equal(column, lit), "ne": lambda: pc.not_equal(column, lit),
        "lt": lambda: pc.less(column, lit), "le": lambda: pc.less_equal(column, lit),
        "gt": lambda: pc.greater(column, lit), "ge": lambda: pc.greater_equal(column, lit),
        "in": lambda: pc.is_in(column, value_set=leaf._value_set(column.type)),
        "is_null": lambda: pc.is_null(column), "is_not_null": lambda: pc.is_valid(column),
        "starts_with": lambda: pc.starts_with(column, pattern=leaf.literals[0]),
    }
    return ops[leaf.op]()


def leaf_may_match(leaf: LeafTerms, stats: StatsLookup) -> bool:
    """False when statistics prove that no row of the unit matches the leaf."""
    s = stats(leaf.field)
    if s is None:
        return True
    if leaf.op == "is_null":
        return s.null_count is None or s.null_count > 0
    if leaf.op == "is_not_null":
        return s.null_count is None or s.row_count is None or s.null_count < s.row_count
    if s.min is None or s.max is None:
        # no min/max: all-null (prunable unless nulls could match) or unknown
        all_null = s.null_count is not None and s.row_count is not None and s.null_count == s.row_count
        return not all_null
    try:
        return _range_may_match(leaf, s.min, s.max)
    except TypeError:
        return True  # incomparable literal: never prune

def _range_may_match(leaf: LeafTerms, lo: Any, hi: Any) -> bool:
    lit = leaf.literals[0] if leaf.literals else None
    if leaf.op == "eq":
        return bool(lo <= lit <= hi)
    if leaf.op == "ne":
        return not (lo == hi == lit)
    if leaf.op == "lt":
        return bool(lo < lit)
    if leaf.op == "le":
        return bool(lo <= lit)
    if leaf.op == "gt":
        return bool(hi > lit)
    if leaf.op == "ge":
        return bool(hi >= lit)
    if leaf.op == "in":
        return any(lo <= v <= hi for v in leaf.literals if v is not None)
    if leaf.op == "starts_with":
        prefix = str(lit)
        return bool(hi >= prefix and lo[: len(prefix)] <= prefix)
    return True


def key_set_mask(rows: pa.Table, table: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Rows of `table` whose key columns equal some row of `rows` (see InRows)."""
    names = rows.column_names
    if len(names) == 1:
        column = table.column(names[0])
        return pc.is_in(column, value_set=rows.column(0).cast(column.type), skip_nulls=True)
    keys = rows.cast(pa.schema([table.schema.field(n) for n in names])).group_by(names).aggregate([])
    probe = table.select(names).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
    hits = probe.join(keys, names, join_type="left semi", use_threads=False).column("__row")
    selected = np.zeros(table.num_rows, dtype=bool)
    selected[hits.to_numpy()] = True
    return pa.array(selected)


def key_set_may_match(ranges: dict[str, tuple[Any, Any]], stats: StatsLookup) -> bool:
    """False when statistics prove that no key of a key set, by `ranges` of its columns, is in the unit."""
    for name, (lo, hi) in ranges.items():
        if lo is None:
            return False  # every key is null there: nothing matches
        s = stats(name)
        if s is None or s.min is None or s.max is None:
            continue
        try:
            if s.max < lo or s.min > hi:
                return False
        except TypeError:
            continue
    return True


def min_max(column: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    bounds = pc.min_max(column)
    return bounds["min"].as_py(), bounds["max"].as_py()


def key_set_expression(schema: pa.Schema, rows: list[dict[str, Any]]) -> pc.Expression:
    """The exact expression of a key set: an `isin` on the last column, nested under equalities
    of the first ones grouped by value (as many terms as distinct key prefixes)."""
    first = schema.field(0)
    if len(schema) == 1:
        values = pa.array([r[first.name] for r in rows if r[first.name] is not None], first.type)
        return pc.field(first.name).isin(values)
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        if row[first.name] is not None:
            groups.setdefault(row[first.name], []).append(row)
    rest = schema.remove(0)
    terms = [(pc.field(first.name) == pa.scalar(value, first.type)) & key_set_expression(rest, group)
             for value, group in groups.items()]
    if not terms:
        return pc.scalar(False)
    expression = terms[0]
    for term in terms[1:]:
        expression = expression | term
    return expression
