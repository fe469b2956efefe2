"""`make demo`: the default pipeline on embedded defaults, end to end.

Spark in local mode streams a generated order stream (inserts, updates, deletes; see
``strata_platform.demo_orders``) into a primary-key table of a local warehouse with a SQLite
catalog. The writing tasks compact their buckets and produce the changelog (``lookup``); a
second streaming query reads that changelog and counts its +I/-U/+U/-D rows. When the stream
is written and read, the demo prints the table, its snapshots, files per LSM level, throughput
and the changelog counts, checks the table against the model of the generated stream and exits
(1 if the check fails).

    python -m strata_platform.demo                         # about 1-2 minutes
    python -m strata_platform.demo --batches 100 --rows-per-batch 200000   # longer
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import strata
from strata.table.table import Table
from strata_platform.demo_orders import ORDERS_SCHEMA, SOURCE_NAME, OrderStream, expected_orders

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TABLE = "shop.orders"
CATALOG_OPTIONS = {"catalog.metastore": "jdbc"}  # SQLite: <warehouse>/catalog.sqlite
TABLE_OPTIONS = {
    "bucket": "4",
    "sequence.field": "event_id",  # the last event of an order wins, in whatever order it arrives
    "changelog-producer": "lookup",  # -U/+U/-D computed while compacting, for streaming readers
    "write-only": "false",  # the writing tasks compact their buckets (distributed by bucket)
}
KINDS = ("+I", "-U", "+U", "-D")


@dataclass
class ChangelogCounts:
    """foreachBatch of the changelog query: counts per row kind (driver side, thread-safe)."""

    counts: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, df: DataFrame, _batch_id: int) -> None:
        rows = df.groupBy("_ROW_KIND").count().collect()
        with self.lock:
            for row in rows:
                self.counts[row["_ROW_KIND"]] += int(row["count"])

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return {k: self.counts.get(k, 0) for k in KINDS}


def create_table(warehouse: str) -> Table:
    catalog = strata.load_catalog(warehouse, metastore="jdbc")
    catalog.create_database("shop", ignore_if_exists=True)
    catalog.drop_table(TABLE, ignore_if_not_exists=True)
    return catalog.create_table(TABLE, ORDERS_SCHEMA, primary_keys=["order_id"], options=TABLE_OPTIONS)


def start_session() -> SparkSession:
    from strata_platform.services.spark import SparkService, spark_session

    SparkService().install()  # a clear error when Java 17+ or PySpark is missing
    spark = spark_session("strata-demo", **{"spark.sql.execution.arrow.maxRecordsPerBatch": "100000"})
    spark.sparkContext.setLogLevel("ERROR")
    from strata.spark import register

    register(spark)
    spark.dataSource.register(OrderStream)
    return spark


def start_writer(spark: SparkSession, uri: str, checkpoint: str, total: int, rows_per_batch: int) -> StreamingQuery:
    from pyspark.sql import functions as F

    from strata.spark import distribute_by_bucket

    orders = (spark.readStream.format(SOURCE_NAME).option("total", total).option("rows-per-batch", rows_per_batch)
              .load())
    kind = F.when(F.col("op") == "delete", "-D").when(F.col("op") == "update", "+U").otherwise("+I")
    rows = orders.select(kind.alias("_ROW_KIND"), *ORDERS_SCHEMA.names)
    return (distribute_by_bucket(rows, uri, None, **CATALOG_OPTIONS).writeStream.format("strata")
            .options(**CATALOG_OPTIONS).option("checkpointLocation", checkpoint).option("write-only", "false")
            .trigger(availableNow=True).queryName("orders-ingest").start(uri))


def start_changelog_reader(spark: SparkSession, uri: str, counts: ChangelogCounts) -> StreamingQuery:
    changes = (spark.readStream.format("strata").options(**CATALOG_OPTIONS).option("include-row-kind", "true")
               .option("scan.mode", "latest").load(uri))
    return (changes.writeStream.foreachBatch(counts).trigger(processingTime="1 second")
            .queryName("orders-changelog").start())


def _end_offset(query: StreamingQuery, key: str) -> int:
    """`key` of the end offset of the query's last micro-batch (0 before the first)."""
    progress = query.lastProgress
    if not progress or not progress["sources"] or not progress["sources"][0].get("endOffset"):
        return 0
    end = progress["sources"][0]["endOffset"]
    return int((end if isinstance(end, dict) else json.loads(end))[key])


def run_pipeline(args: argparse.Namespace, table: Table, uri: str) -> dict[str, Any]:
    began = time.monotonic()
    spark = start_session()
    print(f"[{time.monotonic() - began:5.1f}s] Spark {spark.version} started (local mode)", flush=True)
    total = args.batches * args.rows_per_batch
    counts = ChangelogCounts()
    try:
        reader = start_changelog_reader(spark, uri, counts)
        writer = start_writer(spark, uri, os.path.join(args.warehouse, "_checkpoints", "orders"), total,
                              args.rows_per_batch)
        next_report = time.monotonic()
        while writer.isActive:
            if time.monotonic() >= next_report:
                _report(began, writer, table, counts, total)
                next_report = time.monotonic() + args.progress_seconds
            time.sleep(0.2)
        if writer.exception() is not None:
            raise RuntimeError(f"the ingest query failed: {writer.exception()}")
        _report(began, writer, table, counts, total)
        latest = table.snapshot_manager.latest_id() or 0
        deadline = time.monotonic() + args.drain_seconds
        while _end_offset(reader, "snapshot") < latest and reader.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        reader.stop()
        if reader.exception() is not None:
            raise RuntimeError(f"the changelog query failed: {reader.exception()}")
        progress = [p for p in writer.recentProgress if p["numInputRows"] > 0]
    finally:
        spark.stop()
    return {"events": sum(int(p["numInputRows"]) for p in progress), "progress": progress,
            "changelog": counts.snapshot(), "changelog_position": _end_offset(reader, "snapshot"),
            "seconds": time.monotonic() - began}


def _report(began: float, writer: StreamingQuery, table: Table, counts: ChangelogCounts, total: int) -> None:
    progress = writer.lastProgress
    written = _end_offset(writer, "events")
    rate = f", {progress['processedRowsPerSecond']:,.0f} events/s" if progress and progress["numInputRows"] else ""
    if not written:
        rate = " (the first micro-batch starts Spark's Python workers)"
    seen = counts.snapshot()
    print(f"[{time.monotonic() - began:5.1f}s] written {written:,}/{total:,} events{rate}; "
          f"snapshot {table.snapshot_manager.latest_id() or 0}; changelog read: "
          + " ".join(f"{k} {seen[k]:,}" for k in KINDS), flush=True)


def summarize(table: Table, result: dict[str, Any], total: int) -> bool:
    """Print what a user wants to see; True when the table matches the model of the stream."""
    rows = table.to_arrow().sort_by("order_id")
    expected = expected_orders(total)
    matches = rows.select(expected.column_names).cast(expected.schema).equals(expected)
    print(f"\ntable {table.identifier}: {rows.num_rows:,} orders "
          f"(model of the {total:,} generated events: {expected.num_rows:,}) -> "
          + ("MATCH" if matches else "MISMATCH"))
    print(rows.group_by("status").aggregate([("order_id", "count"), ("amount", "sum")]).sort_by("status")
          .to_pandas().to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
    kinds = Counter(s.commit_kind for s in table.snapshots())
    print(f"\nsnapshots: {sum(kinds.values())} (" + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) + ")")
    levels = Counter(e.file.level for e in table.new_scan().plan_entries())
    print("data files per level: " + ", ".join(f"L{level}: {n}" for level, n in sorted(levels.items())))
    progress = result["progress"]
    steady = progress[1:] or progress  # the first micro-batch includes starting the Python workers
    ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    steady_rate = sum(int(p["numInputRows"]) for p in steady) / (ms / 1000) if ms else 0.0
    print(f"throughput: {result['events']:,} events in {len(progress)} micro-batches, "
          f"{steady_rate:,.0f} events/s after the first; {result['seconds']:.1f}s in all with Spark start-up")
    changelog = result["changelog"]
    net = changelog["+I"] - changelog["-D"]
    changelog_ok = net == rows.num_rows and changelog["-U"] == changelog["+U"]
    print("changelog read by the second query: " + ", ".join(f"{k} {changelog[k]:,}" for k in KINDS)
          + f" -> +I - -D = {net:,} " + ("= rows in the table" if changelog_ok else "!= rows in the table"))
    return matches and changelog_ok


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--warehouse", default=os.environ.get("STRATA_WAREHOUSE", "build/demo-warehouse"))
    parser.add_argument("--batches", type=int, default=12, help="micro-batches of the order stream")
    parser.add_argument("--rows-per-batch", type=int, default=100_000, help="events per micro-batch")
    parser.add_argument("--progress-seconds", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--drain-seconds", type=float, default=120.0,
                        help="how long the changelog query may take to catch up after the last batch")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.batches < 1 or args.rows_per_batch < 1:
        print("strata demo: --batches and --rows-per-batch must be >= 1", file=sys.stderr)
        return 2
    args.warehouse = os.path.abspath(args.warehouse)  # Spark's workers resolve the table from it
    shutil.rmtree(args.warehouse, ignore_errors=True)  # a fresh table and checkpoint every run
    os.makedirs(args.warehouse)
    table = create_table(args.warehouse)
    uri = f"{args.warehouse}#{TABLE}"
    print(f"warehouse {args.warehouse} (SQLite catalog {os.path.join(args.warehouse, 'catalog.sqlite')}); "
          f"table {TABLE}: primary key order_id, 4 buckets, changelog-producer=lookup")
    print(f"streaming {args.batches} micro-batches of {args.rows_per_batch:,} order events "
          "(60% new orders, 30% updates, 10% cancellations) ...", flush=True)
    result = run_pipeline(args, table, uri)
    ok = summarize(table, result, args.batches * args.rows_per_batch)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
