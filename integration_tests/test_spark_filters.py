"""Spark's pushed filters as Strata predicates (no Spark session: the filters are plain objects).

A filter converts only when Strata evaluates it exactly as Spark would; these tests pin which
ones convert, and that converted ones select the same rows as Spark's semantics on a table with
nulls.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringStartsWith,
)

from strata.schema.table_schema import schema_from_arrow
from strata.spark.filters import conjunction, to_predicate

pytestmark = pytest.mark.spark

UTC = dt.UTC
SCHEMA = pa.schema([
    ("id", pa.int32()), ("name", pa.string()), ("price", pa.float64()), ("amount", pa.decimal128(10, 2)),
    ("ts", pa.timestamp("ms")), ("lts", pa.timestamp("us", tz="UTC")), ("day", pa.date32()),
    ("flag", pa.bool_()), ("raw", pa.binary()),
])
TABLE_SCHEMA = schema_from_arrow(SCHEMA)
ROWS = pa.table({
    "id": [1, 2, 3, None],
    "name": ["apple", "banana", None, "apricot"],
    "price": [1.0, float("nan"), 3.0, None],
    "amount": [Decimal("1.50"), Decimal("100.00"), None, Decimal("7.25")],
    "ts": [dt.datetime(2024, 1, 1, 10), dt.datetime(2024, 1, 2), None, dt.datetime(2024, 1, 1, 10, 0, 0, 5000)],
    "lts": [dt.datetime(2024, 3, 1, 12, tzinfo=UTC), None, dt.datetime(2024, 3, 2, tzinfo=UTC),
            dt.datetime(2024, 3, 1, 12, tzinfo=UTC)],
    "day": [dt.date(2024, 1, 5), dt.date(2024, 1, 6), None, dt.date(2024, 1, 5)],
    "flag": [True, False, None, True],
    "raw": [b"\x01", b"\x02", None, b"\x01"],
}, schema=SCHEMA)


def selected(f: Any) -> list[int]:
    """Row positions a converted filter keeps (Strata's Arrow evaluation)."""
    predicate = to_predicate(f, TABLE_SCHEMA)
    assert predicate is not None, f
    kept = ROWS.append_column("_pos", pa.array(range(ROWS.num_rows))).filter(predicate.to_arrow())
    return kept.column("_pos").to_pylist()


@pytest.mark.parametrize(("spark_filter", "rows"), [
    (EqualTo(("id",), 2), [1]),
    (GreaterThan(("id",), 1), [1, 2]),
    (GreaterThanOrEqual(("amount",), Decimal("7.25")), [1, 3]),
    (LessThan(("lts",), dt.datetime(2024, 3, 1, 12, 0, 0, 1, tzinfo=UTC)), [0, 3]),
    (LessThanOrEqual(("day",), dt.date(2024, 1, 5)), [0, 3]),
    (EqualTo(("ts",), dt.datetime(2024, 1, 1, 10)), [0]),
    (In(("name",), ["apple", "banana", "kiwi"]), [0, 1]),
    (IsNull(("name",)), [2]),
    (IsNotNull(("id",)), [0, 1, 2]),
    (Not(EqualTo(("id",), 2)), [0, 2]),  # NOT(NULL = 2) is NULL: the null row is dropped, as in Spark
    (StringStartsWith(("name",), "ap"), [0, 3]),
    (EqualTo(("flag",), True), [0, 3]),
    (EqualTo(("raw",), b"\x01"), [0, 3]),
    (EqualTo(("ID",), 1), [0]),  # Spark resolves names case-insensitively
    # literals off the column's grid or range are bound exactly (strata.expressions.literals.bind)
    (EqualTo(("id",), 1.5), []),
    (LessThan(("id",), 2.5), [0, 1]),
    (GreaterThan(("id",), 2**40), []),
    (Not(EqualTo(("id",), 2**40)), [0, 1, 2]),
    (EqualTo(("ts",), dt.datetime(2024, 1, 1, 10, 0, 0, 5)), []),  # microseconds in a TIMESTAMP(3) column
    (LessThan(("amount",), Decimal("1.505")), [0]),
    (In(("id",), [1, None]), [0]),
    (Not(In(("id",), [1, None])), []),  # NOT IN with a NULL is never true
])
def test_converted_filters_keep_the_rows_spark_keeps(spark_filter: Any, rows: list[int]) -> None:
    assert selected(spark_filter) == rows


@pytest.mark.parametrize("spark_filter", [
    EqualTo(("price",), 1.0),  # floating point: NaN orders differently in Spark
    IsNull(("price",)),
    EqualTo(("id",), True),  # the shared binding refuses it (FilterError)
    EqualTo(("name",), 1),
    EqualTo(("lts",), dt.datetime(2024, 3, 1, 12)),  # naive literal for a zoned column
    EqualNullSafe(("id",), 1),
    StringContains(("name",), "pp"),
    EqualTo(("nope",), 1),
    EqualTo(("name", "inner"), "x"),  # nested path
    Not(EqualTo(("price",), 1.0)),
])
def test_filters_that_stay_with_spark(spark_filter: Any) -> None:
    assert to_predicate(spark_filter, TABLE_SCHEMA) is None


def test_conjunction_keeps_the_rest() -> None:
    keep, other = EqualTo(("id",), 1), StringContains(("name",), "a")
    predicate, rest = conjunction([keep, other], TABLE_SCHEMA)
    assert predicate is not None and predicate.fields() == {"id"}
    assert rest == [other]
    assert conjunction([], TABLE_SCHEMA) == (None, [])


def test_spark_pushes_date_and_decimal_literals_through_the_binding(session, catalog) -> None:
    """A real Spark read of a table partitioned by a DATE and a DECIMAL(10,2): both pushed filters
    prune partitions, amount < 0.005 as amount <= 0.00, so one split of three is planned."""
    from pyspark.sql import functions as F

    schema = pa.schema([("id", pa.int64()), ("amount", pa.decimal128(10, 2)), ("day", pa.date32())])
    table = catalog.create_table("db.sales", schema, partition_keys=["day", "amount"], options={"bucket": "-1"})
    amounts = [Decimal(a) for a in ("0.00", "0.00", "1.00", "2.50")]
    for day in (1, 2):
        table.write(pa.table({"id": range(day * 10, day * 10 + 4), "amount": amounts,
                              "day": [dt.date(2024, 1, day)] * 4}, schema=schema))
    session.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = session.read.format("strata").options(**{"filter-pushdown": "true", "source.split.target-size": "1b"}) \
            .load(f"{catalog.warehouse}#db.sales")
        on_day = df.filter(F.col("day") == F.lit(dt.date(2024, 1, 2)))
        assert on_day.rdd.getNumPartitions() == 3
        picked = on_day.filter(F.col("amount") < F.lit(Decimal("0.005")))
        assert sorted(r["id"] for r in picked.collect()) == [20, 21]
        assert picked.rdd.getNumPartitions() == 1
    finally:
        session.conf.set("spark.sql.python.filterPushdown.enabled", "false")
