"""Spark's pushed filters (``pyspark.sql.datasource.Filter``) as Strata predicates.

A filter converts only when Strata evaluates it exactly as Spark does, both on rows and on
min/max statistics; everything else stays with Spark. Not converted:
- columns of FLOAT/DOUBLE (Spark orders NaN above every number and NaN = NaN is true; Arrow
  comparisons with NaN are false), and nested column paths;
- literals the shared binding (strata.expressions.literals.bind) refuses for the column, NULL
  literals, and timestamps whose zone does not match the column's (Spark gives naive datetimes
  for TIMESTAMP_NTZ, aware ones for TIMESTAMP);
- EqualNullSafe, StringEndsWith, StringContains.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from functools import reduce
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from strata.errors import FilterError
from strata.expressions import And, Leaf, Predicate
from strata.expressions import Not as StrataNot
from strata.expressions.literals import bind
from strata.schema.table_schema import TableSchema
from strata.schema.types import NESTED_ROOTS

_COMPARISONS: dict[type, str] = {
    EqualTo: "eq", GreaterThan: "gt", GreaterThanOrEqual: "ge", LessThan: "lt", LessThanOrEqual: "le",
}
# collections have no comparisons in Strata: Spark evaluates filters on them itself
_UNSUPPORTED_ROOTS = {"FLOAT", "DOUBLE", *NESTED_ROOTS}


class _Unconvertible(Exception):
    pass


def to_predicate(spark_filter: Filter, schema: TableSchema) -> Predicate | None:
    """The Strata predicate equivalent to `spark_filter`, or None if there is none."""
    try:
        return bind(_convert(spark_filter, schema), schema)
    except (_Unconvertible, FilterError):
        return None


def conjunction(filters: Sequence[Filter], schema: TableSchema) -> tuple[Predicate | None, list[Filter]]:
    """AND of the convertible filters, and the filters that did not convert."""
    predicates, rest = [], []
    for f in filters:
        p = to_predicate(f, schema)
        if p is None:
            rest.append(f)
        else:
            predicates.append(p)
    combined = reduce(And, predicates) if predicates else None
    return combined, rest


def _convert(f: Filter, schema: TableSchema) -> Predicate:
    if isinstance(f, Not):
        return StrataNot(_convert(f.child, schema))
    name, arrow_type = _column(f, schema)
    if isinstance(f, IsNull):
        return Leaf(name, "is_null")
    if isinstance(f, IsNotNull):
        return Leaf(name, "is_not_null")
    op = _COMPARISONS.get(type(f))
    if op is not None:
        return Leaf(name, op, (_literal(f.value, arrow_type),))  # type: ignore[attr-defined]
    if isinstance(f, In):
        values = tuple(None if v is None else _literal(v, arrow_type) for v in f.value)  # SQL: NULL never matches
        if not values:
            raise _Unconvertible
        return Leaf(name, "in", values)
    if isinstance(f, StringStartsWith):
        if not pa.types.is_string(arrow_type) or not isinstance(f.value, str):
            raise _Unconvertible
        return Leaf(name, "starts_with", (f.value,))
    raise _Unconvertible


def _column(f: Filter, schema: TableSchema) -> tuple[str, pa.DataType]:
    attribute = getattr(f, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        raise _Unconvertible
    wanted = attribute[0]
    names = [n for n in schema.field_names if n == wanted] or \
        [n for n in schema.field_names if n.lower() == str(wanted).lower()]
    if len(names) != 1:
        raise _Unconvertible
    field = schema.field(names[0])
    if field.type.root in _UNSUPPORTED_ROOTS:
        raise _Unconvertible
    return field.name, field.type.to_arrow()


def _literal(value: Any, arrow_type: pa.DataType) -> Any:
    """Spark's value, bound to the column's type later (`bind`); timestamps only when their zone
    matches the column's (a naive value for a zoned column would be read as UTC)."""
    if value is None:
        raise _Unconvertible
    if pa.types.is_timestamp(arrow_type) and isinstance(value, dt.datetime) \
            and (value.tzinfo is None) != (arrow_type.tz is None):
        raise _Unconvertible
    return value
