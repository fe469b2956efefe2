"""Random readers of a simulated table, each compared with the model.

A filter is a small tree (every operator of ``strata.expressions``, literals of the column's type
but also off its grid, NULL tests) that is evaluated twice: by Strata (pruning partitions, files,
pages and rows) and here, in plain Python with SQL's three-valued logic, on the model's rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import random
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

import strata
from strata.expressions import Predicate
from strata.testing.simulation.model import Column, Row, TableModel, Version, row_tuple, sorted_rows
from strata.testing.simulation.values import atomic_value, random_value

# a filter: ["leaf", column, op, [literals]] | ["and", f, f] | ["or", f, f] | ["not", f]
Filter = list[Any]
COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")


class Mismatch(AssertionError):
    """A read that disagrees with the model; the message says which read and how."""


def random_filter(rng: random.Random, model: TableModel, depth: int = 0) -> Filter | None:
    columns = [c for c in model.columns if not c.type.is_nested]
    if not columns:
        return None
    roll = rng.random()
    if depth < 2 and roll < 0.25:
        left, right = random_filter(rng, model, depth + 1), random_filter(rng, model, depth + 1)
        return [rng.choice(("and", "or")), left, right] if left and right else left
    if depth < 2 and roll < 0.32:
        child = random_filter(rng, model, depth + 1)
        return ["not", child] if child else None
    return _random_leaf(rng, model, rng.choice(columns))


def _random_leaf(rng: random.Random, model: TableModel, column: Column) -> Filter:
    ops = [*COMPARISONS, "between", "in", "is_null", "is_not_null"]
    if column.type.is_string:
        ops.append("starts_with")
    op = rng.choice(ops)
    if op in ("is_null", "is_not_null"):
        return ["leaf", column.name, op, []]
    if op == "in":
        return ["leaf", column.name, op, [_literal(rng, model, column) for _ in range(rng.randint(1, 4))]]
    if op == "between":
        low, high = sorted((_literal(rng, model, column), _literal(rng, model, column)), key=_order_key)
        return ["leaf", column.name, op, [low, high]]
    if op == "starts_with":
        value = _literal(rng, model, column)
        return ["leaf", column.name, op, [value[: rng.randint(0, len(value))]]]
    return ["leaf", column.name, op, [_literal(rng, model, column, off_grid=rng.random() < 0.2)]]


def _order_key(value: Any) -> Any:
    return value


def _literal(rng: random.Random, model: TableModel, column: Column, off_grid: bool = False) -> Any:
    """A value a row holds (so filters select some rows), a new one, or one between two values
    of the column's grid (which binding must turn into an exact comparison)."""
    present = [r.get(column.field_id) for r in model.rows() if r.get(column.field_id) is not None]
    value = rng.choice(present) if present and rng.random() < 0.7 else \
        atomic_value(rng, column.type.with_nullable(False), rng.randrange(60))
    return _off_grid(value) if off_grid else value


def _off_grid(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value + 0.5
    if isinstance(value, decimal.Decimal):
        return value + decimal.Decimal("0.00001")
    if isinstance(value, dt.datetime):
        return value + dt.timedelta(microseconds=1) if value.microsecond % 1000 == 0 else value
    return value


def to_predicate(f: Filter) -> Predicate:
    kind = f[0]
    if kind == "and":
        return to_predicate(f[1]) & to_predicate(f[2])
    if kind == "or":
        return to_predicate(f[1]) | to_predicate(f[2])
    if kind == "not":
        return ~to_predicate(f[1])
    _, name, op, lits = f
    c = strata.col(name)
    builders = {"eq": lambda: c == lits[0], "ne": lambda: c != lits[0], "lt": lambda: c < lits[0],
                "le": lambda: c <= lits[0], "gt": lambda: c > lits[0], "ge": lambda: c >= lits[0],
                "between": lambda: c.between(lits[0], lits[1]), "in": lambda: c.isin(lits),
                "is_null": c.is_null, "is_not_null": c.is_not_null, "starts_with": lambda: c.startswith(lits[0])}
    return builders[op]()


def evaluate(f: Filter, row: Row, columns: Sequence[Column]) -> bool | None:
    """SQL's answer for one row: True, False or None (unknown, which a filter drops)."""
    kind = f[0]
    if kind in ("and", "or"):
        a, b = evaluate(f[1], row, columns), evaluate(f[2], row, columns)
        if kind == "and":
            return False if a is False or b is False else None if a is None or b is None else True
        return True if a is True or b is True else None if a is None or b is None else False
    if kind == "not":
        inner = evaluate(f[1], row, columns)
        return None if inner is None else not inner
    _, name, op, lits = f
    field_id = next(c.field_id for c in columns if c.name == name)
    return _leaf(row.get(field_id), op, lits)


def _leaf(value: Any, op: str, lits: list[Any]) -> bool | None:
    if op == "is_null":
        return value is None
    if op == "is_not_null":
        return value is not None
    if value is None:
        return None
    compare = {"eq": lambda a: value == a, "ne": lambda a: value != a, "lt": lambda a: value < a,
               "le": lambda a: value <= a, "gt": lambda a: value > a, "ge": lambda a: value >= a}
    if op in compare:
        return bool(compare[op](lits[0]))
    if op == "between":
        return bool(lits[0] <= value <= lits[1])
    if op == "in":
        return value in lits
    return str(value).startswith(lits[0])


def matcher(f: Filter, columns: Sequence[Column]) -> Any:
    return lambda row: evaluate(f, row, columns) is True


# -- comparisons ---------------------------------------------------------------------------------
def expected_rows(rows: Sequence[Row], columns: Sequence[Column], f: Filter | None,
                  projection: Sequence[Column] | None = None) -> list[tuple[Any, ...]]:
    """The model's answer: rows the filter (over `columns`) keeps, projected."""
    ids = [c.field_id for c in projection or columns]
    kept = [r for r in rows if f is None or evaluate(f, r, columns) is True]
    return sorted_rows(row_tuple(r, ids) for r in kept)


def actual_rows(result: pa.Table, names: Sequence[str]) -> list[tuple[Any, ...]]:
    from strata.testing.simulation.model import canonical

    columns = [result.column(n).to_pylist() for n in names]
    return sorted_rows(tuple(canonical(v) for v in values) for values in zip(*columns, strict=True)) \
        if columns else []


def compare(what: str, actual: pa.Table, names: Sequence[str], expected: list[tuple[Any, ...]]) -> None:
    """Raise Mismatch naming the read, the counts and a few differing rows."""
    if list(actual.column_names) != list(names):
        raise Mismatch(f"{what}: columns {actual.column_names}, the model has {list(names)}")
    got = actual_rows(actual, names)
    if got == expected:
        return
    missing = _minus(expected, got)
    extra = _minus(got, expected)
    raise Mismatch(f"{what}: {len(got)} rows, the model has {len(expected)}; missing {missing[:3]}, "
                   f"unexpected {extra[:3]}")


def _minus(a: list[tuple[Any, ...]], b: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    from collections import Counter

    left = Counter(map(repr, a)) - Counter(map(repr, b))
    return [r for r in a if left[repr(r)] > 0]


def check_latest(table: Any, model: TableModel, rng: random.Random) -> str:
    """One read of the latest snapshot with a random filter and projection."""
    f = random_filter(rng, model) if rng.random() < 0.8 else None
    columns = list(model.columns)
    if rng.random() < 0.5:
        columns = rng.sample(columns, rng.randint(1, len(columns)))
    names = [c.name for c in columns]
    predicate = to_predicate(f) if f else None
    actual = table.to_arrow(columns=names, filter=predicate)
    compare(f"read of {names} with filter {f}", actual, names,
            expected_rows(model.rows(), model.columns, f, columns))
    return "filtered" if f else "plain"


def check_version(table: Any, what: str, version: Version, **travel: Any) -> None:
    """A time-travel read (snapshot_id= or tag=) against what the model recorded then."""
    assert version.rows is not None
    names = [c.name for c in version.columns]
    actual = table.to_arrow(**travel)
    compare(what, actual, names, expected_rows(version.rows, version.columns, None))


def random_rows(rng: random.Random, model: TableModel, count: int) -> list[Row]:
    return [{c.field_id: random_value(rng, c.type) for c in model.columns} for _ in range(count)]
