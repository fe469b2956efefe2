"""Strata tables read by Spark's own Parquet reader: ``read_table(spark, path, **options)``.

``format("strata")`` (a Python data source) hands Spark Arrow batches of every column from a
Python worker: Spark 4.3 gives Python sources no column pruning, so each query decodes and ships
whole tables. Where the snapshot's files need no merging (append tables, and primary-key tables with
deletion vectors, whose files above level 0 hold each key once), Strata plans the scan (snapshot,
buckets, files, vectors) and Spark reads the files itself: vectorized, only the columns and row
groups the query needs, its filters pushed into the reader. A file's deletion vector becomes a
broadcast anti join on (file name, row index) (Spark's ``_metadata`` columns); a primary-key
file's retractions are dropped by ``_VALUE_KIND``, as Strata's reader drops them.

Anything else reads through ``format("strata")``, with the same rows: a bucket whose sorted runs
must merge, files written under an older schema, column types whose Parquet form Spark maps
differently (timestamps, nested types), the incremental and row-kind options, or a store Spark
cannot open (``s3://`` needs Hadoop's ``s3a`` file system on Spark's classpath: ``hadoop-aws`` and
the AWS SDK, ``strata_platform.services.spark.s3a_jars``). ``native_plan`` tells which and why.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from strata.deletionvectors import deleted_positions
from strata.fs.s3 import S3FileIO
from strata.schema.table_schema import VALUE_KIND
from strata.spark.options import get_int, normalize, table_ref

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from strata.schema.table_schema import TableSchema
    from strata.table.table import Table

log = logging.getLogger(__name__)

# Types whose Parquet form Spark reads back as Strata's Spark type (to_spark_type)
NATIVE_TYPES = frozenset({"BOOLEAN", "TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL",
                          "DATE", "CHAR", "VARCHAR", "BINARY", "VARBINARY"})
# Read options format("strata") serves that a plain file scan cannot
_PYTHON_ONLY = ("incremental-between", "include-row-kind")
_FILE = "_strata_file"
_POSITION = "_strata_position"
_LIVE_KINDS = (0, 2)  # +I, +U


@dataclass
class NativePlan:
    """The files Spark reads for one snapshot, and the deleted positions of each (by file name)."""

    paths: list[str]
    deleted: dict[str, np.ndarray] = field(default_factory=dict)
    primary_key: bool = False


def read_table(spark: SparkSession, path: str | None = None, **options: str) -> DataFrame:
    """The table at `path` (``"<warehouse>#<db>.<table>"``; options as ``format("strata")``'s) as a
    DataFrame that Spark's Parquet reader scans, or ``format("strata")``'s where it cannot."""
    settings = normalize({**options, **({"path": path} if path else {})})
    table = table_ref(settings).load()
    plan = native_plan(table, settings)
    if isinstance(plan, str):
        log.info("table %s is read through format('strata'): %s", table.identifier, plan)
        return _python_read(spark, path, options)
    try:
        return _parquet_read(spark, table, plan)
    except Exception as exc:  # py4j wraps the JVM's errors: a missing file system is one
        if "ClassNotFoundException" not in str(exc) and "No FileSystem for scheme" not in str(exc):
            raise
        log.warning("table %s is read through format('strata'): Spark cannot open %s (%s). Put hadoop-aws "
                    "and the AWS SDK on its classpath (strata_platform.services.spark.s3a_jars) for "
                    "Spark's own Parquet reader", table.identifier, plan.paths[0], str(exc).splitlines()[0])
        return _python_read(spark, path, options)


def native_plan(table: Table, settings: Mapping[str, str]) -> NativePlan | str:
    """What Spark reads of the snapshot the options name, or why it cannot read it itself."""
    python_only = [k for k in _PYTHON_ONLY if k in settings]
    if python_only:
        return f"option {python_only[0]!r}"
    unsupported = [f"{f.name} {f.type.root}" for f in table.schema.fields if f.type.root not in NATIVE_TYPES]
    if unsupported:
        return f"column {unsupported[0]}: Spark's Parquet reader maps its type differently"
    if spark_path(table.path) is None:
        return f"Spark has no file system for {table.path}"
    scan = table.new_scan(snapshot_id=get_int(settings, "snapshot-id"),
                          timestamp_millis=get_int(settings, "timestamp-millis"), tag=settings.get("tag"))
    plan = NativePlan([], primary_key=bool(table.schema.primary_keys))
    fields = _fields(table.schema)
    for split in scan.plan().splits:
        if plan.primary_key and split.deletion_files is None:
            return f"bucket {split.bucket} of partition {split.partition_values} merges sorted runs"
        for f in split.files:
            if f.schema_id != table.schema.id and _fields(table.schema_at(f.schema_id)) != fields:
                return f"file {f.file_name} has schema {f.schema_id}, the table {table.schema.id}"
            path = spark_path(split.file_path(f))
            if path is None:
                return f"Spark has no file system for {split.file_path(f)}"
            plan.paths.append(path)
        for name, vector in (split.deletion_files or {}).items():
            plan.deleted[name] = deleted_positions(table.file_io, vector)
    return plan


def hadoop_options(table: Table) -> dict[str, str]:
    """The Hadoop settings (``fs.s3a.*``) that reach the table's store as Strata reaches it."""
    if not isinstance(table.file_io, S3FileIO):
        return {}
    c = table.file_io.config
    out = {"fs.s3a.path.style.access": str(c.path_style).lower(), "fs.s3a.endpoint.region": c.region}
    if c.endpoint:
        out["fs.s3a.endpoint"] = c.endpoint
        out["fs.s3a.connection.ssl.enabled"] = str(c.endpoint.startswith("https://")).lower()
    if c.access_key and c.secret_key:
        out |= {"fs.s3a.access.key": c.access_key, "fs.s3a.secret.key": c.secret_key}
        if c.session_token:
            out |= {"fs.s3a.session.token": c.session_token, "fs.s3a.aws.credentials.provider":
                    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"}
    return out


def _parquet_read(spark: SparkSession, table: Table, plan: NativePlan) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import ByteType, StructField, StructType

    from strata.spark.types import spark_schema

    schema = spark_schema(table.schema)
    if not plan.paths:
        return spark.createDataFrame([], schema)
    columns = [F.col(f"`{name}`") for name in schema.fieldNames()]
    read_schema = StructType([*schema.fields, *([StructField(VALUE_KIND, ByteType())] if plan.primary_key else [])])
    frame = spark.read.schema(read_schema).options(**hadoop_options(table)).parquet(*plan.paths)
    if plan.primary_key:
        frame = frame.where(F.col(VALUE_KIND).isin(*_LIVE_KINDS))
    if plan.deleted:
        located = frame.select(*columns, F.col("_metadata.file_name").alias(_FILE),
                               F.col("_metadata.row_index").alias(_POSITION))
        frame = located.join(F.broadcast(_deleted_frame(spark, plan.deleted)), [_FILE, _POSITION], "left_anti")
    return frame.select(*columns)


def _deleted_frame(spark: SparkSession, deleted: dict[str, np.ndarray]) -> DataFrame:
    names = list(deleted)
    counts = [len(deleted[n]) for n in names]
    rows = pa.table({_FILE: pa.array(np.repeat(np.array(names, dtype=object), counts), pa.string()),
                     _POSITION: pa.array(np.concatenate([deleted[n] for n in names]).astype(np.int64))})
    return spark.createDataFrame(rows)


def _python_read(spark: SparkSession, path: str | None, options: Mapping[str, str]) -> DataFrame:
    reader = spark.read.format("strata").options(**options)
    return reader.load(path) if path else reader.load()


def spark_path(path: str) -> str | None:
    """How Spark's file sources name a Strata path: ``s3a://`` for S3, ``file://`` for local
    paths; None where Spark has no file system for it."""
    if path.startswith(("s3://", "s3a://")):
        return "s3a://" + path.split("://", 1)[1]
    if path.startswith("file:"):
        return path
    if path.startswith("/"):
        return "file://" + path
    return None


def _fields(schema: TableSchema) -> list[tuple[int, str, str]]:
    return [(f.id, f.name, str(f.type)) for f in schema.fields]
