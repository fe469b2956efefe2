"""Fixed buckets computed by Spark's own expressions (``strata.spark.bucket_expr``) equal Strata's
(and so Paimon's) bucket function on every integral, boolean and date key, nulls and extremes
included; ``distribute_by_bucket`` puts each bucket in one Spark partition on that path and on
the ``mapInArrow`` path that string keys take."""

from __future__ import annotations

import datetime
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import strata
from strata.format.bucket import bucket_ids
from strata.spark import distribute_by_bucket
from strata.spark.bucket_expr import bucket_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark
ROWS = 1500


@pytest.fixture(scope="module")
def rows() -> pa.Table:
    rnd = random.Random(7)

    def ints(bits: int, nulls: bool = False) -> list[int | None]:
        edges = [0, -1, 1, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1]
        values = edges + [rnd.randint(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) for _ in range(ROWS - len(edges))]
        return [None if nulls and rnd.random() < 0.1 else v for v in values]

    epoch = datetime.date(1970, 1, 1)
    return pa.table({
        "a": pa.array(ints(64), pa.int64()), "b": pa.array(ints(32, nulls=True), pa.int32()),
        "c": pa.array(ints(16), pa.int16()), "d": pa.array(ints(8), pa.int8()),
        "e": pa.array([rnd.random() < 0.5 for _ in range(ROWS)], pa.bool_()),
        "f": pa.array([epoch + datetime.timedelta(days=rnd.randint(-40000, 40000)) for _ in range(ROWS)],
                      pa.date32()),
        "g": pa.array(ints(64, nulls=True), pa.int64()),
        "s": pa.array([f"k{rnd.randint(0, 10**9)}" for _ in range(ROWS)]),
    })


@pytest.fixture(scope="module")
def frame(session: SparkSession, rows: pa.Table) -> DataFrame:
    return session.createDataFrame(rows).cache()


@pytest.mark.parametrize("keys", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["a", "b"], ["g", "f", "c"],
                                  ["a", "b", "c", "d", "e", "f", "g"]])
def test_jvm_buckets_equal_strata_buckets(rows: pa.Table, frame: DataFrame, keys: list[str]) -> None:
    df = frame
    types = [rows.schema.field(k).type for k in keys]
    counts = (3, 16, 1000)
    for count in counts:  # one Spark job for all the counts
        framed = bucket_frame(df, keys, types, count, f"bucket_{count}")
        assert framed is not None
        df = framed
    got = df.select(*(f"bucket_{count}" for count in counts)).collect()
    for count in counts:
        expected = bucket_ids([rows.column(k) for k in keys], count).tolist()
        assert [r[f"bucket_{count}"] for r in got] == expected, (keys, count)


def test_jvm_buckets_hash_the_table_type(rows: pa.Table, frame: DataFrame) -> None:
    framed = bucket_frame(frame, ["b"], [pa.int64()], 7, "bucket")  # a Spark INT into a BIGINT key
    assert framed is not None
    got = [r["bucket"] for r in framed.select("bucket").collect()]
    assert got == bucket_ids([rows.column("b").cast(pa.int64())], 7).tolist()
    assert bucket_frame(frame, ["s"], [pa.string()], 7, "bucket") is None  # left to mapInArrow


@pytest.mark.parametrize("key", ["a", "s"])
def test_each_bucket_lands_in_one_spark_partition(rows: pa.Table, frame: DataFrame, tmp_path: Path,
                                                   key: str) -> None:
    from pyspark.sql import functions as F

    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    catalog.create_table("db.t", rows.select([key, "b"]).schema, primary_keys=[key], options={"bucket": "5"})
    df = frame.select(key, "b")
    placed = distribute_by_bucket(df, f"{catalog.warehouse}#db.t", 3) \
        .select(key, F.spark_partition_id().alias("part")).collect()
    part_of = {r[key]: r["part"] for r in placed}
    buckets = bucket_ids([rows.column(key)], 5).tolist()
    parts_of_bucket: dict[int, set[int]] = {}
    for value, bucket in zip(rows.column(key).to_pylist(), buckets, strict=True):
        parts_of_bucket.setdefault(bucket, set()).add(part_of[value])
    assert len(placed) == ROWS and len(parts_of_bucket) == 5
    assert all(len(parts) == 1 for parts in parts_of_bucket.values()), parts_of_bucket


def test_one_bucket_is_coalesced_in_input_order_without_a_shuffle(frame: DataFrame, tmp_path: Path) -> None:
    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    catalog.create_table("db.t", pa.schema([pa.field("a", pa.int64(), nullable=False), ("b", pa.int32())]),
                         primary_keys=["a"], options={"bucket": "1"})
    df = frame.select("a", "b").repartition(3)
    placed = distribute_by_bucket(df, f"{catalog.warehouse}#db.t")
    assert placed.rdd.getNumPartitions() == 1
    def shuffles(d: DataFrame) -> int:
        plan = str(d._jdf.queryExecution().optimizedPlan().toString())
        return len(re.findall(r"Repartition \d+, true|RepartitionByExpression", plan))

    assert shuffles(placed) == shuffles(df) == 1  # the input's own repartition(3), nothing more
    assert [r["a"] for r in placed.collect()] == [r["a"] for r in df.collect()]  # the partitions, in order
