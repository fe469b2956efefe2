"""Predicates users build with ``col``: evaluated on rows (as Arrow expressions) and on min/max
statistics (to prune partitions, files and row groups without reading them).

    from strata import col
    table.read(filter=(col("id").between(10, 20)) & (col("dt") == "2024-01-01"))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

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


class Predicate(ABC):
    @abstractmethod
    def to_arrow(self) -> pc.Expression: ...

    @abstractmethod
    def may_match(self, stats: StatsLookup) -> bool:
        """False only if no row of a unit with these stats can satisfy the predicate."""

    @abstractmethod
    def fields(self) -> set[str]: ...

    @abstractmethod
    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        """The predicate evaluated on `table`'s rows with compute kernels (no query plan): True,
        False or null (a filter drops null), as ``table.filter(self.to_arrow())`` decides."""

    def __and__(self, other: Predicate) -> Predicate:
        return And(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return Or(self, other)

    def __invert__(self) -> Predicate:
        return Not(self)


@dataclass(frozen=True, eq=False)
class Leaf(Predicate):
    field: str
    op: str  # eq ne lt le gt ge in is_null is_not_null starts_with
    literals: tuple[Any, ...] = ()

    def to_arrow(self) -> pc.Expression:
        f = pc.field(self.field)
        lit = self.literals[0] if self.literals else None
        ops: dict[str, Callable[[], pc.Expression]] = {
            "eq": lambda: f == lit, "ne": lambda: f != lit, "lt": lambda: f < lit,
            "le": lambda: f <= lit, "gt": lambda: f > lit, "ge": lambda: f >= lit,
            "in": lambda: f.isin(list(self.literals)), "is_null": f.is_null,
            "is_not_null": f.is_valid,
            "starts_with": lambda: pc.starts_with(f, pattern=lit),
        }
        return ops[self.op]()

    def fields(self) -> set[str]:
        return {self.field}

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        column = table.column(self.field)
        lit = self.literals[0] if self.literals else None
        ops: dict[str, Callable[[], pa.ChunkedArray | pa.Array]] = {
            "eq": lambda: pc.equal(column, lit), "ne": lambda: pc.not_equal(column, lit),
            "lt": lambda: pc.less(column, lit), "le": lambda: pc.less_equal(column, lit),
            "gt": lambda: pc.greater(column, lit), "ge": lambda: pc.greater_equal(column, lit),
            "in": lambda: pc.is_in(column, value_set=pa.array(list(self.literals)).cast(column.type)),
            "is_null": lambda: pc.is_null(column), "is_not_null": lambda: pc.is_valid(column),
            "starts_with": lambda: pc.starts_with(column, pattern=lit),
        }
        return ops[self.op]()

    def may_match(self, stats: StatsLookup) -> bool:
        s = stats(self.field)
        if s is None:
            return True
        if self.op == "is_null":
            return s.null_count is None or s.null_count > 0
        if self.op == "is_not_null":
            return s.null_count is None or s.row_count is None or s.null_count < s.row_count
        if s.min is None or s.max is None:
            # no min/max: all-null (prunable unless nulls could match) or unknown
            all_null = s.null_count is not None and s.row_count is not None and s.null_count == s.row_count
            return not all_null
        try:
            return self._range_may_match(s.min, s.max)
        except TypeError:
            return True  # incomparable literal: never prune

    def _range_may_match(self, lo: Any, hi: Any) -> bool:
        lit = self.literals[0] if self.literals else None
        if self.op == "eq":
            return bool(lo <= lit <= hi)
        if self.op == "ne":
            return not (lo == hi == lit)
        if self.op == "lt":
            return bool(lo < lit)
        if self.op == "le":
            return bool(lo <= lit)
        if self.op == "gt":
            return bool(hi > lit)
        if self.op == "ge":
            return bool(hi >= lit)
        if self.op == "in":
            return any(lo <= v <= hi for v in self.literals if v is not None)
        if self.op == "starts_with":
            prefix = str(lit)
            return bool(hi >= prefix and lo[: len(prefix)] <= prefix)
        return True


@dataclass(frozen=True, eq=False)
class And(Predicate):
    left: Predicate
    right: Predicate

    def to_arrow(self) -> pc.Expression:
        return self.left.to_arrow() & self.right.to_arrow()

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return pc.and_kleene(self.left.mask(table), self.right.mask(table))

    def may_match(self, stats: StatsLookup) -> bool:
        return self.left.may_match(stats) and self.right.may_match(stats)

    def fields(self) -> set[str]:
        return self.left.fields() | self.right.fields()


@dataclass(frozen=True, eq=False)
class Or(Predicate):
    left: Predicate
    right: Predicate

    def to_arrow(self) -> pc.Expression:
        return self.left.to_arrow() | self.right.to_arrow()

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return pc.or_kleene(self.left.mask(table), self.right.mask(table))

    def may_match(self, stats: StatsLookup) -> bool:
        return self.left.may_match(stats) or self.right.may_match(stats)

    def fields(self) -> set[str]:
        return self.left.fields() | self.right.fields()


@dataclass(frozen=True, eq=False)
class Not(Predicate):
    child: Predicate

    def to_arrow(self) -> pc.Expression:
        return ~self.child.to_arrow()

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return pc.invert(self.child.mask(table))

    def may_match(self, stats: StatsLookup) -> bool:
        return True  # min/max cannot refute a negation in general

    def fields(self) -> set[str]:
        return self.child.fields()


class InRows(Predicate):
    """True where a row's values of `rows`' columns equal those of some row of `rows` (a key set:
    the ids a stream says to delete, say). Nulls never match, as with SQL's ``=``. Evaluated with
    one hash lookup (one column) or one hash join (several) on the data; statistics prune by
    each column's range of keys."""

    def __init__(self, rows: pa.Table):
        if rows.num_columns == 0:
            raise ValueError("a key set needs at least one column")
        self.rows = rows.combine_chunks()
        self._ranges = {name: _min_max(self.rows.column(name)) for name in self.rows.column_names}
        self._expression: pc.Expression | None = None

    def fields(self) -> set[str]:
        return set(self.rows.column_names)

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        names = self.rows.column_names
        if len(names) == 1:
            column = table.column(names[0])
            return pc.is_in(column, value_set=self.rows.column(0).cast(column.type), skip_nulls=True)
        keys = self.rows.cast(pa.schema([table.schema.field(n) for n in names])).group_by(names).aggregate([])
        probe = table.select(names).append_column("__row", pa.array(range(table.num_rows), pa.int64()))
        hits = probe.join(keys, names, join_type="left semi", use_threads=False).column("__row")
        selected = np.zeros(table.num_rows, dtype=bool)
        selected[hits.to_numpy()] = True
        return pa.array(selected)

    def may_match(self, stats: StatsLookup) -> bool:
        for name, (lo, hi) in self._ranges.items():
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

    def to_arrow(self) -> pc.Expression:
        if self._expression is None:
            self._expression = _rows_expression(self.rows.schema, self.rows.to_pylist())
        return self._expression


def _min_max(column: pa.ChunkedArray | pa.Array) -> tuple[Any, Any]:
    bounds = pc.min_max(column)
    return bounds["min"].as_py(), bounds["max"].as_py()


def _rows_expression(schema: pa.Schema, rows: list[dict[str, Any]]) -> pc.Expression:
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
    terms = [(pc.field(first.name) == pa.scalar(value, first.type)) & _rows_expression(rest, group)
             for value, group in groups.items()]
    if not terms:
        return pc.scalar(False)
    expression = terms[0]
    for term in terms[1:]:
        expression = expression | term
    return expression


def in_rows(rows: pa.Table) -> Predicate:
    """Rows whose values of `rows`' columns equal those of some row of `rows` (see InRows)."""
    return InRows(rows)


class Column:
    """Builder of leaf predicates on one column."""

    def __init__(self, name: str):
        self.name = name

    def __eq__(self, value: object) -> Predicate:  # type: ignore[override]
        return Leaf(self.name, "eq", (value,))

    def __ne__(self, value: object) -> Predicate:  # type: ignore[override]
        return Leaf(self.name, "ne", (value,))

    def __lt__(self, value: object) -> Predicate:
        return Leaf(self.name, "lt", (value,))

    def __le__(self, value: object) -> Predicate:
        return Leaf(self.name, "le", (value,))

    def __gt__(self, value: object) -> Predicate:
        return Leaf(self.name, "gt", (value,))

    def __ge__(self, value: object) -> Predicate:
        return Leaf(self.name, "ge", (value,))

    __hash__ = None  # type: ignore[assignment]

    def between(self, low: object, high: object) -> Predicate:
        return And(Leaf(self.name, "ge", (low,)), Leaf(self.name, "le", (high,)))

    def isin(self, values: Iterable[object]) -> Predicate:
        return Leaf(self.name, "in", tuple(values))

    def is_null(self) -> Predicate:
        return Leaf(self.name, "is_null")

    def is_not_null(self) -> Predicate:
        return Leaf(self.name, "is_not_null")

    def startswith(self, prefix: str) -> Predicate:
        return Leaf(self.name, "starts_with", (prefix,))


def col(name: str) -> Column:
    return Column(name)


def only_fields(predicate: Predicate | None, allowed: set[str]) -> Predicate | None:
    """The part of a conjunction that references only `allowed` fields (safe to push down)."""
    if predicate is None:
        return None
    if isinstance(predicate, And):
        left = only_fields(predicate.left, allowed)
        right = only_fields(predicate.right, allowed)
        if left is None:
            return right
        return left if right is None else And(left, right)
    return predicate if predicate.fields() <= allowed else None


def equality_literals(predicate: Predicate | None, field: str) -> list[Any] | None:
    """Values `field` is pinned to by a conjunction of eq / in leaves, or None if unconstrained."""
    if predicate is None:
        return None
    if isinstance(predicate, And):
        left = equality_literals(predicate.left, field)
        right = equality_literals(predicate.right, field)
        if left is None:
            return right
        if right is None:
            return left
        return [v for v in left if v in right]
    if isinstance(predicate, Leaf) and predicate.field == field and predicate.op in ("eq", "in"):
        return list(predicate.literals)
    return None
