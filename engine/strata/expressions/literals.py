"""Binding an expression to a table schema: every column checked, every literal converted to its
column's type, the way SQL coerces them (pyiceberg's literals and binding)."""

from __future__ import annotations

import datetime as dt
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa

from strata.errors import FilterError
from strata.expressions import COMPARISONS, And, BoundLeaf, InRows, Leaf, Not, Or, Predicate

# -- binding to the table schema ------------------------------------------------------------------
#
# `bind` turns the predicate a user (or the CLI, or Spark) wrote into one whose literals are values
# of their columns' types, the way SQL coerces them; partition, file and row-group pruning, the row
# filter and deletes all take the bound form, so they cannot disagree. Columns whose values sit on a
# grid (integers, decimals at their scale, dates, times, timestamps at their precision) rewrite a
# comparison with an off-grid or out-of-range literal into an exact one on the grid: on
# DECIMAL(10,2), x < 0.005 is x <= 0.00; on TINYINT, x > 1000 is x > 127 (false for every value).

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
        if leaf.op not in COMPARISONS:
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
