"""Predicates users build with ``col``: evaluated on rows (as Arrow expressions) and on min/max
statistics (to prune partitions, files and row groups without reading them).

    from strata import col
    table.read(filter=(col("id").between(10, 20)) & (col("dt") == "2024-01-01"))
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.errors import FilterError


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
        lit = self._scalar()
        ops: dict[str, Callable[[], pc.Expression]] = {
            "eq": lambda: f == lit, "ne": lambda: f != lit, "lt": lambda: f < lit,
            "le": lambda: f <= lit, "gt": lambda: f > lit, "ge": lambda: f >= lit,
            "in": lambda: f.isin(self._value_set(None)), "is_null": f.is_null,
            "is_not_null": f.is_valid,
            "starts_with": lambda: pc.starts_with(f, pattern=self.literals[0]),
        }
        return ops[self.op]()

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
        column = table.column(self.field)
        lit = self._scalar()
        ops: dict[str, Callable[[], pa.ChunkedArray | pa.Array]] = {
            "eq": lambda: pc.equal(column, lit), "ne": lambda: pc.not_equal(column, lit),
            "lt": lambda: pc.less(column, lit), "le": lambda: pc.less_equal(column, lit),
            "gt": lambda: pc.greater(column, lit), "ge": lambda: pc.greater_equal(column, lit),
            "in": lambda: pc.is_in(column, value_set=self._value_set(column.type)),
            "is_null": lambda: pc.is_null(column), "is_not_null": lambda: pc.is_valid(column),
            "starts_with": lambda: pc.starts_with(column, pattern=self.literals[0]),
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
        if self.op in _COMPARISONS and self.literals[0] is None:
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


# -- binding to the table schema ------------------------------------------------------------------
#
# `bind` turns the predicate a user (or the CLI, or Spark) wrote into one whose literals are values
# of their columns' types, the way SQL coerces them; partition, file and row-group pruning, the row
# filter and deletes all take the bound form, so they cannot disagree. Columns whose values sit on a
# grid (integers, decimals at their scale, dates, times, timestamps at their precision) rewrite a
# comparison with an off-grid or out-of-range literal into an exact one on the grid: on
# DECIMAL(10,2), x < 0.005 is x <= 0.00; on TINYINT, x > 1000 is x > 127 (false for every value).

_COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = _EPOCH.replace(tzinfo=dt.UTC)
_DAY_NANOS = 86_400 * 10**9
_UNIT_NANOS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


class _Refused(Exception):
    """A literal that does not convert to the column's type (the message says why)."""


@dataclass(frozen=True)
class _Grid:
    """A column whose values are integer multiples of a step: `position` puts a literal on it
    exactly (in steps, ±inf beyond any value), `value` turns a step count into the column's value."""

    lo: int
    hi: int
    position: Callable[[Any], Fraction | float]
    value: Callable[[int], Any]
    prunes: bool = True


def bind(predicate: Predicate | None, schema: Any) -> Predicate | None:
    """`predicate` bound to `schema` (a TableSchema): every column checked, every literal converted
    to its column's type (see above). Raises FilterError naming the column, its type, the literal
    and its type. Binding a bound predicate returns it unchanged."""
    if predicate is None or isinstance(predicate, BoundLeaf):
        return predicate
    if isinstance(predicate, And):
        return And(_bound(predicate.left, schema), _bound(predicate.right, schema))
    if isinstance(predicate, Or):
        return Or(_bound(predicate.left, schema), _bound(predicate.right, schema))
    if isinstance(predicate, Not):
        return Not(_bound(predicate.child, schema))
    if isinstance(predicate, InRows):
        return _bind_rows(predicate, schema)
    if isinstance(predicate, Leaf):
        return _bind_leaf(predicate, schema)
    return predicate  # a predicate of another kind binds itself


def _bound(predicate: Predicate, schema: Any) -> Predicate:
    bound = bind(predicate, schema)
    assert bound is not None
    return bound


def _field(name: str, schema: Any) -> Any:
    for field in schema.fields:
        if field.name == name:
            return field
    raise FilterError(f"filter names no column of the table: {name!r}; columns are {schema.field_names}")


def _bind_rows(predicate: InRows, schema: Any) -> Predicate:
    # nullable: a null key never matches (see InRows), it is no error
    target = pa.schema([(name, _field(name, schema).type.to_arrow()) for name in predicate.rows.column_names])
    if predicate.rows.schema.types == target.types:
        return predicate
    try:
        return InRows(predicate.rows.cast(target))
    except (pa.ArrowException, ValueError) as exc:
        raise FilterError(f"key set columns {predicate.rows.schema} do not convert to the table's "
                          f"{target}: {exc}") from None


def _bind_leaf(leaf: Leaf, schema: Any) -> Predicate:
    field = _field(leaf.field, schema)
    dtype = field.type
    if leaf.op in ("is_null", "is_not_null"):
        return BoundLeaf(field.name, leaf.op, (), dtype.to_arrow())
    try:
        if dtype.is_nested or dtype.root == "ROW":
            raise _Refused(f"{dtype.root} columns only support is_null / is_not_null")
        if leaf.op == "starts_with":
            return _bind_starts_with(leaf, field)
        if leaf.op == "in":
            return _bind_in(leaf, field)
        if leaf.op not in _COMPARISONS:
            raise _Refused(f"unknown operator {leaf.op!r}")
        if leaf.literals[0] is None:
            return BoundLeaf(field.name, leaf.op, (None,), _literal_type(dtype))
        grid = _grid(dtype)
        if grid is None:
            return BoundLeaf(field.name, leaf.op, (_plain_literal(leaf.literals[0], dtype),), _literal_type(dtype))
        op, steps = _on_grid(leaf.op, _position(grid, leaf.literals[0]), grid)
        return BoundLeaf(field.name, op, (grid.value(steps),), dtype.to_arrow(), grid.prunes)
    except _Refused as why:
        literal = leaf.literals[0] if len(leaf.literals) == 1 else list(leaf.literals)
        raise FilterError(f"filter {leaf.op} on column {field.name!r} of type {dtype.to_json()}: literal "
                          f"{literal!r} of type {type(literal).__name__} does not convert ({why})") from None


def _bind_starts_with(leaf: Leaf, field: Any) -> Predicate:
    prefix = leaf.literals[0]
    if not pa.types.is_string(field.type.to_arrow()):
        raise _Refused("starts_with needs a string column")
    if prefix is None:
        return BoundLeaf(field.name, "eq", (None,), pa.string())
    if not isinstance(prefix, str):
        raise _Refused("starts_with needs a str prefix")
    return BoundLeaf(field.name, "starts_with", (prefix,), pa.string())


def _bind_in(leaf: Leaf, field: Any) -> Predicate:
    """IN as SQL has it: a value off the grid or out of range never matches, and a NULL in the
    list makes a non-match unknown (so NOT IN with a NULL selects nothing)."""
    dtype = field.type
    grid = _grid(dtype)
    values = []
    for literal in leaf.literals:
        if literal is None:
            continue
        if grid is None:
            values.append(_plain_literal(literal, dtype))
            continue
        steps = _position(grid, literal)
        if steps == math.floor(steps) and grid.lo <= steps <= grid.hi:
            values.append(grid.value(int(steps)))
    if grid is not None and not values:
        matched: Predicate = BoundLeaf(field.name, "lt", (grid.value(grid.lo),), dtype.to_arrow(), grid.prunes)
    elif pa.types.is_floating(dtype.to_arrow()) and values:
        # one equality each: compared as doubles (a value set would be cast to a FLOAT column's type)
        equalities: list[Predicate] = [BoundLeaf(field.name, "eq", (v,), pa.float64()) for v in values]
        matched = reduce(Or, equalities)
    else:
        matched = BoundLeaf(field.name, "in", tuple(values), _literal_type(dtype), grid is None or grid.prunes)
    if any(literal is None for literal in leaf.literals):
        return Or(matched, BoundLeaf(field.name, "eq", (None,), _literal_type(dtype)))
    return matched


def _on_grid(op: str, position: Fraction | float, grid: _Grid) -> tuple[str, int]:
    """`x op position` as an exact comparison with a value of the grid (x is on it)."""
    if position > grid.hi:  # beyond every value: lt/le/ne hold for all, gt/ge/eq for none
        return ("le", grid.hi) if op in ("lt", "le", "ne") else ("gt", grid.hi)
    if position < grid.lo:
        return ("ge", grid.lo) if op in ("gt", "ge", "ne") else ("lt", grid.lo)
    steps = math.floor(position)
    if steps == position:
        return op, steps
    # between two grid values: x < 2.5 is x <= 2, x > 2.5 is x > 2, x = 2.5 never, x != 2.5 always
    return {"lt": ("le", steps), "le": ("le", steps), "gt": ("gt", steps), "ge": ("gt", steps),
            "eq": ("lt", grid.lo), "ne": ("ge", grid.lo)}[op]


def _position(grid: _Grid, literal: Any) -> Fraction | float:
    if literal is None:
        raise _Refused("NULL is not a value")
    return grid.position(literal)


def _literal_type(dtype: Any) -> pa.DataType:
    arrow_type = dtype.to_arrow()
    return pa.float64() if pa.types.is_floating(arrow_type) else arrow_type


def _plain_literal(literal: Any, dtype: Any) -> Any:
    """The literal for a column without a grid (FLOAT, DOUBLE, BOOLEAN, strings, binaries)."""
    arrow_type = dtype.to_arrow()
    if pa.types.is_floating(arrow_type):
        return _float(literal)
    if pa.types.is_boolean(arrow_type):
        if isinstance(literal, bool | np.bool_):
            return bool(literal)
        raise _Refused("a BOOLEAN column compares with True or False")
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if isinstance(literal, str):
            return literal
        raise _Refused("a string column compares with a str")
    if pa.types.is_binary(arrow_type) or pa.types.is_fixed_size_binary(arrow_type) \
            or pa.types.is_large_binary(arrow_type):
        if isinstance(literal, bytes | bytearray | memoryview):
            return bytes(literal)
        raise _Refused("a binary column compares with bytes")
    raise _Refused("no comparison for this type")


def _float(literal: Any) -> float:
    number = _exact_number(literal)
    try:
        return float(number)
    except OverflowError:
        return math.inf if number > 0 else -math.inf


def _exact_number(literal: Any) -> Fraction | float:
    """An int, float or Decimal as an exact number; a float as the decimal it prints as (0.1 is
    one tenth, as typed), infinities as floats."""
    if isinstance(literal, bool | np.bool_) or not isinstance(literal, numbers.Number | Decimal):
        raise _Refused("a numeric column compares with an int, float or Decimal")
    if isinstance(literal, numbers.Integral):
        return Fraction(int(literal))
    if isinstance(literal, Decimal):
        if literal.is_nan():
            raise _Refused("NaN has no order")
        return float(literal) if literal.is_infinite() else Fraction(literal)
    if not isinstance(literal, numbers.Real):
        raise _Refused("complex numbers have no order")
    number = float(literal)
    if math.isnan(number):
        raise _Refused("NaN has no order")
    return number if math.isinf(number) else Fraction(Decimal(repr(number)))


def _grid(dtype: Any) -> _Grid | None:
    arrow_type = dtype.to_arrow()
    if pa.types.is_integer(arrow_type):
        info = np.iinfo(arrow_type.to_pandas_dtype())
        return _Grid(int(info.min), int(info.max), _exact_number, int)
    if pa.types.is_decimal(arrow_type):
        scale, top = arrow_type.scale, 10**arrow_type.precision - 1
        return _Grid(-top, top, lambda v: _scaled(_exact_number(v), 10**scale),
                     lambda n: Decimal(f"{n}E-{scale}"))
    if pa.types.is_date(arrow_type):
        return _Grid(dt.date.min.toordinal() - _EPOCH.toordinal(), dt.date.max.toordinal() - _EPOCH.toordinal(),
                     lambda v: Fraction(_temporal_nanos(v, date_column=True), _DAY_NANOS),
                     lambda n: dt.date.fromordinal(_EPOCH.toordinal() + n))
    if pa.types.is_timestamp(arrow_type):
        return _timestamp_grid(arrow_type)
    if pa.types.is_time(arrow_type):
        step = _UNIT_NANOS[arrow_type.unit]
        return _Grid(0, _DAY_NANOS // step - 1, lambda v: Fraction(_time_nanos(v), step),
                     lambda n: (dt.datetime.min + dt.timedelta(microseconds=n * step // 1000)).time())
    return None


def _scaled(number: Fraction | float, factor: int) -> Fraction | float:
    return number if isinstance(number, float) else number * factor


def _timestamp_grid(arrow_type: pa.TimestampType) -> _Grid:
    step = _UNIT_NANOS[arrow_type.unit]
    aware = arrow_type.tz is not None

    def position(v: Any) -> Fraction:
        return Fraction(_temporal_nanos(v, date_column=False), step)

    if arrow_type.unit == "ns":  # no Python datetime holds nanoseconds: compare as Arrow scalars
        bounds = np.iinfo(np.int64)
        return _Grid(int(bounds.min), int(bounds.max), position,
                     lambda n: pa.scalar(n, pa.int64()).cast(arrow_type), prunes=False)
    epoch = _EPOCH_UTC if aware else _EPOCH
    lo = _nanos(dt.datetime.min) // step
    hi = _nanos(dt.datetime.max) // step
    return _Grid(lo, hi, position, lambda n: epoch + dt.timedelta(microseconds=n * step // 1000))


def _nanos(moment: dt.datetime) -> int:
    """Nanoseconds since the epoch; a naive datetime is taken as UTC (Strata's session zone)."""
    if moment.tzinfo is not None:
        return (moment - _EPOCH_UTC) // dt.timedelta(microseconds=1) * 1000
    return (moment - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def _temporal_nanos(literal: Any, date_column: bool) -> int:
    """A date, a datetime (naive or aware) or an ISO string as nanoseconds since the epoch."""
    if isinstance(literal, str):
        literal = _parse_iso(literal, date_column)
    if isinstance(literal, dt.datetime):
        return _nanos(literal)
    if isinstance(literal, dt.date):
        return (literal.toordinal() - _EPOCH.toordinal()) * _DAY_NANOS
    raise _Refused("a date or timestamp column compares with a date, a datetime or an ISO string")


def _parse_iso(text: str, date_only: bool) -> dt.date:
    try:
        return dt.date.fromisoformat(text) if date_only else dt.datetime.fromisoformat(text)
    except ValueError:
        form = "YYYY-MM-DD" if date_only else "YYYY-MM-DD[ HH:MM:SS[.ffffff]][+HH:MM]"
        raise _Refused(f"not an ISO {form} string") from None


def _time_nanos(literal: Any) -> int:
    if isinstance(literal, str):
        try:
            literal = dt.time.fromisoformat(literal)
        except ValueError:
            raise _Refused("not an ISO HH:MM:SS[.ffffff] string") from None
    if not isinstance(literal, dt.time) or literal.tzinfo is not None:
        raise _Refused("a TIME column compares with a naive datetime.time or an ISO string")
    micros = ((literal.hour * 60 + literal.minute) * 60 + literal.second) * 10**6 + literal.microsecond
    return micros * 1000
