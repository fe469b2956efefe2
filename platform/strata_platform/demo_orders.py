"""The demo's generated order stream: a Spark streaming source and the model of its result.

Event ``e`` (0, 1, 2, ...) is a pure function of ``e``, so the final table is known in advance.
In each block of ten events, six place new orders, three update earlier orders and one cancels
(deletes) an earlier one:

    position 0-5: insert  order 6 * block + position            status 'placed'
    position 6-8: update  order (6 * block + position) // 2      status 'paid', 'shipped', 'paid'
    position 9:   delete  order (6 * block + 9) // 3             status 'cancelled'

Updated orders were placed earlier, and an order is updated before it is cancelled. Several
events of one order may fall into one micro-batch and reach the writer in any order (Spark's
shuffle does not keep it); the table orders them by ``sequence.field = event_id``, so the last
event of an order wins wherever it arrived.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from strata.errors import OptionError
from strata.spark.types import expected_arrow_schema

SOURCE_NAME = "strata_demo_orders"
SPARK_SCHEMA = ("event_id bigint, order_id bigint, op string, customer string, amount double, "
                "status string, updated_at timestamp_ntz")
ORDERS_SCHEMA = pa.schema([
    pa.field("order_id", pa.int64(), nullable=False),
    pa.field("event_id", pa.int64()),
    pa.field("customer", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("status", pa.string()),
    pa.field("updated_at", pa.timestamp("us")),
])
OPS = np.array(["insert", "update", "delete"])
START_MICROS = 1_795_000_000_000_000  # timestamps of the events: a fixed start + 1 ms per event


def events(first: int, last: int) -> pa.Table:
    """Events first .. last - 1 (vectorized)."""
    e = np.arange(first, last, dtype=np.int64)
    block, position = np.divmod(e, 10)
    op = np.where(position < 6, 0, np.where(position < 9, 1, 2))
    order_id = np.select([op == 0, op == 1], [6 * block + position, (6 * block + position) // 2],
                         (6 * block + 9) // 3)
    status = np.select([op == 0, op == 2, position == 7], ["placed", "cancelled", "shipped"], "paid")
    customer_no = pa.array(order_id % 997).cast(pa.string())
    return pa.table({
        "event_id": e,
        "order_id": order_id,
        "op": OPS[op],
        "customer": pc.binary_join_element_wise("customer-", customer_no, ""),
        "amount": np.round(((e * 7919) % 100_000) / 100, 2),
        "status": status,
        "updated_at": pa.array(START_MICROS + e * 1000, pa.timestamp("us")),
    })


def expected_orders(total: int) -> pa.Table:
    """The table after events 0 .. total - 1: each order's last event, unless it is a delete."""
    all_events = events(0, total)
    ids = all_events.column("order_id").to_numpy()
    order = np.lexsort((all_events.column("event_id").to_numpy(), ids))
    last = order[np.r_[ids[order][1:] != ids[order][:-1], True]]
    final = all_events.take(pa.array(last))
    final = final.filter(pc.not_equal(final.column("op"), "delete"))
    return final.select(ORDERS_SCHEMA.names).cast(ORDERS_SCHEMA).sort_by("order_id")


class OrderStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets {"events": n}: events 0 .. n - 1 are planned. `rows_per_batch` events per
    micro-batch, `total` in all; two Spark partitions per micro-batch."""

    def __init__(self, total: int, rows_per_batch: int, schema: Any):
        self.total, self.rows_per_batch = total, rows_per_batch
        self.arrow_schema = expected_arrow_schema(schema)

    def initialOffset(self) -> dict:
        return {"events": 0}

    def getDefaultReadLimit(self) -> ReadMaxRows:
        return ReadMaxRows(self.rows_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        """The stream is bounded: Trigger.AvailableNow runs it to its end."""

    def latestOffset(self, start: dict, limit: Any) -> dict:
        step = limit.max_rows if isinstance(limit, ReadMaxRows) else self.total
        return {"events": min(int(start["events"]) + step, self.total)}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        first, last = int(start["events"]), int(end["events"])
        middle = (first + last) // 2
        return [InputPartition((first, middle)), InputPartition((middle, last))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        first, last = partition.value
        if last > first:
            yield from events(first, last).cast(self.arrow_schema).to_batches()


class OrderStream(DataSource):
    """``spark.readStream.format("strata_demo_orders").option("total", ...).option("rows-per-batch", ...)``"""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return OrderStreamReader(_positive(self.options, "total"), _positive(self.options, "rows-per-batch"), schema)


def _positive(options: Any, key: str) -> int:
    value = options.get(key)
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise OptionError(f"the {SOURCE_NAME} source needs option {key!r} as a positive integer, "
                          f"got {value!r}") from None
    if number < 1:
        raise OptionError(f"option {key!r} of the {SOURCE_NAME} source must be >= 1, got {number}")
    return number
