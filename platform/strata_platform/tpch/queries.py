"""The 22 TPC-H queries (``queries/qNN.sql``, validation parameters), rendered per engine, and the
comparison of their results across engines.

The files name tables as ``{lineitem}``; Trino gets ``<catalog>.<schema>.lineitem``, Spark the
temporary view ``lineitem``. The text is one dialect both engines parse (``substring(s, 1, 2)``,
``interval '3' month``, Q15's view as a WITH clause), so no per-engine rewriting is needed.

Results are equal when the rows are equal in the order the query's ORDER BY fixes: rows whose
sort keys tie may come in any order, so the rows are compared as sorted lists and the sort-key
columns in the order the engine returned them. Numbers are equal to the cent (Trino rounds a
decimal average to the column's scale, Spark keeps six digits).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from strata_platform.tpch.tables import TABLES

QUERY_IDS = tuple(range(1, 23))
# per query: the result columns its ORDER BY names, in order (empty: one row or unordered)
ORDER_KEYS: dict[int, tuple[int, ...]] = {
    1: (0, 1), 2: (0, 2, 1, 3), 3: (1, 2), 4: (0,), 5: (1,), 6: (), 7: (0, 1, 2), 8: (0,), 9: (0, 1),
    10: (2,), 11: (1,), 12: (0,), 13: (1, 0), 14: (), 15: (0,), 16: (3, 0, 1, 2), 17: (), 18: (4, 3),
    19: (), 20: (0,), 21: (1, 0), 22: (0,)}
CENT = Decimal("0.01")


@cache
def query_text(number: int) -> str:
    return resources.files("strata_platform.tpch").joinpath(f"queries/q{number:02d}.sql").read_text()


def render(number: int, scale_factor: float, table_prefix: str = "") -> str:
    """Query `number` with its tables named `<table_prefix><name>` (Q11's fraction is 0.0001 / SF)."""
    names = {name: f"{table_prefix}{name}" for name in TABLES}
    lines = [line for line in query_text(number).splitlines() if not line.startswith("--")]
    return "\n".join(lines).format(**names, fraction=f"{0.0001 / scale_factor:.10f}")


def tables_of(sql: str) -> tuple[str, ...]:
    """The TPC-H tables a rendered query names (as whole words), in TABLES' order."""
    return tuple(name for name in TABLES if re.search(rf"\b{name}\b", sql))


def normalize_value(value: Any) -> Any:
    """A cell as a comparable value: numbers as Decimal rounded to the cent, dates as dates."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, dt.date)):
        return value
    if isinstance(value, (int, float, Decimal)):
        return Decimal(str(value)).quantize(CENT)
    return value


def normalize(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    return [tuple(normalize_value(v) for v in row) for row in rows]


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, Decimal) and isinstance(b, Decimal):
        return abs(a - b) <= CENT  # two roundings of one value differ by a cent at most
    return bool(a == b)


def _rows_close(left: Sequence[tuple[Any, ...]], right: Sequence[tuple[Any, ...]]) -> bool:
    return len(left) == len(right) and all(
        len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
        for a, b in zip(left, right, strict=True))


def _sort_key(row: tuple[Any, ...]) -> tuple[tuple[int, str], ...]:
    return tuple((v is None, str(v)) for v in row)


def difference(number: int, left: Sequence[Sequence[Any]], right: Sequence[Sequence[Any]]) -> str | None:
    """None when two engines' results of query `number` are equal, else what differs."""
    a, b = normalize(left), normalize(right)
    if len(a) != len(b):
        return f"Q{number}: {len(a)} rows vs {len(b)} rows"
    keys = ORDER_KEYS[number]
    ordered_a = [tuple(row[k] for k in keys) for row in a]
    ordered_b = [tuple(row[k] for k in keys) for row in b]
    if not _rows_close(ordered_a, ordered_b):
        first = next(i for i, (x, y) in enumerate(zip(ordered_a, ordered_b, strict=True))
                     if not _rows_close([x], [y]))
        return f"Q{number}: order differs at row {first}: {a[first]} vs {b[first]}"
    if not _rows_close(sorted(a, key=_sort_key), sorted(b, key=_sort_key)):
        diff = next((x, y) for x, y in zip(sorted(a, key=_sort_key), sorted(b, key=_sort_key), strict=True)
                    if not _rows_close([x], [y]))
        return f"Q{number}: rows differ: {diff[0]} vs {diff[1]}"
    return None
