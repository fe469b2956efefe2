"""Expressions users build with ``col`` (and ``in_rows``): a tree of predicates over columns.

    from strata import col
    table.read(filter=(col("id").between(10, 20)) & (col("dt") == "2024-01-01"))

``strata.expressions.literals.bind`` binds one to a table schema (typed literals), and every
consumer takes the bound form; ``strata.expressions.evaluators`` evaluates one on rows and on
min/max statistics (to prune partitions, files and row groups without reading them).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from strata.expressions.evaluators import (  # ColumnStats: part of this module's API
    ColumnStats,  # noqa: F401
    StatsLookup,
    key_set_expression,
    key_set_mask,
    key_set_may_match,
    leaf_expression,
    leaf_mask,
    leaf_may_match,
    min_max,
)


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

    @functools.cached_property
    def _integer_range(self) -> tuple[str, int, int] | None:  # see integer_range
        return _compute_integer_range(self)

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
        return leaf_expression(self)

    def _scalar(self) -> Any:
        """The literal as the compute kernels take it (bound leaves: a scalar of the column's type)."""
        return self.literals[0] if self.literals else None

    def _value_set(self, column_type: pa.DataType | None) -> Any:
        if column_type is None:
            return list(self.literals)
        return pa.array(list(self.literals)).cast(column_type)

    def fields(self) -> set[str]:
        return {self.field}

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return leaf_mask(self, table)

    def may_match(self, stats: StatsLookup) -> bool:
        return leaf_may_match(self, stats)


COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_UNTYPED = pa.null()
_UNKNOWN = pa.nulls(1, pa.bool_())[0]  # pa.scalar would import pandas on first use


@dataclass(frozen=True, eq=False)
class BoundLeaf(Leaf):
    """A leaf bound to its column (see `bind`): the literals are values of the column's type,
    `arrow_type` (float64 for FLOAT columns, which Arrow widens), so rows, statistics and
    partition values all compare the same values. A None literal compares as SQL's NULL."""

    arrow_type: pa.DataType = _UNTYPED
    prunes: bool = True  # False: the literal has no Python form statistics compare with (ns timestamps)

    def _scalar(self) -> Any:
        return self._typed_scalar

    @functools.cached_property
    def _typed_scalar(self) -> Any:  # built once: a leaf is evaluated on every batch of a read
        if not self.literals:
            return None
        return pa.scalar(self.literals[0], self.arrow_type)

    def _value_set(self, column_type: pa.DataType | None) -> Any:
        values = pa.array(list(self.literals), self.arrow_type)
        return values if column_type is None else values.cast(column_type)

    # SQL: NULL IN (...) is NULL, where Arrow's is_in says false (it matters under NOT)
    def to_arrow(self) -> pc.Expression:
        expression = super().to_arrow()
        if self.op != "in":
            return expression
        return expression | (pc.field(self.field).is_null() & pc.scalar(_UNKNOWN))

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        mask = super().mask(table)
        if self.op != "in":
            return mask
        return pc.if_else(pc.is_null(table.column(self.field)), _UNKNOWN, mask)

    def may_match(self, stats: StatsLookup) -> bool:
        if self.op in COMPARISONS and self.literals[0] is None:
            return False  # a comparison with NULL is never true
        return super().may_match(stats) if self.prunes or self.op in ("is_null", "is_not_null") else True


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
        self._ranges = {name: min_max(self.rows.column(name)) for name in self.rows.column_names}
        self._expression: pc.Expression | None = None

    def fields(self) -> set[str]:
        return set(self.rows.column_names)

    def mask(self, table: pa.Table) -> pa.ChunkedArray | pa.Array:
        return key_set_mask(self.rows, table)

    def may_match(self, stats: StatsLookup) -> bool:
        return key_set_may_match(self._ranges, stats)

    def to_arrow(self) -> pc.Expression:
        if self._expression is None:
            self._expression = key_set_expression(self.rows.schema, self.rows.to_pylist())
        return self._expression


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


def all_of(predicates: list[Predicate]) -> Predicate | None:
    """The conjunction of `predicates` (None: no predicate)."""
    if not predicates:
        return None
    combined = predicates[0]
    for predicate in predicates[1:]:
        combined = And(combined, predicate)
    return combined


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


def integer_range(predicate: Predicate) -> tuple[str, int, int] | None:
    """(field, lo, hi): the closed range of integers a conjunction of comparisons of one field
    with integer literals allows (what a key range read asks); None for any other predicate.
    Kept with the (immutable) predicate: a range read asks it again for every file."""
    return predicate._integer_range


def _compute_integer_range(predicate: Predicate) -> tuple[str, int, int] | None:
    if isinstance(predicate, And):
        left, right = integer_range(predicate.left), integer_range(predicate.right)
        if left is None or right is None or left[0] != right[0]:
            return None
        return left[0], max(left[1], right[1]), min(left[2], right[2])
    if not isinstance(predicate, Leaf) or predicate.op not in ("eq", "lt", "le", "gt", "ge") \
            or (isinstance(predicate, BoundLeaf) and not predicate.prunes):
        return None
    value = predicate.literals[0]
    if type(value) is not int:  # None (never true), bool, floats, dates: the general path
        return None
    lo, hi = {"eq": (value, value), "lt": (None, value - 1), "le": (None, value),
              "gt": (value + 1, None), "ge": (value, None)}[predicate.op]
    return predicate.field, -(2**63) if lo is None else lo, 2**63 - 1 if hi is None else hi


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
