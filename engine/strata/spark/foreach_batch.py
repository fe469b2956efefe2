"""Idempotent writes from ``foreachBatch``: arbitrary per-batch logic, exactly-once commits.

    from strata.spark.foreach_batch import batch_writer
    upsert = batch_writer("/warehouse#db.orders", checkpoint_location=ck, delete_when="op = 'D'",
                          extra_columns=["op"])
    stream.writeStream.foreachBatch(lambda df, bid: upsert(transform(df), bid)) \\
        .option("checkpointLocation", ck).start()

Spark's ``foreachBatch`` is at-least-once: after a crash the batch whose ``commits/<id>`` marker
is missing runs again with the same id and the same input. The helper commits each batch with the
commit identity of the streaming sink (``strata.spark.writer``): commit user = a hash of the
query's checkpoint location (``commit_user_for_checkpoint``) or the given ``commit_user``, commit
identifier = the batch id. A batch id the table already holds for that user is skipped before
any task runs; a concurrent duplicate is still dropped by the commit itself.

MERGE-like use: pass the transformed DataFrame (deduplicated, joined, ...). On a primary-key
table rows upsert by key; deletes come from a row-kind column (``row_kind_column``, values
+I/-U/+U/-D) or from a condition (``delete_when``: matching rows become -D). Columns that only
drive the row kind are named in ``extra_columns`` and dropped before writing.

Deletes: ``delete_batch`` / ``batch_deleter`` delete the table's rows whose key columns (``on``)
equal a row of the batch, with the same exactly-once identity; on append tables with deletion
vectors the rows are marked in place (``Table.delete_where``), nothing is rewritten.

    deleter = batch_deleter("/warehouse#db.events", on=["id"], checkpoint_location=ck)
    deletes.writeStream.foreachBatch(deleter).option("checkpointLocation", ck).start()

One helper call writes one table per batch: two writes of one table in the same batch would
share a commit identifier, and the second would be skipped as a replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from strata.errors import OptionError
from strata.spark.options import commit_user_for_checkpoint, normalize, table_ref
from strata.spark.types import ROW_KIND_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from strata.table.table import Table

BatchFunction = Callable[["DataFrame", int], None]


def batch_commit_user(commit_user: str | None, checkpoint_location: str | None) -> str:
    """The commit user the streaming sink would use for this query."""
    if commit_user:
        return commit_user
    if checkpoint_location:
        return commit_user_for_checkpoint(checkpoint_location)
    raise OptionError("an idempotent foreachBatch write needs the query's checkpoint_location or a commit_user "
                      "(a stable name that survives restarts)")


def upsert_batch(batch_df: DataFrame, batch_id: int, path: str, *, commit_user: str | None = None,
                 checkpoint_location: str | None = None, row_kind_column: str | None = None,
                 delete_when: str | Column | None = None, extra_columns: Sequence[str] = (),
                 num_partitions: int | None = None, **options: str) -> bool:
    """Write one micro-batch to the table at `path` exactly once; False when the table already
    holds this batch id for the commit user (a replay) and nothing was written. `options` are
    the data source's write options (``write-only``, ``catalog.*``, ...)."""
    from strata.spark.distribute import write_table

    user = batch_commit_user(commit_user, checkpoint_location)
    table = table_ref(normalize({**options, "path": path})).load()
    if already_committed(table, user, batch_id):
        return False
    rows = with_row_kinds(batch_df, row_kind_column, delete_when, extra_columns)
    if ROW_KIND_COLUMN in rows.columns and not table.schema.primary_keys:
        raise OptionError(f"row kinds (deletes) need a primary-key table; {table.identifier} has no primary key")
    write_table(rows, path, mode="append", num_partitions=num_partitions,
                **{**options, "commit-user": user, "commit-identifier": str(batch_id)})
    return True


def delete_batch(batch_df: DataFrame, batch_id: int, path: str, *, on: Sequence[str],
                 commit_user: str | None = None, checkpoint_location: str | None = None, **options: str) -> bool:
    """Delete, exactly once, the table's rows whose columns `on` equal those of a row of the
    micro-batch (a stream of ids to delete, say). Append tables need deletion vectors: the rows
    are marked in place, no file is rewritten; primary-key tables get -D records. The batch's
    distinct keys are collected on the driver (one micro-batch's worth). False when the table
    already holds this batch id for the commit user (a replay) and nothing was deleted."""
    from strata.expressions import in_rows

    user = batch_commit_user(commit_user, checkpoint_location)
    table = table_ref(normalize({**options, "path": path})).load()
    missing = [c for c in on if c not in batch_df.columns]
    unknown = [c for c in on if c not in table.schema.field_names]
    if not on or missing or unknown:
        raise OptionError(f"delete_batch needs key columns `on` that the batch and {table.identifier} both have; "
                          f"missing in the batch: {missing}, unknown to the table: {unknown}")
    if already_committed(table, user, batch_id):
        return False
    keys = batch_df.select(*on).distinct().toArrow()
    target = pa.schema([table.schema.field(c).to_arrow().with_nullable(True) for c in on])
    table.delete_where(in_rows(keys.cast(target)), commit_user=user, identifier=batch_id)
    return True


def already_committed(table: Table, commit_user: str, batch_id: int) -> bool:
    """True if `batch_id` is the last batch `commit_user` committed (a replay to skip); an
    older batch id means the query's checkpoint was lost or replaced, which is refused."""
    last = table.new_commit(commit_user).last_committed_identifier()
    if last is not None and batch_id < last:
        raise OptionError(f"batch {batch_id} of commit user {commit_user} is older than batch {last}, which is "
                          f"already committed to {table.identifier}: the checkpoint was deleted or replaced. Use a "
                          "new checkpoint location (or commit_user), or restore the checkpoint.")
    return last == batch_id


def batch_deleter(path: str, *, on: Sequence[str], commit_user: str | None = None,
                  checkpoint_location: str | None = None, **options: str) -> BatchFunction:
    """A function for ``writeStream.foreachBatch`` that calls ``delete_batch`` with these settings."""
    user = batch_commit_user(commit_user, checkpoint_location)  # fail now, not in the first batch

    def delete(batch_df: DataFrame, batch_id: int) -> None:
        delete_batch(batch_df, batch_id, path, on=on, commit_user=user, **options)

    return delete


def batch_writer(path: str, *, commit_user: str | None = None, checkpoint_location: str | None = None,
                 row_kind_column: str | None = None, delete_when: str | Column | None = None,
                 extra_columns: Sequence[str] = (), num_partitions: int | None = None,
                 **options: str) -> BatchFunction:
    """A function for ``writeStream.foreachBatch`` that calls ``upsert_batch`` with these settings."""
    user = batch_commit_user(commit_user, checkpoint_location)  # fail now, not in the first batch

    def write(batch_df: DataFrame, batch_id: int) -> None:
        upsert_batch(batch_df, batch_id, path, commit_user=user, row_kind_column=row_kind_column,
                            delete_when=delete_when, extra_columns=extra_columns, num_partitions=num_partitions,
                            **options)

    return write


def with_row_kinds(df: DataFrame, row_kind_column: str | None, delete_when: str | Column | None,
                   extra_columns: Sequence[str] = ()) -> DataFrame:
    """`df` with the writer's `_ROW_KIND` column (from a column or a delete condition), without
    `extra_columns`."""
    from pyspark.sql import functions as F

    if row_kind_column is not None and delete_when is not None:
        raise OptionError("give either row_kind_column or delete_when, not both")
    if row_kind_column is not None:
        if row_kind_column not in df.columns:
            raise OptionError(f"row_kind_column {row_kind_column!r} is not a column of the batch; it has {df.columns}")
        df = df.withColumnRenamed(row_kind_column, ROW_KIND_COLUMN)
    elif delete_when is not None:
        condition = F.expr(delete_when) if isinstance(delete_when, str) else delete_when
        df = df.withColumn(ROW_KIND_COLUMN, F.when(condition, F.lit("-D")).otherwise(F.lit("+I")))
    missing = [c for c in extra_columns if c not in df.columns]
    if missing:
        raise OptionError(f"extra_columns {missing} are not columns of the batch; it has {df.columns}")
    return df.drop(*extra_columns) if extra_columns else df
