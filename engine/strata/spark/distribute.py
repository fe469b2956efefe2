"""Writing a DataFrame to a table with each (partition, bucket) in one Spark partition:
``distribute_by_bucket`` and ``write_table``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from strata.spark.source import StrataDataSource

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

BUCKET_COLUMN = "_strata_bucket"


def distribute_by_bucket(df: DataFrame, path: str | None = None, num_partitions: int | None = None,
                         **options: str) -> DataFrame:
    """`df` repartitioned so that all rows of one (partition, bucket) of the table land in one
    Spark partition (for batch and streaming DataFrames). Each bucket is then written by one
    task, so sequence numbers within a bucket are unique and a key written twice resolves the
    same way in every reader. The bucket is Strata's (Paimon's) own hash of the bucket key,
    computed by Spark's own expressions for integral and date keys (``bucket_expr``), otherwise
    in ``mapInArrow``; tables without fixed buckets are repartitioned by partition, and an
    unpartitioned table of one bucket is coalesced into one partition (no shuffle)."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    from strata.spark.options import normalize, table_ref

    ref = table_ref(normalize({**options, **({"path": path} if path else {})}))
    table = ref.load()
    partition_cols = _spark_names(df, table.schema.partition_keys)
    buckets = table.core.bucket
    if buckets == 1 and not partition_cols and num_partitions in (None, 1):
        # one task writes the table's one bucket whatever the distribution: merge the input's
        # partitions into it in order, without a shuffle of every row (the stage before the
        # write then runs as that one task too)
        return df.coalesce(1)
    if buckets <= 0:
        if not partition_cols:
            return df
        return df.repartition(num_partitions, *partition_cols) if num_partitions else df.repartition(*partition_cols)
    with_bucket = _jvm_buckets(df, table, buckets)
    if with_bucket is None:
        schema = StructType([*df.schema.fields, StructField(BUCKET_COLUMN, IntegerType(), nullable=False)])
        with_bucket = df.mapInArrow(_BucketAssigner(ref), schema)
    keys = [*partition_cols, BUCKET_COLUMN]
    shuffled = with_bucket.repartition(num_partitions, *keys) if num_partitions else with_bucket.repartition(*keys)
    return shuffled.drop(BUCKET_COLUMN)


def write_table(df: DataFrame, path: str | None = None, mode: str = "append", num_partitions: int | None = None,
                **options: str) -> None:
    """``df.write.format("strata")`` after ``distribute_by_bucket``; `options` are the data
    source's (``overwrite-partition``, ``overwrite-mode``, ``commit-user``, ...)."""
    distributed = distribute_by_bucket(df, path, num_partitions, **options)
    writer = distributed.write.format(StrataDataSource.name()).mode(mode).options(**options)
    writer.save(path) if path else writer.save()


def _jvm_buckets(df: DataFrame, table: Any, buckets: int) -> DataFrame | None:
    """`df` with BUCKET_COLUMN computed in the JVM, or None when a bucket key needs Python."""
    from strata.spark.bucket_expr import bucket_frame

    keys = table.schema.bucket_keys()
    types = [table.schema.field(k).type.to_arrow() for k in keys]
    return bucket_frame(df, _spark_names(df, keys), types, buckets, BUCKET_COLUMN)


def _spark_names(df: DataFrame, names: list[str]) -> list[str]:
    by_lower = {c.lower(): c for c in df.columns}
    out = []
    for name in names:
        found = name if name in df.columns else by_lower.get(name.lower())
        if found is None:
            raise ValueError(f"the DataFrame lacks column {name!r}; it has {df.columns}")
        out.append(found)
    return out


class _BucketAssigner:
    """mapInArrow function: appends each row's bucket (picklable; loads the table per task)."""

    def __init__(self, ref: Any):
        self.ref = ref

    def __call__(self, batches: Any) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        from strata.format.bucket import bucket_ids
        from strata.spark.types import truncate_timestamps

        table = self.ref.load()
        keys = table.schema.bucket_keys()
        types = [table.schema.field(k).type.to_arrow() for k in keys]
        count = table.core.bucket
        spark_names: list[str] | None = None
        for batch in batches:
            if spark_names is None:
                by_lower = {c.lower(): c for c in batch.schema.names}
                spark_names = [k if k in batch.schema.names else by_lower[k.lower()] for k in keys]
            # the hash depends on the exact type: cast the key columns to the table's types
            key_table = truncate_timestamps(pa.Table.from_batches([batch.select(spark_names)]).rename_columns(keys),
                                            table.schema)
            columns = [c if c.type == t else pc.cast(c, t) for c, t in zip(key_table.columns, types, strict=True)]
            ids = bucket_ids(columns, count)
            yield batch.append_column(BUCKET_COLUMN, pa.array(ids, pa.int32()))
