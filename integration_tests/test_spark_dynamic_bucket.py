"""Strata's Spark writer on dynamic-bucket tables (bucket = -1, the default of a primary-key
table): ``write_table`` distributes rows by partition, so one task places the keys of a
partition through its hash index; a plain ``df.write`` whose tasks share a partition commits
their index files merged into one per bucket (or is refused, never splitting a key)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import strata
from strata.spark import write_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "tests" / "index"))
from dynamic_helpers import check_placement, hash_index

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("v", pa.string())])


def frame(session: SparkSession, ids: range, tag: str, partitions: int) -> DataFrame:
    from pyspark.sql import functions as F

    return (session.range(ids.start, ids.stop, numPartitions=partitions)
            .select(F.when(F.col("id") % 2 == 0, "a").otherwise("b").alias("dt"), "id",
                    F.concat(F.lit(tag), F.col("id").cast("string")).alias("v")))


def test_spark_writes_dynamic_buckets(session: SparkSession, tmp_path: Path) -> None:
    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                         options={"dynamic-bucket.target-row-num": "100"})
    target = f"{catalog.warehouse}#db.t"  # type: ignore[attr-defined]
    write_table(frame(session, range(0, 500), "x", 4), target)  # bucket-aware: one task per partition
    table = catalog.get_table("db.t")
    placed = check_placement(table)
    assert sorted(len(h) for h in hash_index(table).values()) == [50, 50, 100, 100, 100, 100]
    write_table(frame(session, range(400, 700), "y", 3), target)
    table = catalog.get_table("db.t")
    after = check_placement(table)
    assert all(after[k] == b for k, b in placed.items())
    rows = {(r["dt"], r["id"]): r["v"] for r in table.to_arrow().to_pylist()}
    assert len(rows) == 700 and rows[("a", 450)] == "y450" and rows[("b", 1)] == "x1"
    # a plain write: three tasks share each partition; every key fits bucket 0 of a fresh table
    catalog.create_table("db.plain", SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"])
    frame(session, range(0, 300), "p", 3).write.format("strata").mode("append").save(
        f"{catalog.warehouse}#db.plain")  # type: ignore[attr-defined]
    plain = catalog.get_table("db.plain")
    check_placement(plain)
    assert len(hash_index(plain)) == 2 and plain.to_arrow().num_rows == 300
    # an overwrite places keys afresh: the replaced partitions' index goes with their files
    frame(session, range(1000, 1040), "o", 2).write.format("strata").mode("overwrite").save(
        f"{catalog.warehouse}#db.plain")  # type: ignore[attr-defined]
    plain = catalog.get_table("db.plain")
    check_placement(plain)
    assert sorted(len(h) for h in hash_index(plain).values()) == [20, 20]
    assert plain.to_arrow().num_rows == 40
