"""Predicate.mask (compute kernels, no query plan) selects exactly the rows the Arrow expression
of the predicate selects, nulls included: readers use either."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from strata import col
from strata.expressions import Predicate

TABLE = pa.table({
    "i": pa.array([1, 2, None, 4, 5, -3], pa.int32()),
    "l": pa.array([10, None, 30, 40, 50, 60], pa.int64()),
    "f": pa.array([1.5, float("nan"), None, -0.0, 2.5, 3.0], pa.float64()),
    "s": pa.array(["a", "ab", None, "b", "", "abc"]),
    "d": pa.array([dt.date(2024, 1, d) for d in (1, 2, 3)] + [None, dt.date(2024, 2, 1), dt.date(2023, 12, 31)]),
    "t": pa.array([dt.datetime(2024, 1, 1, h) for h in range(5)] + [None], pa.timestamp("us")),
    "m": pa.array([Decimal("1.10"), Decimal("2.00"), None, Decimal("-1.00"), Decimal("0.00"), Decimal("9.99")],
                  pa.decimal128(5, 2)),
    "b": pa.array([True, False, None, True, False, True]),
})

PREDICATES: list[Predicate] = [
    col("i") == 2, col("i") != 2, col("i") < 4, col("i") <= 4, col("i") > 1, col("i") >= 5,
    col("i").between(0, 4), col("i").isin([1, 5, None]), col("i").is_null(), col("i").is_not_null(),
    col("l") > 25, col("l").isin([10, 60]), col("f") > 1.0, col("f") == 0.0, col("f").isin([1.5, 3.0]),
    col("i") > 1.5, col("s") == "a", col("s") >= "ab", col("s").startswith("ab"), col("s").isin(["", "b"]),
    col("d") >= dt.date(2024, 1, 2), col("d").isin([dt.date(2024, 1, 1)]),
    col("t") < dt.datetime(2024, 1, 1, 3), col("t").between(dt.datetime(2024, 1, 1, 1), dt.datetime(2024, 1, 1, 2)),
    col("m") > Decimal("1.00"), col("b") == True,  # noqa: E712
    (col("i") > 1) & (col("s") != "b"), (col("i") < 2) | col("s").is_null(), ~(col("l") > 30),
    ~((col("i") == 1) | (col("i") == 4)) & col("f").is_not_null(),
]


@pytest.mark.parametrize("predicate", PREDICATES, ids=[str(i) for i in range(len(PREDICATES))])
def test_mask_selects_what_the_expression_selects(predicate: Predicate) -> None:
    table = TABLE.append_column("row", pa.array(range(TABLE.num_rows)))  # rows compared by index (NaN != NaN)
    expected = table.filter(predicate.to_arrow()).column("row").to_pylist()
    assert table.filter(predicate.mask(table)).column("row").to_pylist() == expected
    chunked = pa.concat_tables([table.slice(0, 2), table.slice(2)])
    assert chunked.filter(predicate.mask(chunked)).column("row").to_pylist() == expected
