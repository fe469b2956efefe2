"""Kafka log store benchmarks, an extension of ``strata.bench`` (see strata.bench.spec).

LOG_LATENCY_EVENTUAL / LOG_LATENCY_TRANSACTIONAL: a writer thread calls ``TableWrite.write_arrow``
with 1,000 rows every 100 ms (10,000 rows/s) for 60 s at scale 1 (scale shortens the duration;
at least 2 s), committing the table every COMMIT_INTERVAL_S; a consumer thread in the same
process reads the table's topic and, for every row, takes the time from the write call (carried
in the row as ``sent_us``) until the consumer holds it. p50/p99 over all rows.
  * eventual: an upsert log, records visible at once (read_uncommitted is not needed: there are
    no transactions). Target p99 < 1000 ms.
  * transactional: records visible when the commit's Kafka transaction commits, i.e. after the
    snapshot is published; consumers read_committed. Target p99 < COMMIT_INTERVAL_S * 1000 + 1000.

LOG_PRODUCE: rows/s of ``TableWrite.write_arrow`` + ``prepare_commit`` + commit into a 4-bucket
primary-key table with the (transactional) log store on, file-store write included; the
reference is the same write without the log store.

All three need a broker: ``STRATA_KAFKA_BOOTSTRAP`` (``strata-services env kafka``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.bench.spec import PartResult, Target, Workload

BOOTSTRAP_ENV = "STRATA_KAFKA_BOOTSTRAP"
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64()),
                    pa.field("customer", pa.string()), pa.field("amount", pa.float64()),
                    pa.field("sent_us", pa.int64())])
BUCKETS = 4
RATE_ROWS_PER_S = 10_000
TICK_S = 0.1  # the writer's call interval: RATE_ROWS_PER_S * TICK_S rows per call
LATENCY_SECONDS = 60.0  # at scale 1
COMMIT_INTERVAL_S = 1.0
PRODUCE_ROWS = 2_000_000  # at scale 1
PRODUCE_BATCH = 100_000


def unavailable() -> str | None:
    """Why the log-store benchmarks cannot run here, or None."""
    bootstrap = os.environ.get(BOOTSTRAP_ENV)
    if not bootstrap:
        return f"${BOOTSTRAP_ENV} is not set (start Kafka: strata-services env kafka)"
    try:
        from confluent_kafka.admin import AdminClient
    except ImportError as exc:
        return f"confluent-kafka is not installed ({exc})"
    try:
        AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=5)
    except Exception as exc:
        return f"Kafka at {bootstrap} is not reachable: {exc}"
    return None


def _rows(start: int, n: int, sent_us: int) -> pa.Table:
    ids = np.arange(start, start + n, dtype=np.int64)
    return pa.table({"id": ids, "v": ids * 7, "customer": pc.cast(pa.array(ids % 1000), pa.string()),
                     "amount": ids * 0.25, "sent_us": np.full(n, sent_us, dtype=np.int64)}, schema=SCHEMA)


def _table(work_dir: str, consistency: str | None) -> Any:
    import strata

    catalog = strata.load_catalog(os.path.join(work_dir, f"warehouse-{uuid.uuid4().hex[:8]}"))
    catalog.create_database("bench")
    options = {"bucket": str(BUCKETS)}
    if consistency is not None:
        options.update({"log.system": "kafka", "log.consistency": consistency,
                        "log.kafka.bootstrap-servers": os.environ[BOOTSTRAP_ENV],
                        "log.kafka.topic": f"bench-log-{uuid.uuid4().hex[:12]}",
                        "log.system.auto-register": "true"})
    return catalog.create_table("bench.events", SCHEMA, primary_keys=["id"], options=options)


def _drop_topic(table: Any) -> None:
    from confluent_kafka.admin import AdminClient

    from strata.log import close_producers, log_options

    close_producers()
    opts = log_options(table)
    for future in AdminClient({"bootstrap.servers": opts.bootstrap, "log_level": 3}).delete_topics(
            [opts.topic]).values():
        with contextlib.suppress(Exception):  # best effort: a leftover topic does not change results
            future.result(30)


class _LatencyConsumer(threading.Thread):
    """Reads the topic from the start and records, per row, now - sent_us (milliseconds)."""

    def __init__(self, table: Any, isolation: str):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer, TopicPartition

        from strata.log import log_options

        opts = log_options(table)
        self.consumer = Consumer({"bootstrap.servers": opts.bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "isolation.level": isolation,
                                  "fetch.wait.max.ms": 10, "log_level": 3})
        self.consumer.assign([TopicPartition(opts.topic, p, 0) for p in range(opts.partitions)])
        self.schema = SCHEMA
        self.latencies: list[np.ndarray] = []
        self.rows = 0
        self.stop = threading.Event()

    def run(self) -> None:
        from strata.log.serde import decode_values

        while not self.stop.is_set():
            messages = [m for m in self.consumer.consume(10_000, 0.05) if m.error() is None]
            if not messages:
                continue
            now_us = time.time_ns() // 1000
            rows, _kinds = decode_values([m.value() or b"" for m in messages], self.schema)
            sent = rows.column("sent_us").to_numpy(zero_copy_only=False)
            self.latencies.append((now_us - sent) / 1000.0)
            self.rows += rows.num_rows

    def wait_for(self, rows: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.rows < rows and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop.set()
        self.join(10)
        self.consumer.close()


def _latency(work_dir: str, scale: float, consistency: str) -> PartResult:
    table = _table(work_dir, consistency)
    duration = max(2.0, LATENCY_SECONDS * scale)
    per_tick = int(RATE_ROWS_PER_S * TICK_S)
    consumer = _LatencyConsumer(table, "read_committed")
    consumer.start()
    writer = table.new_write("bench-writer")
    commit = table.new_commit("bench-writer")
    started = time.monotonic()
    cpu_started = time.process_time()
    written, identifier, next_commit = 0, 0, started + COMMIT_INTERVAL_S
    tick = started
    try:
        while tick - started < duration:
            writer.write_arrow(_rows(written, per_tick, time.time_ns() // 1000))
            written += per_tick
            if time.monotonic() >= next_commit:
                identifier += 1
                commit.commit(writer.prepare_commit(), identifier)
                next_commit += COMMIT_INTERVAL_S
            tick += TICK_S
            time.sleep(max(0.0, tick - time.monotonic()))
        identifier += 1
        commit.commit(writer.prepare_commit(), identifier)
        consumer.wait_for(written, timeout=60)
        cpu = time.process_time() - cpu_started
        elapsed = time.monotonic() - started
    finally:
        writer.close()
        _drop_topic(table)
    latencies = np.concatenate(consumer.latencies) if consumer.latencies else np.array([], dtype=float)
    return {"rows": written, "seen": int(consumer.rows), "seconds": round(elapsed, 2),
            "cpu_seconds": round(cpu, 2), "commits": identifier,
            "p50_ms": round(float(np.percentile(latencies, 50)), 1) if len(latencies) else None,
            "p99_ms": round(float(np.percentile(latencies, 99)), 1) if len(latencies) else None,
            "max_ms": round(float(latencies.max()), 1) if len(latencies) else None}


def latency_eventual(work_dir: str, scale: float) -> PartResult:
    return _latency(work_dir, scale, "eventual")


def latency_transactional(work_dir: str, scale: float) -> PartResult:
    return _latency(work_dir, scale, "transactional")


def _write_all(table: Any, total: int) -> tuple[float, float]:
    """Wall and CPU seconds of writing `total` rows and committing once per batch."""
    batches = [_rows(start, min(PRODUCE_BATCH, total - start), 0) for start in range(0, total, PRODUCE_BATCH)]
    writer = table.new_write("bench-producer")
    commit = table.new_commit("bench-producer")
    started, cpu_started = time.monotonic(), time.process_time()
    try:
        for identifier, batch in enumerate(batches, start=1):
            writer.write_arrow(batch)
            commit.commit(writer.prepare_commit(), identifier)
        return time.monotonic() - started, time.process_time() - cpu_started
    finally:
        writer.close()


def produce(work_dir: str, scale: float) -> PartResult:
    total = max(PRODUCE_BATCH // 10, int(PRODUCE_ROWS * scale))
    plain_seconds, plain_cpu = _write_all(_table(work_dir, None), total)
    table = _table(work_dir, "transactional")
    try:
        seconds, cpu = _write_all(table, total)
        from strata.log import snapshot_log_offsets

        logged = sum(snapshot_log_offsets(table.latest_snapshot()).values())  # records + commit markers
    finally:
        _drop_topic(table)
    return {"rows": total, "seconds": round(seconds, 3), "cpu_seconds": round(cpu, 3),
            "rows_per_s": round(total / seconds), "reference_rows_per_s": round(total / plain_seconds),
            "rows_per_cpu_s": round(total / cpu), "reference_rows_per_cpu_s": round(total / plain_cpu),
            "reference_cpu_seconds": round(plain_cpu, 3), "log_offsets_total": logged}


def summarize_latency(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    result = dict(parts["log"])
    if result["p99_ms"] is None:
        raise ValueError("the consumer saw no row")
    result["rate_rows_per_s"] = RATE_ROWS_PER_S
    result["commit_interval_ms"] = int(COMMIT_INTERVAL_S * 1000)
    return result


def summarize_produce(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    result = dict(parts["log"])
    result["value"] = result["rows_per_s"]
    result["reference"] = result["reference_rows_per_s"]
    result["ratio"] = round(result["rows_per_s"] / result["reference_rows_per_s"], 3)
    return result


_LATENCY_LINES = (("p50 ms", "p50_ms"), ("max ms", "max_ms"), ("rows", "rows"), ("seen", "seen"),
                  ("commits", "commits"), ("CPU seconds", "cpu_seconds"))
WORKLOADS = {
    "LOG_LATENCY_EVENTUAL": Workload(
        description=f"write call -> Kafka consumer, eventual (upsert) log, {RATE_ROWS_PER_S} rows/s",
        target=Target("<=", 1000.0), key="p99_ms", metric="p99 ms",
        parts={"log": latency_eventual}, summarize=summarize_latency, unavailable=unavailable,
        extra_lines=_LATENCY_LINES),
    "LOG_LATENCY_TRANSACTIONAL": Workload(
        description=(f"write call -> read_committed consumer, transactional log, {RATE_ROWS_PER_S} rows/s, "
                     f"commit every {COMMIT_INTERVAL_S:g} s"),
        target=Target("<=", COMMIT_INTERVAL_S * 1000 + 1000.0), key="p99_ms", metric="p99 ms",
        parts={"log": latency_transactional}, summarize=summarize_latency, unavailable=unavailable,
        extra_lines=_LATENCY_LINES),
    "LOG_PRODUCE": Workload(
        description=f"write + commit into a {BUCKETS}-bucket PK table with the transactional log store on",
        target=Target(">=", 100_000.0), key="rows_per_s", metric="rows/s",
        parts={"log": produce}, summarize=summarize_produce, unavailable=unavailable,
        extra_lines=(("without log rows/s", "reference_rows_per_s"), ("rows per CPU-second", "rows_per_cpu_s"),
                     ("without log rows per CPU-second", "reference_rows_per_cpu_s"), ("CPU seconds", "cpu_seconds"),
                     ("without log CPU seconds", "reference_cpu_seconds"), ("rows", "rows"))),
}
