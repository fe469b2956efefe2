"""Spark Structured Streaming into Strata: ingest throughput and commit-to-visible latency.

SPARK_INGEST: Spark's ``rate-micro-batch`` source (a fixed number of rows per micro-batch, as
fast as Spark runs them) -> ``distribute_by_bucket`` -> a 4-bucket primary-key table with
compaction in the writing tasks (``write-only=false``). Rows/s over the measured micro-batches:
the sum of their ``triggerExecution`` (planning, the tasks, the commit, Spark's checkpoint), so
JVM start-up and the first micro-batch (which starts the Python workers) are excluded.

SPARK_VISIBILITY: the same writer with a 1 s processing-time trigger, and a second streaming
query reading the table's changes (``readStream.format("strata")``, 100 ms trigger). For each
micro-batch of the writer: the time from its snapshot's commit (``timeMillis``) until the reader
holds its rows on the driver; p50 and p99 over the batches after the first WARMUP_BATCHES.

Both need Java 17+ and PySpark (``strata_platform.services.spark`` provides the session).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from strata.bench.spec import PartResult, Target, Workload

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from strata.table.table import Table

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("v", pa.int64()),
    pa.field("customer", pa.string()),
    pa.field("amount", pa.float64()),
    pa.field("ts", pa.timestamp("us")),
])
TABLE = "bench.events"
BUCKETS = 4
INGEST_ROWS_PER_BATCH = 500_000  # at scale 1
INGEST_BATCHES = 8  # measured, after the warm-up batch
VISIBILITY_ROWS_PER_BATCH = 20_000
VISIBILITY_BATCHES = 30
WARMUP_BATCHES = 2
# Spark's Arrow batches to Python workers: larger ones save per-batch conversion work
SESSION_CONF = {"spark.sql.execution.arrow.maxRecordsPerBatch": "100000"}


def unavailable() -> str | None:
    """Why Spark cannot run here, or None."""
    try:
        from strata_platform.services.base import ServiceError
        from strata_platform.services.spark import SparkService
    except ImportError as exc:
        return f"Spark benchmarks need strata_platform and pyspark ({exc})"
    try:
        SparkService().install()  # pyspark importable, Java 17+ present
    except ServiceError as exc:
        return str(exc)
    return None


def _session(app: str) -> SparkSession:
    from strata.spark import register
    from strata_platform.services.spark import spark_session

    spark = spark_session(app, **SESSION_CONF)
    spark.sparkContext.setLogLevel("ERROR")  # stopping a query mid-batch logs cancelled tasks
    register(spark)
    return spark


def _create_table(work_dir: str, name: str) -> tuple[Table, str]:
    import strata

    warehouse = os.path.join(work_dir, f"spark-{name}")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("bench", ignore_if_exists=True)
    catalog.drop_table(TABLE, ignore_if_not_exists=True)
    table = catalog.create_table(TABLE, SCHEMA, primary_keys=["id"],
                                 options={"bucket": str(BUCKETS), "write-only": "false"})
    return table, f"{warehouse}#{TABLE}"


def _events(spark: SparkSession, rows_per_batch: int, keys: int) -> DataFrame:
    """The rate source's `value` v -> an event of key v % keys (later events update earlier keys)."""
    from pyspark.sql import functions as F

    value = F.col("value")
    return (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
            .option("numPartitions", 2).load()
            .select((value % keys).alias("id"), value.alias("v"),
                    F.concat(F.lit("customer-"), (value % 997).cast("string")).alias("customer"),
                    ((value % 100_000) / 100).alias("amount"), F.col("timestamp").alias("ts")))


def _start_writer(spark: SparkSession, uri: str, work_dir: str, name: str, rows_per_batch: int, keys: int,
                  trigger: str) -> Any:
    from strata.spark import distribute_by_bucket

    events = distribute_by_bucket(_events(spark, rows_per_batch, keys), uri)
    return (events.writeStream.format("strata").option("checkpointLocation", os.path.join(work_dir, f"ck-{name}"))
            .option("write-only", "false").trigger(processingTime=trigger).start(uri))


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def _tree_cpu_seconds(root: int) -> float | None:
    """CPU seconds (user + system) of `root` and its live descendants (the JVM and its Python
    workers), from /proc; None where there is no /proc."""
    if not os.path.isdir("/proc"):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    tree, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        children = [p for p, parent in parents.items() if parent == pid and p not in tree]
        tree.update(children)
        frontier.extend(children)
    return sum(cpu.get(p, 0.0) for p in tree)


def _process_cpu(spark: SparkSession) -> float | None:
    """CPU seconds of this process plus Spark's JVM and its Python workers."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    jvm = _tree_cpu_seconds(proc.pid) if proc is not None else None
    own = sum(os.times()[:2])
    return own + jvm if jvm is not None else None


# -- SPARK_INGEST ------------------------------------------------------------------------------
def ingest(work_dir: str, scale: float) -> PartResult:
    rows_per_batch = max(1_000, int(INGEST_ROWS_PER_BATCH * scale))
    keys = max(1_000, rows_per_batch * INGEST_BATCHES // 4)  # about 3 of 4 events update a key
    table, uri = _create_table(work_dir, "ingest")
    spark = _session("strata-bench-spark-ingest")
    try:
        query = _start_writer(spark, uri, work_dir, "ingest", rows_per_batch, keys, "0 seconds")
        cpu_start: float | None = None
        try:
            _wait_for(lambda: len(query.recentProgress) >= 1, 600, "the warm-up micro-batch")
            cpu_start = _process_cpu(spark)
            _wait_for(lambda: len(query.recentProgress) >= 1 + INGEST_BATCHES, 1200, "the measured micro-batches")
            cpu_end = _process_cpu(spark)
        finally:
            query.stop()
        if query.exception() is not None:
            raise RuntimeError(f"the streaming write failed: {query.exception()}")
        measured = [p for p in query.recentProgress if p["batchId"] >= 1][:INGEST_BATCHES]
    finally:
        spark.stop()
    rows = sum(int(p["numInputRows"]) for p in measured)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in measured) / 1000
    committed = {s.commit_identifier for s in table.snapshots() if s.commit_kind == "APPEND"}
    levels = _files_per_level(table)
    return {"rows": rows, "seconds": seconds, "batches": len(measured), "rows_per_batch": rows_per_batch,
            "keys": keys, "cpu_seconds": (cpu_end - cpu_start) if cpu_start is not None and cpu_end is not None
            else None, "committed_batches": len(committed), "table_rows": table.to_arrow(columns=["id"]).num_rows,
            "files_per_level": levels,
            "batch_ms": [p["durationMs"]["triggerExecution"] for p in measured]}


def _files_per_level(table: Table) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in table.new_scan().plan_entries():
        counts[str(entry.file.level)] = counts.get(str(entry.file.level), 0) + 1
    return dict(sorted(counts.items()))


def summarize_ingest(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    part = parts["spark"]
    rows_per_s = part["rows"] / part["seconds"] if part["seconds"] > 0 else 0.0
    row = {"rows_per_s": round(rows_per_s, 1), "rows": part["rows"], "seconds": round(part["seconds"], 3),
           "batches": part["batches"], "rows_per_batch": part["rows_per_batch"], "batch_ms": part["batch_ms"],
           "files_per_level": part["files_per_level"], "table_rows": part["table_rows"]}
    if part.get("cpu_seconds"):
        row["cpu_seconds"] = round(part["cpu_seconds"], 3)
        row["rows_per_cpu_s"] = round(part["rows"] / part["cpu_seconds"], 1)
    return row


# -- SPARK_VISIBILITY --------------------------------------------------------------------------
class _VisibilityProbe:
    """foreachBatch of the reading query: when were the rows of each writer batch first seen?
    Writer batch b holds the rate source's values [b * rows_per_batch, (b + 1) * rows_per_batch)."""

    def __init__(self, rows_per_batch: int):
        self.rows_per_batch = rows_per_batch
        self.seen_at: dict[int, float] = {}
        self.lock = threading.Lock()

    def __call__(self, df: DataFrame, _batch_id: int) -> None:
        values = df.select("v").toArrow().column("v").to_numpy(zero_copy_only=False)
        now = time.time()
        if len(values) == 0:
            return
        batches = np.unique(values // self.rows_per_batch)
        with self.lock:
            for b in batches.tolist():
                self.seen_at.setdefault(int(b), now)

    def seen(self) -> int:
        with self.lock:
            return len(self.seen_at)


def visibility(work_dir: str, scale: float) -> PartResult:
    rows_per_batch = max(100, int(VISIBILITY_ROWS_PER_BATCH * scale))
    batches = max(WARMUP_BATCHES + 3, int(VISIBILITY_BATCHES * min(scale, 1.0)))
    table, uri = _create_table(work_dir, "visibility")
    spark = _session("strata-bench-spark-visibility")
    probe = _VisibilityProbe(rows_per_batch)
    try:
        reader = (spark.readStream.format("strata").option("scan.mode", "latest").load(uri)
                  .writeStream.foreachBatch(probe).trigger(processingTime="100 milliseconds").start())
        writer = _start_writer(spark, uri, work_dir, "visibility", rows_per_batch, rows_per_batch * 4, "1 second")
        try:
            _wait_for(lambda: probe.seen() >= batches, 600 + 10 * batches, f"the reader to see {batches} batches")
        finally:
            writer.stop()
            reader.stop()
        for query in (writer, reader):
            if query.exception() is not None:
                raise RuntimeError(f"a streaming query failed: {query.exception()}")
    finally:
        spark.stop()
    committed_at = {s.commit_identifier: s.time_millis / 1000 for s in table.snapshots()
                    if s.commit_kind == "APPEND"}
    latencies_ms = [(probe.seen_at[b] - committed_at[b]) * 1000 for b in sorted(probe.seen_at)
                    if b >= WARMUP_BATCHES and b in committed_at]
    return {"latencies_ms": [round(x, 1) for x in latencies_ms], "rows_per_batch": rows_per_batch,
            "batches_seen": len(probe.seen_at)}


def summarize_visibility(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    latencies = np.array(parts["spark"]["latencies_ms"], dtype=float)
    if len(latencies) == 0:
        raise ValueError("the reader saw no measured batch")
    return {"p50_ms": round(float(np.percentile(latencies, 50)), 1),
            "p99_ms": round(float(np.percentile(latencies, 99)), 1),
            "max_ms": round(float(latencies.max()), 1), "batches": len(latencies),
            "rows_per_batch": parts["spark"]["rows_per_batch"], "trigger": "1 second"}


WORKLOADS = {
    "SPARK_INGEST": Workload(
        description=f"Spark rate source -> {BUCKETS}-bucket PK table, compaction in the tasks: streaming ingest",
        target=Target(">=", 200_000.0), key="rows_per_s", metric="rows/s",
        parts={"spark": ingest}, summarize=summarize_ingest, unavailable=unavailable,
        extra_lines=(("rows", "rows"), ("seconds", "seconds"), ("batches", "batches"),
                     ("rows per CPU-second", "rows_per_cpu_s"))),
    "SPARK_VISIBILITY": Workload(
        description="1 s trigger writer + streaming reader: commit-to-visible latency per micro-batch",
        target=Target("<=", 2000.0), key="p99_ms", metric="visible p99 ms",
        parts={"spark": visibility}, summarize=summarize_visibility, unavailable=unavailable,
        extra_lines=(("visible p50 ms", "p50_ms"), ("batches", "batches"))),
}
