"""A three-stage pipeline driven through the Python API, for the lineage tests.

source (a list of order events, offset = events consumed)
  -> ingest job  -> db.orders      (id, customer, amount)          every step
  -> totals job  -> db.totals      (customer, total, orders)       every `totals_every` steps
  -> tiers job   -> db.tiers       (customer, tier)                every `tiers_every` steps

Each stage recomputes its table from the upstream snapshot it reads (an upsert of every key) and
commits with the lineage of that read, so the stages run at deliberately different speeds. The
join checked by the tests is orders JOIN totals JOIN tiers on customer.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

import strata
from strata.lineage import lineage_properties
from strata.table.table import Table

SOURCE = "kafka.orders"
ORDERS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.string()),
                    pa.field("amount", pa.int64())])
TOTALS = pa.schema([pa.field("customer", pa.string(), nullable=False), pa.field("total", pa.int64()),
                    pa.field("orders", pa.int64())])
TIERS = pa.schema([pa.field("customer", pa.string(), nullable=False), pa.field("tier", pa.string())])


def source_events(n: int) -> pa.Table:
    ids = pa.array(range(n), pa.int64())
    customers = pc.binary_join_element_wise("c", pc.cast(pc.bit_wise_and(ids, 3), pa.string()), "")
    amounts = pc.add(pc.multiply(pc.bit_wise_and(pc.multiply(ids, 7), 31), 1), 1)
    return pa.table([ids, customers, amounts], schema=ORDERS)


def totals_of(orders: pa.Table) -> pa.Table:
    grouped = orders.group_by("customer").aggregate([("amount", "sum"), ("id", "count")])
    return pa.table([grouped["customer"], grouped["amount_sum"], grouped["id_count"]], schema=TOTALS)


def tiers_of(totals: pa.Table) -> pa.Table:
    gold = pc.greater_equal(totals["total"], 100)
    tier = pc.if_else(gold, "gold", "silver")
    return pa.table([totals["customer"], tier], schema=TIERS)


def join_rows(orders: pa.Table, totals: pa.Table, tiers: pa.Table) -> list[tuple]:
    joined = orders.join(totals, "customer").join(tiers, "customer")
    cols = ["id", "customer", "amount", "total", "orders", "tier"]
    return sorted(zip(*(joined[c].to_pylist() for c in cols), strict=True))


def expected_join(offset: int) -> list[tuple]:
    """The join computed from the source itself at `offset`."""
    orders = source_events(offset)
    totals = totals_of(orders)
    return join_rows(orders, totals, tiers_of(totals))


# write-only stages, as jobs with a dedicated compaction job: a compaction inside a stage's commit
# lands when its thread wins the race with the commit, which would make snapshot ids vary by run
STAGE_OPTIONS = {"bucket": "1", "write-only": "true"}


@dataclass
class Pipeline:
    catalog: strata.Catalog
    totals_every: int = 2
    tiers_every: int = 3
    batch: int = 5
    offset: int = 0
    step_no: int = 0

    def __post_init__(self) -> None:
        self.orders = self.catalog.create_table("db.orders", ORDERS, primary_keys=["id"],
                                                options=STAGE_OPTIONS)
        self.totals = self.catalog.create_table("db.totals", TOTALS, primary_keys=["customer"],
                                                options=STAGE_OPTIONS)
        self.tiers = self.catalog.create_table("db.tiers", TIERS, primary_keys=["customer"],
                                               options=STAGE_OPTIONS)

    @property
    def tables(self) -> list[Table]:
        return [self.orders, self.totals, self.tiers]

    def step(self) -> None:
        """One tick: ingest a batch; the slower stages run every few ticks."""
        self.step_no += 1
        self.ingest()
        if self.step_no % self.totals_every == 0:
            self.derive(self.orders, self.totals, "totals-job", totals_of)
        if self.step_no % self.tiers_every == 0:
            self.derive(self.totals, self.tiers, "tiers-job", tiers_of)

    def ingest(self) -> None:
        events = source_events(self.offset + self.batch).slice(self.offset)
        self.offset += self.batch
        commit(self.orders, events, lineage_properties("ingest-job", offsets={SOURCE: self.offset}))

    def derive(self, upstream: Table, target: Table, job: str, transform: object) -> None:
        read_at = upstream.snapshot_manager.latest_id()
        assert read_at is not None and callable(transform)
        rows = transform(upstream.to_arrow(snapshot_id=read_at))
        commit(target, rows, lineage_properties(job, reads={upstream: read_at}))


def commit(table: Table, rows: pa.Table, properties: dict[str, str]) -> list[int]:
    with table.new_write() as writer:
        writer.write_arrow(rows)
        messages = writer.prepare_commit()
    return table.new_commit().commit(messages, properties=properties).snapshot_ids
