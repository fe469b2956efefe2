"""Strata on a Spark standalone cluster: executors in processes of their own, on two workers.

Executors share no memory or local files with the driver, so every table lives on MinIO with the
JDBC catalog (PostgreSQL), and the data source reaches both through its ``catalog.*`` options.
Covered: batch writes and reads, the streaming sink (exactly once) fed by a streaming read, the
CDC job from Kafka, a worker SIGKILLed between micro-batches (the job goes on on the other), the
driver SIGKILLed and restarted with remote executors, and distributed compaction.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest
from test_cdc import Model, expected, send, table_rows
from test_spark_exactly_once import (
    DRIVER,
    FILES,
    Driver,
    batch_ids,
    create_tables,
    expected_rows,
    kill_session,
    session_pids,
    source_rows,
)

import strata
from strata.fs.s3 import S3FileIO
from strata_platform.services import kafka as broker
from strata_platform.services.base import Service
from strata_platform.services.spark_cluster import SparkClusterService, executor_pids, master_url

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark_cluster, pytest.mark.minio, pytest.mark.postgres]

SCHEMA = pa.schema([("id", pa.int64()), ("grp", pa.int64()), ("v", pa.string())])
DRIVER_KILLS = 2


@pytest.fixture
def catalog_options(minio: Service, postgres: Service) -> Iterator[dict[str, str]]:
    """Options of a JDBC catalog on PostgreSQL with its warehouse on MinIO, private to the test."""
    env = minio.client_env()
    options = {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"],
               "catalog-key": f"cl_{uuid.uuid4().hex[:10]}", "s3.conditional-put": "false",
               "commit.lock-free": "false", "s3.endpoint": env["AWS_ENDPOINT_URL"],
               "s3.access-key": env["AWS_ACCESS_KEY_ID"], "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"],
               "s3.region": env["AWS_REGION"]}
    warehouse = f"s3://warehouse/it-cluster-{uuid.uuid4().hex[:10]}"
    yield {"warehouse": warehouse, **options}
    S3FileIO(options).delete_dir(warehouse)


@pytest.fixture
def catalog(catalog_options: dict[str, str]) -> strata.Catalog:
    options = dict(catalog_options)
    cat = strata.load_catalog(options.pop("warehouse"), **options)
    cat.create_database("db")
    return cat


def spark_options(catalog_options: dict[str, str]) -> dict[str, str]:
    """The data source's options that name the catalog (everything but the warehouse)."""
    return {f"catalog.{k}": v for k, v in catalog_options.items() if k != "warehouse"}


def path(catalog_options: dict[str, str], table: str) -> str:
    return f"{catalog_options['warehouse']}#{table}"


def rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "grp": pa.array([i % 5 for i in ids], pa.int64()),
                     "v": [f"{tag}{i}" for i in ids]})


def test_executors_are_remote_processes_on_both_workers(cluster_session: SparkSession) -> None:
    pids = executor_pids(cluster_session)
    assert os.getpid() not in pids and len(pids) == 2
    executors = cluster_session.sparkContext._jsc.sc().getExecutorMemoryStatus().size()  # type: ignore[union-attr]
    assert executors == 3  # the driver's block manager and one executor per worker


def test_batch_write_and_read(cluster_session: SparkSession, catalog: strata.Catalog,
                              catalog_options: dict[str, str]) -> None:
    from strata.spark import write_table

    catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "4"})
    options = spark_options(catalog_options)
    target = path(catalog_options, "db.pk")
    write_table(cluster_session.createDataFrame(rows(range(0, 400), "a").to_pandas()), target, **options)
    write_table(cluster_session.createDataFrame(rows(range(200, 600), "b").to_pandas()), target, **options)

    read = cluster_session.read.format("strata").options(**options).load(target)
    got = sorted((r.id, r.grp, r.v) for r in read.collect())
    assert got == [(i, i % 5, ("a" if i < 200 else "b") + str(i)) for i in range(600)]
    filtered = read.where("grp = 3 AND id < 300").collect()
    assert sorted(r.id for r in filtered) == [i for i in range(300) if i % 5 == 3]
    table = catalog.get_table("db.pk")
    assert len(table.snapshots()) == 2
    assert table.to_arrow().num_rows == 600  # Strata reads what the executors wrote


def write_source(catalog: strata.Catalog) -> strata.Table:
    """The streaming source: an append table with one snapshot (one file) per planned batch."""
    source = catalog.create_table("db.src", pa.schema([("id", pa.int64()), ("key", pa.int64()),
                                                       ("grp", pa.int64()), ("v", pa.string())]))
    for file_no in range(FILES):
        source.write(source_rows(file_no))
    return source


def start_stream(spark: SparkSession, catalog_options: dict[str, str], checkpoints: Path,
                 name: str, columns: list[str], **trigger: Any) -> Any:
    options = spark_options(catalog_options)
    stream = (spark.readStream.format("strata").options(**options).option("scan.mode", "from-snapshot")
              .option("scan.snapshot-id", "1").option("max-files-per-trigger", "1")
              .load(path(catalog_options, "db.src")))
    return (stream.selectExpr(*columns).writeStream.format("strata").options(**options).queryName(name)
            .option("checkpointLocation", str(checkpoints / name)).trigger(**trigger)
            .start(path(catalog_options, f"db.{name}")))


QUERIES = {"pk": ["key AS id", "id AS last_id", "v"], "log": ["id", "key", "v"],
           "agg": ["grp", "id AS total", "CAST(1 AS bigint) AS n"]}


def assert_tables_equal_model(tables: dict[str, strata.Table], checkpoints: Path) -> None:
    model = expected_rows()
    assert tables["log"].to_arrow().sort_by("id").to_pylist() == model["log"]  # no loss, no duplicate
    assert tables["pk"].to_arrow().sort_by("id").to_pylist() == model["pk"]
    assert tables["agg"].to_arrow().sort_by("grp").to_pylist() == model["agg"]
    for name, table in tables.items():
        batches = batch_ids(checkpoints / name / "commits")
        assert [s.commit_identifier for s in table.snapshots()] == sorted(batches), name


def test_streaming_read_into_sink_exactly_once_across_restart(
        cluster_session: SparkSession, catalog: strata.Catalog, catalog_options: dict[str, str],
        tmp_path: Path) -> None:
    source = write_source(catalog)
    tables = create_tables(catalog)
    checkpoints = tmp_path / "checkpoints"
    query = start_stream(cluster_session, catalog_options, checkpoints, "log", QUERIES["log"], availableNow=True)
    query.awaitTermination(300)
    assert query.exception() is None
    first = tables["log"].to_arrow().num_rows
    assert first == FILES * source_rows(0).num_rows

    more = pa.table({"id": [10_000, 10_001], "key": [1, 2], "grp": [0, 1], "v": ["x", "y"]})
    source.write(more)
    query = start_stream(cluster_session, catalog_options, checkpoints, "log", QUERIES["log"], availableNow=True)
    query.awaitTermination(300)
    assert query.exception() is None
    log = tables["log"].to_arrow().sort_by("id")
    assert log.num_rows == first + 2  # the restart read only the new snapshot
    assert log.column("id").to_pylist()[-2:] == [10_000, 10_001]
    assert len(tables["log"].snapshots()) == FILES + 1  # one snapshot per micro-batch, none twice


def test_worker_killed_between_micro_batches(cluster_session: SparkSession, spark_cluster: Service,
                                             catalog: strata.Catalog, catalog_options: dict[str, str],
                                             tmp_path: Path) -> None:
    assert isinstance(spark_cluster, SparkClusterService)
    write_source(catalog)
    tables = create_tables(catalog)
    checkpoints = tmp_path / "checkpoints"
    queries = [start_stream(cluster_session, catalog_options, checkpoints, name, columns, availableNow=True)
               for name, columns in QUERIES.items()]
    victim = spark_cluster.workers[0]
    try:
        deadline = time.monotonic() + 240
        while sum(t.snapshot_manager.latest_id() or 0 for t in tables.values()) < 3:
            assert time.monotonic() < deadline, "no micro-batch committed within 240 s"
            time.sleep(0.1)
        killed = spark_cluster.kill_worker(victim)
        at_kill = {n: t.snapshot_manager.latest_id() or 0 for n, t in tables.items()}
        for query in queries:
            query.awaitTermination(400)
            assert query.exception() is None, query.exception()
    finally:
        spark_cluster.start_worker(victim)
    print(f"\nkilled {victim} ({killed} processes) at snapshots {at_kill}")
    assert killed >= 2  # the worker and at least its executor
    assert any(n < FILES for n in at_kill.values()), "the kill came after the last batch"
    assert_tables_equal_model(tables, checkpoints)


# a killed driver may die holding a table's commit lock (the test kills it as soon as a snapshot
# appears, before the release); the next driver takes the lease over once it expires
DRIVER_LOCK_EXPIRY = "10 s"


def start_driver(catalog_options: dict[str, str], checkpoints: Path, log: Path, files_per_trigger: int = 1) -> Driver:
    options = {**catalog_options, "lock.expire-time": DRIVER_LOCK_EXPIRY}
    catalog_args = [arg for k, v in options.items() if k != "warehouse" for arg in ("--catalog", f"{k}={v}")]
    process = subprocess.Popen(
        [sys.executable, str(DRIVER), "--warehouse", catalog_options["warehouse"], "--source-table", "db.src",
         "--checkpoints", str(checkpoints), "--master", master_url(), "--files-per-trigger", str(files_per_trigger),
         *catalog_args],
        stdout=subprocess.PIPE, stderr=log.open("ab"), text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True)
    started = threading.Event()
    lines: list[str] = []

    def follow() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.strip())
            if line.startswith("STARTED"):
                started.set()

    threading.Thread(target=follow, daemon=True).start()
    return Driver(process, started, lines)


# a line that names an exception (not a stack frame): Spark logs the cause before its frames
EXCEPTION_LINE = re.compile(r"(Exception|Error|Caused by|Lost task)\b")


def driver_report(driver: Driver, log: Path, first: int = 12, tail: int = 1500) -> str:
    """What a failed driver left: its exit code, stdout, the first lines of its log that name an
    exception (the root cause; a stack trace's tail only shows frames) and the log's tail."""
    text = log.read_text(errors="replace")
    named = [line[:400] for line in text.splitlines()
             if EXCEPTION_LINE.search(line) and not line.lstrip().startswith("at ")]
    return (f"exit code {driver.process.poll()}, stdout {driver.lines}; log {log.name}, lines naming an "
            f"exception:\n" + "\n".join(named[:first]) + f"\n... log tail:\n{text[-tail:]}")


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    started: list[Driver] = []
    yield started
    for driver in started:
        if driver.process.poll() is None or session_pids(driver.process.pid):
            kill_session(driver.process)


def test_killed_driver_with_remote_executors_restarts_exactly_once(
        spark_cluster: Service, catalog: strata.Catalog, catalog_options: dict[str, str],
        tmp_path: Path, drivers: list[Driver]) -> None:
    # the drivers are the only applications: no session of the test's own (it would only cost its start)
    write_source(catalog)
    tables = create_tables(catalog)
    checkpoints = tmp_path / "checkpoints"
    at_kills = []
    for kill in range(DRIVER_KILLS):
        log = tmp_path / f"driver-{kill}.log"  # one log per driver: a failure shows its own
        driver = start_driver(catalog_options, checkpoints, log)
        drivers.append(driver)
        assert driver.started.wait(240), f"driver never started: {driver_report(driver, log)}"
        before = sum(t.snapshot_manager.latest_id() or 0 for t in tables.values())
        deadline = time.monotonic() + 240
        while sum(t.snapshot_manager.latest_id() or 0 for t in tables.values()) <= before:
            assert driver.process.poll() is None, f"driver exited early: {driver_report(driver, log)}"
            assert time.monotonic() < deadline, "no micro-batch committed within 240 s"
            time.sleep(0.05)
        kill_session(driver.process)
        at_kills.append({n: t.snapshot_manager.latest_id() or 0 for n, t in tables.items()})
    log = tmp_path / "driver-final.log"
    # the replayed batch keeps its logged offsets; the rest drains in fewer, larger batches
    final = start_driver(catalog_options, checkpoints, log, files_per_trigger=4)
    drivers.append(final)
    assert final.process.wait(timeout=400) == 0, f"final run failed: {driver_report(final, log)}"
    print(f"\nsnapshots at the driver kills: {at_kills}")
    assert any(n < FILES for n in at_kills[-1].values()), "the last kill came after the last batch"
    assert_tables_equal_model(tables, checkpoints)


def test_cdc_job_on_the_cluster(cluster_session: SparkSession, kafka: Service, catalog: strata.Catalog,
                                catalog_options: dict[str, str], tmp_path: Path) -> None:
    from strata_platform.cdc.spark_job import SparkCdcJob

    bootstrap = kafka.client_env()["STRATA_KAFKA_BOOTSTRAP"]
    topic = f"it-cdccluster-{uuid.uuid4().hex[:10]}"
    broker.create_topics(bootstrap, {topic: 2})
    try:
        orders = Model("orders")
        for i in range(60):
            orders.insert({"id": i, "name": f"n{i}", "qty": i})
        for i in range(0, 60, 4):
            orders.update(i, qty=1000 + i)
        for i in range(0, 60, 9):
            orders.delete(i)
        send(bootstrap, topic, orders.take())
        options = {k: v for k, v in catalog_options.items() if k != "warehouse"}
        job = SparkCdcJob(cluster_session, bootstrap, [topic], catalog_options["warehouse"], "shop",
                          str(tmp_path / "checkpoint"), table="orders", table_options={"bucket": "2"},
                          catalog_options=options)
        job.run_available_now()
        assert table_rows(catalog.get_table("shop.orders")) == expected(orders)
        orders.update(1, qty=-1)
        orders.delete(2)
        send(bootstrap, topic, orders.take())
        job.run_available_now()  # from the checkpoint: only the new events
    finally:
        broker.delete_topics(bootstrap, [topic])
    assert table_rows(catalog.get_table("shop.orders")) == expected(orders)


# -- distributed compaction ----------------------------------------------------------------------------
BUCKETS = 64
WRITES = 5  # level-0 files per bucket: the default compaction trigger


def live_files(table: strata.Table) -> dict[tuple[bytes, int], list[Any]]:
    files: dict[tuple[bytes, int], list[Any]] = {}
    for entry in table.new_scan().plan_entries():
        files.setdefault((entry.partition, entry.bucket), []).append(entry.file)
    return files


def sorted_runs(files: list[Any]) -> int:
    return sum(f.level == 0 for f in files) + len({f.level for f in files if f.level > 0})


def test_distributed_compaction_of_64_buckets(cluster_session: SparkSession, catalog: strata.Catalog,
                                              catalog_options: dict[str, str]) -> None:
    from strata.spark.compact import compact

    table = catalog.create_table("db.wide", SCHEMA, primary_keys=["id"],
                                 options={"bucket": str(BUCKETS), "write-only": "true"})
    for write in range(WRITES):
        table.write(rows(range(write * 500, write * 500 + 3000), f"w{write}-"))
    before = table.to_arrow().sort_by("id")
    files_before = live_files(table)
    assert len(files_before) == BUCKETS and all(sorted_runs(f) == WRITES for f in files_before.values())
    snapshots_before = len(table.snapshots())

    options = spark_options(catalog_options)
    result = compact(cluster_session, path(catalog_options, "db.wide"), **options)
    assert result.units == BUCKETS and result.tasks > 1 and len(result.executors) == 2
    latest = table.latest_snapshot()
    assert latest is not None and latest.id == result.snapshot_id and latest.commit_kind == "COMPACT"
    assert len(table.snapshots()) == snapshots_before + 1  # every bucket in ONE snapshot
    assert table.to_arrow().sort_by("id").equals(before)
    after = live_files(table)
    assert all(sorted_runs(f) < WRITES for f in after.values())  # below the trigger again

    table.write(rows(range(0, 3000, 2), "late-"))  # one more level-0 file per bucket
    expected_rows = {r["id"]: r for r in before.to_pylist()}
    expected_rows.update({r["id"]: r for r in rows(range(0, 3000, 2), "late-").to_pylist()})
    full = compact(cluster_session, path(catalog_options, "db.wide"), full=True, **options)
    top = table.core.num_levels - 1
    assert full.units == BUCKETS
    assert all(len(f) == 1 and f[0].level == top for f in live_files(table).values())
    assert table.to_arrow().sort_by("id").to_pylist() == sorted(expected_rows.values(), key=lambda r: r["id"])
    nothing = compact(cluster_session, path(catalog_options, "db.wide"), full=True, **options)
    assert nothing.snapshot_id is None and nothing.units == 0


def test_distributed_compaction_conflict_fails_cleanly(cluster_session: SparkSession, catalog: strata.Catalog,
                                                       catalog_options: dict[str, str]) -> None:
    from strata.errors import CommitConflictError
    from strata.spark.compact import commit_once, plan, run_tasks
    from strata.spark.options import TableRef
    from strata.spark.writer import written_paths

    table = catalog.create_table("db.race", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "8", "write-only": "true"})
    for write in range(WRITES):
        table.write(rows(range(write * 100, write * 100 + 400), f"w{write}-"))
    before = table.to_arrow().sort_by("id")
    ref = TableRef(catalog_options["warehouse"], "db.race",
                   tuple(sorted((k, v) for k, v in catalog_options.items() if k != "warehouse")))
    units = plan(table, full=True)
    messages, _tasks, _executors = run_tasks(cluster_session, ref, units, full=True)
    concurrent = table.compact(full=True, commit_user="another-compaction")  # the same files, first
    assert concurrent.snapshot_ids
    latest = table.snapshot_manager.latest_id()

    with pytest.raises(CommitConflictError, match="concurrent"):
        commit_once(table, messages, "strata-spark-compaction")
    assert table.snapshot_manager.latest_id() == latest  # nothing published
    assert not any(table.file_io.exists(p) for p in written_paths(table, messages))  # its files deleted
    assert table.to_arrow().sort_by("id").equals(before)


def test_distributed_append_compaction(cluster_session: SparkSession, catalog: strata.Catalog,
                                       catalog_options: dict[str, str]) -> None:
    from strata.spark.compact import compact

    schema = pa.schema([("dt", pa.string()), *SCHEMA])
    table = catalog.create_table("db.events", schema, partition_keys=["dt"])
    batches = []
    for write in range(6):
        batch = rows(range(write * 100, write * 100 + 100), f"e{write}-")
        batch = batch.add_column(0, "dt", pa.array([f"2026-11-{1 + i % 4:02d}" for i in range(100)]))
        table.write(batch)
        batches.append(batch)
    files_before = sum(len(f) for f in live_files(table).values())
    result = compact(cluster_session, path(catalog_options, "db.events"), full=True,
                     **spark_options(catalog_options))
    assert result.units == 4 and result.files_before == files_before == 24 and result.files_after == 4
    assert table.latest_snapshot().commit_kind == "COMPACT"  # type: ignore[union-attr]
    assert sum(len(f) for f in live_files(table).values()) == 4
    assert table.to_arrow().sort_by("id").equals(pa.concat_tables(batches).sort_by("id"))


def test_compaction_service_in_spark_mode(cluster_session: SparkSession, catalog: strata.Catalog,
                                          catalog_options: dict[str, str]) -> None:
    """The compaction service's round with STRATA_COMPACTION_MODE=spark: each table compacted by
    the Spark job on the cluster, one COMPACT snapshot per table."""
    from strata_platform.serve import Stopper, compact_all, spark_compactor

    options = {k: v for k, v in catalog_options.items() if k != "warehouse"}
    env = {"STRATA_WAREHOUSE": catalog_options["warehouse"],
           "STRATA_CATALOG_OPTIONS": ",".join(f"{k}={v}" for k, v in options.items())}
    tables = [catalog.create_table(f"db.s{i}", SCHEMA, primary_keys=["id"],
                                   options={"bucket": "4", "write-only": "true"}) for i in range(2)]
    for table in tables:
        for write in range(WRITES):
            table.write(rows(range(write * 50, write * 50 + 200), f"w{write}-"))
    before = [t.to_arrow().sort_by("id") for t in tables]
    made = compact_all(catalog, ["db"], True, "strata-compaction", Stopper(),
                       spark_compactor(env, cluster_session))
    assert made == 2
    for table, rows_before in zip(tables, before, strict=True):
        latest = table.latest_snapshot()
        assert latest is not None and latest.commit_kind == "COMPACT" and latest.commit_user == "strata-compaction"
        assert all(len(files) == 1 for files in live_files(table).values())
        assert table.to_arrow().sort_by("id").equals(rows_before)
