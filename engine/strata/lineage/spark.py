"""Lineage for Spark Structured Streaming stages: a ``foreachBatch`` writer that records what the
micro-batch consumed.

The ``strata`` streaming sink does not take per-batch commit properties, so a stage that should
record lineage writes through ``LineageBatchWriter`` instead::

    query = (spark.readStream.format("strata").load(f"{warehouse}#db.orders")
             .writeStream.option("checkpointLocation", ckpt)
             .foreachBatch(LineageBatchWriter("fees-job", orders, fees, ckpt, transform))
             .start())

For micro-batch N it reads the upstream position from Spark's offset log (``<checkpoint>/offsets/
N``, written before the batch runs; the ``strata`` source's offset is ``{"snapshot": S}``), applies
`transform` (a DataFrame -> DataFrame function; the default writes the rows as they are), and
commits the rows to the target table with the lineage of upstream snapshot S. Exactly once: the
commit user is derived from the checkpoint and the identifier is the batch id, so a replayed batch
is skipped. ``full_recompute=True`` gives `transform` the whole upstream table at snapshot S
instead of the batch's changes, and overwrites the target (for aggregates).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pyarrow as pa

from strata.lineage.record import lineage_properties
from strata.spark.offset_log import upstream_snapshot
from strata.spark.options import commit_user_for_checkpoint
from strata.spark.writer import to_table_rows

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from strata.table.table import Table


class LineageBatchWriter:
    def __init__(self, job: str, upstream: Table, target: Table, checkpoint: str,
                 transform: Callable[[DataFrame], DataFrame] | None = None, full_recompute: bool = False,
                 upstream_location: str | None = None):
        self.job = job
        self.upstream = upstream
        self.target = target
        self.checkpoint = checkpoint.rstrip("/")
        self.transform = transform or (lambda df: df)
        self.full_recompute = full_recompute
        # where Spark reads the upstream for a full recompute (default: the table's own path)
        self.upstream_location = upstream_location or upstream.path
        self.commit_user = commit_user_for_checkpoint(self.checkpoint)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        consumed = upstream_snapshot(self.checkpoint, batch_id)
        if self.full_recompute:
            whole = (batch.sparkSession.read.format("strata").option("snapshot-id", str(consumed))
                     .load(self.upstream_location))
            rows = self.transform(whole)
        else:
            rows = self.transform(batch)
        self._commit(rows.toArrow(), batch_id, lineage_properties(self.job, reads={self.upstream: consumed}))

    def _commit(self, data: pa.Table, batch_id: int, properties: dict[str, str]) -> None:
        commit = self.target.new_commit(self.commit_user)
        last = commit.last_committed_identifier()
        if last is not None and batch_id <= last:
            return  # a replay of a committed batch
        with self.target.new_write(self.commit_user) as writer:
            if data.num_rows:
                rows, kinds = to_table_rows(data, self.target)
                writer.write_arrow(rows, row_kind=kinds)
            messages = writer.prepare_commit()
        if self.full_recompute:
            commit.overwrite(messages, identifier=batch_id, properties=properties)
        else:
            commit.commit(messages, batch_id, properties)
