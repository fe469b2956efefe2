"""Strata for Apache Spark (PySpark >= 4.1, the ``spark`` extra): the ``strata`` data source.

    from strata.spark import register, write_table
    register(spark)                                   # spark.dataSource.register(StrataDataSource)
    df = spark.read.format("strata").load("/warehouse#db.orders")
    df = read_table(spark, "/warehouse#db.orders")    # Spark's own Parquet reader where no merge is needed
    write_table(df, "/warehouse#db.orders")           # distributed by bucket, then written
    q = (stream_df.writeStream.format("strata").option("checkpointLocation", "/ck/orders")
         .start("/warehouse#db.orders"))              # exactly-once, one snapshot per micro-batch
    changes = spark.readStream.format("strata").option("consumer-id", "etl").load("/warehouse#db.orders")
    audit = spark.read.format("strata").option("branch", "audit").load("/warehouse#db.orders")
    fast_forward("/warehouse#db.orders", "audit")      # main takes the branch (write-audit-publish)

See ``strata.spark.source`` (reads, filter pushdown), ``strata.spark.native`` (``read_table``),
``strata.spark.writer`` (writes, exactly-once, distribution) and ``strata.spark.stream``
(streaming reads).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from strata.spark.distribute import BUCKET_COLUMN, distribute_by_bucket, write_table
from strata.spark.foreach_batch import batch_deleter, batch_writer, delete_batch, upsert_batch
from strata.spark.native import read_table
from strata.spark.registration import register_data_source
from strata.spark.source import StrataDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BUCKET_COLUMN", "StrataDataSource", "batch_deleter", "batch_writer", "delete_batch", "distribute_by_bucket",
           "fast_forward", "read_table", "register", "upsert_batch", "write_table"]


def register(spark: SparkSession) -> None:
    """Make ``format("strata")`` available in this session (with ``register_data_source``: its
    streaming queries may start together)."""
    register_data_source(spark, StrataDataSource)


def fast_forward(path: str, branch: str, **options: str) -> int:
    """Make main of the table at `path` what `branch` is (its snapshots, schemas and tags), from
    the driver of a job, e.g. after checking what the job wrote to the branch; returns main's new
    latest snapshot id. `options` name the catalog as for ``load`` (``catalog.*``)."""
    from strata.spark.options import normalize, table_ref

    settings = {k: v for k, v in normalize({**options, "path": path}).items() if k != "branch"}
    return table_ref(settings).load().fast_forward(branch)
