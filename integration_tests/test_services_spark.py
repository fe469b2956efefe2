"""Spark local mode through PySpark: JVM jobs and the Python worker path."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd
import pytest

from strata_platform.services.spark import EXPECTED, run_smoke_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def test_session_is_local_and_loopback(session: SparkSession) -> None:
    conf = session.sparkContext.getConf()
    assert session.sparkContext.master == "local[2]"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.ui.enabled") == "false"
    assert session.conf.get("spark.sql.session.timeZone") == "UTC"


def test_smoke_job(session: SparkSession) -> None:
    result = run_smoke_job(session)
    for key, value in EXPECTED.items():
        assert result[key] == value, key
    assert result["python_workers"] >= 1


def test_python_workers_run_this_venv(session: SparkSession) -> None:
    rows = session.sparkContext.parallelize(range(4), 2).map(
        lambda _: (sys.executable, os.getpid())).collect()
    assert {exe for exe, _ in rows} == {sys.executable}


def test_python_data_source_roundtrip(session: SparkSession, tmp_path: Any) -> None:
    """A Python data source (the API Strata's Spark connector uses) read on the Python workers."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Squares(DataSource):
        @classmethod
        def name(cls) -> str:
            return "strata_test_squares"

        def schema(self) -> str:
            return "n long, sq long, part int"

        def reader(self, schema: Any) -> DataSourceReader:
            return SquaresReader(int(self.options.get("rows", "10")))

    class SquaresReader(DataSourceReader):
        def __init__(self, rows: int) -> None:
            self.rows = rows

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(0), InputPartition(1)]

        def read(self, partition: InputPartition) -> Iterator[tuple[int, int, int]]:
            part = partition.value
            for n in range(part, self.rows, 2):
                yield (n, n * n, part)

    session.dataSource.register(Squares)
    df = session.read.format("strata_test_squares").option("rows", "100").load()
    rows = df.groupBy("part").agg({"sq": "sum", "n": "count"}).collect()
    by_part = {r["part"]: (r["count(n)"], r["sum(sq)"]) for r in rows}
    assert by_part == {0: (50, sum(n * n for n in range(0, 100, 2))),
                       1: (50, sum(n * n for n in range(1, 100, 2)))}
    # and a pandas UDF on the same workers, written out and read back as Parquet
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("long")  # type: ignore[call-overload]
    def plus_one(s: pd.Series) -> pd.Series:
        return s + 1

    out = str(tmp_path / "squares")
    df.select(plus_one("n").alias("m")).write.parquet(out)
    assert session.read.parquet(out).agg({"m": "sum"}).first()[0] == sum(range(1, 101))  # type: ignore[index]
