"""Strata's services, one per container: ``python -m strata_platform.serve ROLE``.

Roles (the strata image's entrypoint is this module; the role is the container's command):

``init``         one-shot: wait for the object store and the catalog, create the warehouse bucket
                 (S3 warehouses) and the databases in ``STRATA_DATABASES``; exit 0.
``ingest``       the streaming ingest job on Spark: a ``rate`` stream of demo events written to an
                 append table with the ``strata`` sink (exactly-once: one snapshot per micro-batch,
                 replayed batches skipped; the checkpoint lives in ``STRATA_CHECKPOINT_DIR``).
``compaction``   the dedicated compaction service: ``Table.compact`` for every table, every
                 ``STRATA_COMPACTION_INTERVAL_SECONDS``; ``STRATA_COMPACTION_MODE=spark`` runs it
                 as a Spark job on ``STRATA_SPARK_MASTER`` (``strata.spark.compact``).
``cdc``          CDC sync: debezium-json / canal-json topics from Kafka into tables
                 (``strata_platform.cdc``), exactly-once by the offsets stored in the snapshots.
``exporter``     the table-health metrics exporter (``strata_platform.metrics_exporter``).
``metaservice``  lineage and consistent snapshot sets over HTTP (``strata_platform.metaservice``;
                 its API and /metrics on METRICS_PORT, default 19191).
``spark-master`` / ``spark-worker``
                 a Spark standalone cluster for the ingest job (``STRATA_SPARK_MASTER`` =
                 ``spark://host:port``; unset, the job runs Spark in local mode): the master on
                 ``SPARK_LOCAL_IP``:``STRATA_SPARK_MASTER_PORT`` (17077, web UI 17080), a worker
                 with ``STRATA_SPARK_WORKER_CORES`` / ``_MEMORY`` / ``_WORK_DIR`` / ``_UI_PORT``.
``demo-events``  demo data: debezium-json change events of a ``customers`` table into Kafka.
``health``       exit 0 if this container's /metrics answers (for health checks and probes).

Configuration comes only from environment variables (and files they name); nothing is read from
the image. Secrets may come from mounted files: ``STRATA_JDBC_PASSWORD_FILE=/run/secrets/pg`` is
read into ``STRATA_JDBC_PASSWORD`` when that is unset (likewise ``STRATA_JDBC_USER``,
``STRATA_CATALOG_OPTIONS``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``).

Common: ``STRATA_WAREHOUSE`` (``s3://bucket/path`` or a local path), ``STRATA_CATALOG_OPTIONS``
(``key=value`` pairs separated by commas or newlines), ``STRATA_JDBC_URI`` / ``STRATA_JDBC_USER`` /
``STRATA_JDBC_PASSWORD`` (the JDBC catalog on PostgreSQL: sets ``metastore=jdbc``), the standard
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION`` for S3,
``METRICS_HOST`` (default 127.0.0.1) and ``METRICS_PORT`` (per role: exporter 19187, ingest
19188, compaction 19189, cdc 19190; ``off`` disables), ``STRATA_LOG_LEVEL`` (INFO),
``STRATA_STOP_TIMEOUT_SECONDS`` (20: how long a SIGTERM waits for the current commit).

SIGTERM and SIGINT stop a service gracefully: the micro-batch, compaction or CDC batch in flight
finishes and commits (or, past the stop timeout, is aborted: its files are deleted and nothing is
published, so the next start redoes it), then the process exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from strata_platform.service_config import (  # the services' shared configuration
    Stopper,
    catalog_options,
    env_bool,
    env_float,
    load_secret_files,
    pairs,
    warehouse,
)
from strata_platform.service_config import read_token as read_token  # noqa: PLC0414 (older import path)
from strata_platform.service_config import s3_settings as s3_settings  # noqa: PLC0414 (older import path)

log = logging.getLogger("strata.serve")

ROLE_PORTS = {"exporter": 19187, "ingest": 19188, "compaction": 19189, "cdc": 19190, "metaservice": 19191}


# -- configuration ------------------------------------------------------------------------------
def metrics_address(env: Mapping[str, str], role: str) -> tuple[str, int] | None:
    raw = env.get("METRICS_PORT", "").strip().lower()
    if raw in ("off", "none", "disabled"):
        return None
    port = int(raw) if raw else ROLE_PORTS.get(role, 0)
    if not port and role not in ROLE_PORTS:
        return None
    return env.get("METRICS_HOST", "127.0.0.1"), port


def load_catalog(env: Mapping[str, str]) -> Any:
    import strata

    return strata.load_catalog(warehouse(env), **catalog_options(env))


def serve_metrics(env: Mapping[str, str], role: str) -> Any:
    address = metrics_address(env, role)
    if address is None:
        return None
    from strata.metrics import serve_metrics as start

    server = start(address[1], host=address[0])
    log.info("metrics on http://%s:%d/metrics", address[0], server.server_port)
    return server


def retry(what: str, action: Callable[[], Any], timeout: float, stopper: Stopper | None = None) -> Any:
    """Call `action` until it succeeds or `timeout` passes (services start in any order)."""
    deadline = time.monotonic() + timeout
    delay = 0.5
    while True:
        try:
            return action()
        except Exception as exc:
            if time.monotonic() + delay > deadline or (stopper is not None and stopper.stopping):
                raise
            log.info("%s not ready yet (%s: %s); retrying", what, type(exc).__name__, str(exc)[:200])
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


# -- init -----------------------------------------------------------------------------------------
def ensure_bucket(env: Mapping[str, str], bucket: str) -> bool:
    """Create the S3 bucket if it does not exist; True if created."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError

    options = catalog_options(env)
    client = boto3.client(
        "s3", endpoint_url=options.get("s3.endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        aws_access_key_id=options.get("s3.access-key") or env.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=options.get("s3.secret-key") or env.get("AWS_SECRET_ACCESS_KEY"),
        region_name=options.get("s3.region") or env.get("AWS_REGION") or "us-east-1",
        config=Config(s3={"addressing_style": "path"}, connect_timeout=5, read_timeout=30,
                      retries={"max_attempts": 2}))
    try:
        client.head_bucket(Bucket=bucket)
        return False
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
            raise
    try:
        client.create_bucket(Bucket=bucket)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    return True


def run_init(env: Mapping[str, str], stopper: Stopper) -> int:
    timeout = env_float(env, "STRATA_INIT_TIMEOUT_SECONDS", 180.0)
    wh = warehouse(env)
    if wh.startswith(("s3://", "s3a://")):
        bucket = wh.split("://", 1)[1].split("/", 1)[0]
        created = retry(f"object store (bucket {bucket})", lambda: ensure_bucket(env, bucket), timeout, stopper)
        log.info("bucket %s %s", bucket, "created" if created else "exists")
    catalog = retry("catalog", lambda: load_catalog(env), timeout, stopper)
    databases = [d.strip() for d in env.get("STRATA_DATABASES", "demo").split(",") if d.strip()]
    for database in databases:
        def create(db: str = database) -> None:
            catalog.create_database(db, ignore_if_exists=True)

        retry(f"database {database}", create, timeout, stopper)
    print(f"strata init done: warehouse {wh}, databases {', '.join(databases) or '-'}", flush=True)
    return 0


# -- ingest (Spark) -------------------------------------------------------------------------------
INGEST_COLUMNS = ("id", "event_time", "customer", "amount")


def ingest_schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("event_time", pa.timestamp("us")),
                      pa.field("customer", pa.string()), pa.field("amount", pa.float64())])


def spark_conf(env: Mapping[str, str]) -> dict[str, str]:
    host = env.get("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.host": host,
        "spark.driver.bindAddress": host,
        "spark.driver.memory": env.get("STRATA_SPARK_DRIVER_MEMORY", "512m"),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.warehouse.dir": "/tmp/spark-warehouse",
        "spark.sql.streaming.stopTimeout": str(int(env_float(env, "STRATA_STOP_TIMEOUT_SECONDS", 20.0) * 1000)),
    }
    if env.get("STRATA_SPARK_UI_PORT"):
        conf.update({"spark.ui.enabled": "true", "spark.ui.port": env["STRATA_SPARK_UI_PORT"]})
    conf.update(pairs(env.get("STRATA_SPARK_CONF")))
    return conf


def start_spark(env: Mapping[str, str], app_name: str) -> Any:
    """A SparkSession on ``STRATA_SPARK_MASTER`` (local[2] by default) with the strata source."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from strata.spark import register

    master = env.get("STRATA_SPARK_MASTER", "local[2]")
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in spark_conf(env).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(env.get("STRATA_SPARK_LOG_LEVEL", "WARN"))
    register(spark)
    return spark


def run_ingest(env: Mapping[str, str], stopper: Stopper) -> int:
    table_name = env.get("STRATA_INGEST_TABLE", "demo.events")
    rows_per_second = int(env_float(env, "STRATA_INGEST_ROWS_PER_SECOND", 20))
    trigger = env_float(env, "STRATA_INGEST_TRIGGER_SECONDS", 5.0)
    checkpoint = env.get("STRATA_CHECKPOINT_DIR") or f"/var/lib/strata/checkpoints/{table_name}"
    stop_timeout = env_float(env, "STRATA_STOP_TIMEOUT_SECONDS", 20.0)
    catalog = retry("catalog", lambda: load_catalog(env), env_float(env, "STRATA_INIT_TIMEOUT_SECONDS", 180.0),
                    stopper)
    database = table_name.split(".", 1)[0]
    catalog.create_database(database, ignore_if_exists=True)
    # Iceberg metadata by default: the stack's Trino reads the ingested rows through the REST catalog
    options = pairs(env.get("STRATA_INGEST_TABLE_OPTIONS", "metadata.iceberg.storage=rest-catalog"))
    catalog.create_table(table_name, ingest_schema(), options=options, ignore_if_exists=True)
    if stopper.stopping:
        return 0
    spark = start_spark(env, f"strata-ingest-{table_name}")
    server = serve_metrics(env, "ingest")
    try:
        stream = (spark.readStream.format("rate").option("rowsPerSecond", rows_per_second).load()
                  .selectExpr("value AS id", "CAST(timestamp AS TIMESTAMP_NTZ) AS event_time",
                              "concat('customer-', CAST(value % 97 AS STRING)) AS customer",
                              "CAST((value * 37) % 10000 AS DOUBLE) / 100 AS amount"))
        writer = stream.writeStream.format("strata").option("checkpointLocation", checkpoint)
        for key, value in catalog_options(env).items():
            writer = writer.option(f"catalog.{key}", value)
        query = writer.trigger(processingTime=f"{trigger:g} seconds").start(f"{warehouse(env)}#{table_name}")
        print(f"strata ingest ready: {rows_per_second} rows/s into {table_name} every {trigger:g}s "
              f"(checkpoint {checkpoint})", flush=True)
        while not stopper.wait(1.0):
            if not query.isActive:
                error = query.exception()
                log.error("the streaming query stopped: %s", error)
                return 1
        stop_gracefully(query, stop_timeout)
        last = query.lastProgress
        print(f"strata ingest stopped after batch {last['batchId'] if last else '-'}", flush=True)
        return 0
    finally:
        spark.stop()
        if server is not None:
            server.shutdown()


def stop_gracefully(query: Any, timeout: float) -> None:
    """Let the micro-batch in flight commit, then stop the query.

    A batch is in flight while the trigger is active; it has committed once ``lastProgress`` names
    a newer batch. Batches may follow each other back to back, so waiting for an idle trigger
    could take forever: wait for the batch in flight to finish (at most `timeout`), then stop at
    once. A batch that started meanwhile is interrupted and aborted (its files are deleted, nothing
    is published) and runs again, with the same id and offsets, when the job restarts.
    """
    def last_batch() -> int:
        progress = query.lastProgress
        return int(progress["batchId"]) if progress else -1

    if query.isActive and query.status.get("isTriggerActive"):
        in_flight_after = last_batch()
        deadline = time.monotonic() + timeout
        while (query.isActive and time.monotonic() < deadline and last_batch() == in_flight_after
               and query.status.get("isTriggerActive")):
            time.sleep(0.05)
    query.stop()


# -- compaction -----------------------------------------------------------------------------------
def run_compaction(env: Mapping[str, str], stopper: Stopper) -> int:
    interval = env_float(env, "STRATA_COMPACTION_INTERVAL_SECONDS", 60.0)
    full = env_bool(env, "STRATA_COMPACTION_FULL", False)
    only = [d.strip() for d in env.get("STRATA_COMPACTION_DATABASES", "").split(",") if d.strip()]
    # a commit user of this run's own (as Paimon's compaction jobs): two services never share one
    user = f"{env.get('STRATA_COMPACTION_COMMIT_USER', 'strata-compaction')}-{uuid.uuid4().hex[:12]}"
    catalog = retry("catalog", lambda: load_catalog(env), env_float(env, "STRATA_INIT_TIMEOUT_SECONDS", 180.0),
                    stopper)
    mode = env.get("STRATA_COMPACTION_MODE", "local")
    if mode not in ("local", "spark"):
        raise SystemExit(f"STRATA_COMPACTION_MODE must be local or spark, got {mode!r}")
    spark = start_spark(env, "strata-compaction") if mode == "spark" else None
    compactor = spark_compactor(env, spark) if spark is not None else None
    server = serve_metrics(env, "compaction")
    print(f"strata compaction ready: every {interval:g}s, {'full' if full else 'universal'} compaction "
          f"({mode}), databases {', '.join(only) or 'all'}", flush=True)
    try:
        while not stopper.stopping:
            compact_all(catalog, only, full, user, stopper, compactor)
            stopper.wait(interval)
    finally:
        if server is not None:
            server.shutdown()
        if spark is not None:
            spark.stop()
    print("strata compaction stopped", flush=True)
    return 0


def spark_compactor(env: Mapping[str, str], spark: Any) -> Callable[[Any, bool, str], list[int]]:
    """Compaction as a Spark job (``strata.spark.compact``): planned here, run on the executors,
    committed once; returns the snapshot made, if any."""
    from strata.spark.compact import compact

    options = {f"catalog.{k}": v for k, v in catalog_options(env).items()}

    def run(table: Any, full: bool, user: str) -> list[int]:
        result = compact(spark, f"{warehouse(env)}#{table.identifier}", full, None, None, user, **options)
        return [result.snapshot_id] if result.snapshot_id is not None else []

    return run


def compact_all(catalog: Any, databases: list[str], full: bool, user: str, stopper: Stopper,
                compactor: Callable[[Any, bool, str], list[int]] | None = None) -> int:
    """One round: compact every table (the one in flight finishes on SIGTERM), in this process
    or with `compactor` (the Spark job); returns snapshots made."""
    made = 0
    try:
        names = [f"{db}.{t}" for db in (databases or catalog.list_databases()) for t in catalog.list_tables(db)]
    except Exception:
        log.exception("cannot list the tables")
        return 0
    for name in names:
        if stopper.stopping:
            break
        try:
            table = catalog.get_table(name)
            latest = table.latest_snapshot()
            if latest is None or latest.commit_user == user:
                continue  # empty, or nothing new since our own last compaction
            began = time.monotonic()
            snapshot_ids = compactor(table, full, user) if compactor is not None \
                else table.compact(full=full, commit_user=user).snapshot_ids
            if snapshot_ids:
                made += len(snapshot_ids)
                log.info("compacted %s -> snapshot %s in %.1fs", name, snapshot_ids, time.monotonic() - began)
        except Exception:  # a conflict with a writer, a dropped table: next round
            log.exception("compaction of %s failed", name)
    return made


# -- CDC ------------------------------------------------------------------------------------------
def ensure_topics(bootstrap: str, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    existing = admin.list_topics(timeout=10).topics
    missing = [t for t in topics if t not in existing]
    if not missing:
        return
    futures = admin.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1) for t in missing],
                                  operation_timeout=30)
    for topic, future in futures.items():
        try:
            future.result(30)
            log.info("created topic %s (%d partitions)", topic, partitions)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise


def run_cdc(env: Mapping[str, str], stopper: Stopper) -> int:
    from strata_platform.cdc.job import CdcJob

    bootstrap = env.get("STRATA_CDC_BOOTSTRAP") or env.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:19092"
    topics = [t.strip() for t in env.get("STRATA_CDC_TOPICS", "").split(",") if t.strip()]
    if not topics:
        raise SystemExit("STRATA_CDC_TOPICS is not set")
    timeout = env_float(env, "STRATA_INIT_TIMEOUT_SECONDS", 180.0)
    if env_bool(env, "STRATA_CDC_CREATE_TOPICS", True):
        partitions = int(env_float(env, "STRATA_CDC_TOPIC_PARTITIONS", 1))
        retry("kafka", lambda: ensure_topics(bootstrap, topics, partitions), timeout, stopper)
    keys = [k.strip() for k in env.get("STRATA_CDC_PRIMARY_KEYS", "").split(",") if k.strip()]

    def make_job() -> CdcJob:
        job = CdcJob(bootstrap, topics, warehouse(env), env.get("STRATA_CDC_DATABASE", "cdc"),
                     fmt=env.get("STRATA_CDC_FORMAT", "debezium-json"), table=env.get("STRATA_CDC_TABLE") or None,
                     primary_keys=keys or None, table_options=pairs(env.get("STRATA_CDC_TABLE_OPTIONS")),
                     name=env.get("STRATA_CDC_NAME", "cdc"),
                     batch_size=int(env_float(env, "STRATA_CDC_BATCH_SIZE", 10_000)),
                     catalog_options=catalog_options(env))
        job._open()  # resume positions from the tables; fails while a topic is missing
        return job

    job = retry("kafka and catalog", make_job, timeout, stopper)
    server = serve_metrics(env, "cdc")
    print(f"strata cdc ready: {', '.join(topics)} -> database {job.database}", flush=True)
    try:
        while not stopper.stopping:
            # one batch at a time: a SIGTERM lets the batch in flight commit, then stops
            job.run(until_idle=1.0, max_batches=job.stats.batches + 1)
    finally:
        job.close()
        if server is not None:
            server.shutdown()
    stats = job.stats
    print(f"strata cdc stopped: {stats.batches} batches, {stats.events} events, {stats.commits} commits",
          flush=True)
    return 0


# -- exporter -------------------------------------------------------------------------------------
def run_exporter(env: Mapping[str, str], stopper: Stopper) -> int:
    from strata_platform import metrics_exporter

    argv = ["--warehouse", warehouse(env)]
    for key, value in catalog_options(env).items():
        argv += ["--option", f"{key}={value}"]
    address = metrics_address(env, "exporter")
    if address is not None:
        argv += ["--host", address[0], "--port", str(address[1])]
    # the exporter installs its own SIGTERM handler and exits 0 on it
    return metrics_exporter.main(argv)


# -- metaservice ---------------------------------------------------------------------------------------
def run_metaservice(env: Mapping[str, str], stopper: Stopper) -> int:
    from strata_platform import metaservice

    # reads the same environment; installs its own SIGTERM handler and exits 0 on it
    return metaservice.main([])


# -- demo events ----------------------------------------------------------------------------------
def run_demo_events(env: Mapping[str, str], stopper: Stopper) -> int:
    """Debezium-json change events of ``shop.customers`` (inserts, updates, deletes) into Kafka."""
    from confluent_kafka import Producer

    bootstrap = env.get("STRATA_CDC_BOOTSTRAP") or env.get("KAFKA_BOOTSTRAP_SERVERS") or "127.0.0.1:19092"
    topic = env.get("STRATA_DEMO_TOPIC", "demo.shop.customers")
    rate = env_float(env, "STRATA_DEMO_EVENTS_PER_SECOND", 5.0)
    keys = int(env_float(env, "STRATA_DEMO_CUSTOMERS", 500))
    retry("kafka", lambda: ensure_topics(bootstrap, [topic], 1), env_float(env, "STRATA_INIT_TIMEOUT_SECONDS", 180.0),
          stopper)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 50, "log_level": 3})
    rng = random.Random()
    rows: dict[int, dict[str, Any]] = {}
    source = {"db": "shop", "table": "customers"}
    print(f"strata demo-events ready: {rate:g} events/s into {topic}", flush=True)
    sent = 0
    while not stopper.wait(1.0 / rate if rate > 0 else 1.0):
        i = rng.randrange(keys)
        before = rows.get(i)
        if before is None:
            op, after = "c", {"id": i, "name": f"customer-{i}", "city": rng.choice(CITIES), "visits": 1}
        elif rng.random() < 0.1:
            op, after = "d", None
        else:
            op, after = "u", {**before, "city": rng.choice(CITIES), "visits": before["visits"] + 1}
        if after is None:
            rows.pop(i, None)
        else:
            rows[i] = after
        value = {"before": before, "after": after, "op": op, "source": source, "ts_ms": int(time.time() * 1000)}
        producer.produce(topic, key=json.dumps({"id": i}).encode(), value=json.dumps(value).encode())
        producer.poll(0)
        sent += 1
    producer.flush(30)
    print(f"strata demo-events stopped after {sent} events", flush=True)
    return 0


CITIES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Accra", "Perth", "Quito", "Tartu"]


# -- health ---------------------------------------------------------------------------------------
def run_health(env: Mapping[str, str], role: str | None) -> int:
    address = metrics_address(env, role or "")
    if address is None or not address[1]:
        print("no METRICS_PORT to check", file=sys.stderr)
        return 1
    url = f"http://{address[0]}:{address[1]}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            ok = resp.status == 200
    except OSError as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    return 0 if ok else 1


# -- Spark standalone cluster (the ingest job's executors) -------------------------------------------
def run_spark_master(env: Mapping[str, str], stopper: Stopper) -> int:
    from strata_platform.services.spark_cluster import MASTER_PORT, MASTER_UI_PORT, master_argv

    host = env.get("SPARK_LOCAL_IP", "127.0.0.1")
    return exec_spark_daemon(env, master_argv(host, int(env.get("STRATA_SPARK_MASTER_PORT", MASTER_PORT)),
                                              int(env.get("STRATA_SPARK_MASTER_UI_PORT", MASTER_UI_PORT))))


def run_spark_worker(env: Mapping[str, str], stopper: Stopper) -> int:
    from strata_platform.services.spark_cluster import WORKER_UI_PORTS, worker_argv

    master = env.get("STRATA_SPARK_MASTER", "")
    if not master.startswith("spark://"):
        raise SystemExit(f"spark-worker needs STRATA_SPARK_MASTER=spark://host:port, got {master!r}")
    work_dir = env.get("STRATA_SPARK_WORK_DIR", "/var/lib/strata/spark-work")
    os.makedirs(work_dir, exist_ok=True)
    return exec_spark_daemon(env, worker_argv(
        master, env.get("SPARK_LOCAL_IP", "127.0.0.1"), int(env.get("STRATA_SPARK_WORKER_CORES", "2")),
        env.get("STRATA_SPARK_WORKER_MEMORY", "2g"), work_dir,
        int(env.get("STRATA_SPARK_WORKER_UI_PORT", WORKER_UI_PORTS[0]))))


def exec_spark_daemon(env: Mapping[str, str], argv: list[str]) -> int:
    """Replace this process with the daemon's JVM (signals then reach Spark itself)."""
    from strata_platform.services.spark_cluster import spark_home

    daemon_env = {"SPARK_HOME": str(spark_home()), "SPARK_NO_DAEMONIZE": "1", "SPARK_LOCAL_IP": "127.0.0.1",
                  "PYSPARK_PYTHON": sys.executable, **env}
    os.execvpe(argv[0], argv, daemon_env)
    return 1  # not reached


ROLES: dict[str, Callable[[Mapping[str, str], Stopper], int]] = {
    "init": run_init, "ingest": run_ingest, "compaction": run_compaction, "cdc": run_cdc,
    "exporter": run_exporter, "demo-events": run_demo_events, "metaservice": run_metaservice,
    "spark-master": run_spark_master, "spark-worker": run_spark_worker,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", choices=[*ROLES, "health"])
    parser.add_argument("for_role", nargs="?", help="health: the role whose default METRICS_PORT to check")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    load_secret_files(env)
    for key, value in env.items():  # the libraries (boto3, the S3 FileIO) read the environment
        if os.environ.get(key) != value:
            os.environ[key] = value
    if args.role == "health":
        return run_health(env, args.for_role)
    logging.basicConfig(level=env.get("STRATA_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("py4j", "botocore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    stopper = Stopper().install()
    with contextlib.suppress(KeyboardInterrupt):
        return ROLES[args.role](env, stopper)
    return 0


if __name__ == "__main__":
    sys.exit(main())
