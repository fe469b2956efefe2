"""`make demo`: the main job on embedded defaults.

Ingests a stream of order events into a partitioned primary-key table (upserts and deletes, one
commit per micro-batch, exactly-once by commit identifier), then shows what a user sees: the
merged table, its snapshots, a time-travel read and the changes between two snapshots.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pyarrow as pa

import strata
from strata.table.table import Table

SCHEMA = pa.schema([
    pa.field("order_id", pa.int64(), nullable=False),
    pa.field("day", pa.string(), nullable=False),
    pa.field("customer", pa.string()),
    pa.field("amount", pa.decimal128(10, 2)),
    pa.field("updated_at", pa.timestamp("us")),
])
DAYS = ["2026-11-20", "2026-11-21", "2026-11-22"]


def micro_batch(rng: np.random.Generator, batch_id: int, rows: int, next_id: int) -> pa.Table:
    """Half new orders, half updates of earlier ones."""
    fresh = np.arange(next_id, next_id + rows // 2)
    updates = rng.integers(0, max(next_id, 1), rows - len(fresh)) if next_id else np.arange(rows // 2)
    ids = np.concatenate([fresh, updates])
    cents = rng.integers(100, 100_000, len(ids))
    return pa.table({
        "order_id": ids,
        "day": np.array(DAYS)[ids % len(DAYS)],
        "customer": [f"customer-{i % 997}" for i in ids],
        "amount": pa.array([c / 100 for c in cents.tolist()]).cast(pa.decimal128(10, 2)),
        "updated_at": pa.array(np.full(len(ids), int(time.time() * 1e6) + batch_id, dtype="datetime64[us]")),
    }, schema=SCHEMA)


def ingest(table: Table, batches: int, rows: int, commit_user: str) -> None:
    rng = np.random.default_rng(7)
    commit = table.new_commit(commit_user)
    next_id = 0
    for batch_id in range(batches):
        data = micro_batch(rng, batch_id, rows, next_id)
        next_id += rows // 2
        with table.new_write() as writer:
            writer.write_arrow(data)
            if batch_id % 3 == 2:  # cancel a few orders
                writer.delete(data.slice(0, 5))
            result = commit.commit(writer.prepare_commit(), identifier=batch_id)
        print(f"batch {batch_id}: {data.num_rows} rows -> snapshot {result.snapshot_ids}")
    replay = commit.commit([], identifier=batches - 1)
    print(f"replayed batch {batches - 1}: skipped as duplicate = {replay.skipped_as_duplicate}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--warehouse", default=os.environ.get("STRATA_WAREHOUSE", "build/demo-warehouse"))
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=20_000)
    args = parser.parse_args(argv)

    catalog = strata.load_catalog(args.warehouse)
    catalog.create_database("shop", ignore_if_exists=True)
    catalog.drop_table("shop.orders", ignore_if_not_exists=True)
    table = catalog.create_table("shop.orders", SCHEMA, partition_keys=["day"],
                                 primary_keys=["day", "order_id"], options={"bucket": "4"})
    print(f"warehouse {args.warehouse}: created {table.identifier}")
    ingest(table, args.batches, args.rows, commit_user="demo-ingest")

    merged = table.to_arrow()
    print(f"\nmerged rows: {merged.num_rows} (distinct keys written, minus deletes)")
    print(merged.group_by("day").aggregate([("amount", "sum"), ("order_id", "count")]).sort_by("day"))
    print("\nsnapshots:")
    for snap in table.snapshots():
        print(f"  {snap.id:>3} {snap.commit_kind:<9} identifier={snap.commit_identifier:<3} "
              f"total={snap.total_record_count} delta={snap.delta_record_count}")
    first = table.to_arrow(snapshot_id=1)
    print(f"\ntime travel to snapshot 1: {first.num_rows} rows")
    latest = table.latest_snapshot()
    assert latest is not None
    changes = table.read_incremental(latest.id - 1, latest.id)
    kinds = changes.group_by("_ROW_KIND").aggregate([("order_id", "count")])
    print(f"changes in snapshot {latest.id}: {kinds.to_pylist()}")
    hot = table.to_arrow(filter=strata.col("order_id").between(100, 110) & (strata.col("day") == DAYS[1]))
    print(f"orders 100..110 on {DAYS[1]}: {hot.column('order_id').to_pylist()}")


if __name__ == "__main__":
    main()
