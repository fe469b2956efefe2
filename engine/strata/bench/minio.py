"""Benchmark workloads against MinIO (S3): run only when MinIO is reachable.

Connection from the standard environment (``eval "$(strata-services env minio postgres)"``):
``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``; the bucket is
``STRATA_BENCH_S3_BUCKET`` (default ``warehouse``). Tables use the JDBC catalog with its lock
around the snapshot publish (conditional PUT off, so the lock decides): on PostgreSQL when
``STRATA_PG_DSN`` is set, else on an embedded SQLite file.

MINIO_COMMIT  100 small commits (10 rows each, append table) with the lock: p50 and p99 latency
              of a write-and-commit. reference: the same 10 rows as one Parquet PUT by pyarrow.
W1_minio      W1 with the warehouse on MinIO. reference: pyarrow writing the chunks to MinIO.
W3_minio      W3 (full merged read of the W2 table) on MinIO. reference: pyarrow reading the final
              rows as plain Parquet files from MinIO.
"""

from __future__ import annotations

import os
import statistics
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import strata
from strata.bench import data as gen
from strata.bench.workloads import COMPRESSION, COMPRESSION_LEVEL, READ_RUNS, Timer, _median_time, _warm_up

COMMITS = 100
WARM_COMMITS = 5
COMMIT_ROWS = 10
WORKLOADS = ("MINIO_COMMIT", "W1_minio", "W3_minio")
_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def bucket() -> str:
    return os.environ.get("STRATA_BENCH_S3_BUCKET", "warehouse")


def s3_options() -> dict[str, str]:
    env = os.environ
    return {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env.get("AWS_REGION", "us-east-1")}


def unavailable() -> str | None:
    """Why the MinIO workloads cannot run here, or None if MinIO answers."""
    missing = [name for name in _ENV if not os.environ.get(name)]
    if missing:
        return f"{', '.join(missing)} not set (eval \"$(strata-services env minio postgres)\")"
    try:
        from strata.fs.s3 import S3FileIO

        S3FileIO({**s3_options(), "s3.max-attempts": "1"}).list_status(f"s3://{bucket()}/")
    except Exception as exc:  # unreachable endpoint, bad credentials, missing bucket
        return f"MinIO at {os.environ['AWS_ENDPOINT_URL']} (bucket {bucket()!r}) not reachable: {exc}"
    return None


def _arrow_s3() -> pafs.S3FileSystem:
    scheme, _, host = os.environ["AWS_ENDPOINT_URL"].partition("://")
    return pafs.S3FileSystem(access_key=os.environ["AWS_ACCESS_KEY_ID"], secret_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                             region=os.environ.get("AWS_REGION", "us-east-1"), endpoint_override=host, scheme=scheme)


def _catalog(work_dir: str, prefix: str) -> strata.Catalog:
    """A JDBC catalog on MinIO whose commits publish under the lock (PostgreSQL, else SQLite)."""
    dsn = os.environ.get("STRATA_PG_DSN")
    uri = dsn or f"sqlite:///{os.path.abspath(work_dir)}/bench-catalog-{uuid.uuid4().hex[:8]}.sqlite"
    return strata.load_catalog(f"s3://{bucket()}/{prefix}", metastore="jdbc", uri=uri,
                               **{"catalog-key": f"bench_{uuid.uuid4().hex[:10]}", "s3.conditional-put": "false",
                                  "commit.lock-free": "false", "lock-check-max-sleep": "50 ms", **s3_options()})


def run_prefix(name: str) -> str:
    return f"strata-bench/{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _drop(prefix: str) -> None:
    from strata.fs.s3 import S3FileIO

    S3FileIO(s3_options()).delete_dir(f"s3://{bucket()}/{prefix}")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return float(np.percentile(ordered, q, method="linear"))


def _small_batches() -> list[pa.Table]:
    rng = np.random.default_rng(gen.SEED + 7)
    return [gen.rows_for(np.arange(i * COMMIT_ROWS, (i + 1) * COMMIT_ROWS), rng)
            for i in range(COMMITS + WARM_COMMITS)]


def _latency_result(latencies_ms: list[float], cpu_ms: list[float]) -> dict[str, Any]:
    return {"p50_ms": statistics.median(latencies_ms), "p99_ms": _percentile(latencies_ms, 99),
            "mean_ms": statistics.fmean(latencies_ms), "max_ms": max(latencies_ms), "commits": len(latencies_ms),
            "cpu_ms": statistics.median(cpu_ms), "runs_ms": latencies_ms}


# -- MINIO_COMMIT ---------------------------------------------------------------------------------


def commit_strata(work_dir: str, scale: float) -> dict[str, Any]:
    batches = _small_batches()
    _warm_up(work_dir)
    prefix = run_prefix("commit")
    try:
        catalog = _catalog(work_dir, prefix)
        catalog.create_database("bench")
        table = catalog.create_table("bench.commits", gen.SCHEMA, options={"bucket": "-1"})
        assert catalog.publish_mode(table) == "lock"  # type: ignore[attr-defined]
        walls, cpus = [], []
        for i, batch in enumerate(batches):
            with Timer() as timer:
                table.write(batch)
            if i >= WARM_COMMITS:
                walls.append(timer.wall * 1000)
                cpus.append(timer.cpu * 1000)
        snapshot = table.latest_snapshot()
        assert snapshot is not None and snapshot.id == len(batches), "MINIO_COMMIT lost a commit"
        return {**_latency_result(walls, cpus), "lock": "postgresql" if os.environ.get("STRATA_PG_DSN") else "sqlite"}
    finally:
        _drop(prefix)


def commit_reference(work_dir: str, scale: float) -> dict[str, Any]:
    batches = _small_batches()
    _warm_up(work_dir)
    fs = _arrow_s3()
    prefix = run_prefix("commit-ref")
    try:
        walls, cpus = [], []
        for i, batch in enumerate(batches):
            with Timer() as timer:
                pq.write_table(batch, f"{bucket()}/{prefix}/part-{i:03d}.parquet", filesystem=fs,
                               compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
            if i >= WARM_COMMITS:
                walls.append(timer.wall * 1000)
                cpus.append(timer.cpu * 1000)
        return _latency_result(walls, cpus)
    finally:
        _drop(prefix)


# -- W1_minio ---------------------------------------------------------------------------------------


def w1_strata(work_dir: str, scale: float) -> dict[str, Any]:
    chunks = gen.w1_chunks(scale)
    _warm_up(work_dir)
    prefix = run_prefix("w1")
    try:
        catalog = _catalog(work_dir, prefix)
        catalog.create_database("bench")
        table = catalog.create_table("bench.w1", gen.SCHEMA, partition_keys=["dt"],
                                     options={"bucket": "-1", "file.compression": COMPRESSION,
                                              "file.compression.zstd-level": str(COMPRESSION_LEVEL)})
        table.write(chunks[0].slice(0, 10))  # warm the S3 clients and the lock outside the timing
        with Timer() as timer:
            for chunk in chunks:
                table.write(chunk)
        rows = sum(c.num_rows for c in chunks)
        snapshot = table.latest_snapshot()
        assert snapshot is not None and snapshot.total_record_count == rows + 10, "W1_minio lost rows"
        return {"rows": rows, "seconds": timer.wall, "cpu_seconds": timer.cpu, "commits": len(chunks)}
    finally:
        _drop(prefix)


def w1_reference(work_dir: str, scale: float) -> dict[str, Any]:
    chunks = gen.w1_chunks(scale)
    _warm_up(work_dir)
    fs = _arrow_s3()
    prefix = run_prefix("w1-ref")
    try:
        pq.write_table(chunks[0].slice(0, 10), f"{bucket()}/{prefix}/warm.parquet", filesystem=fs)
        with Timer() as timer:
            for i, chunk in enumerate(chunks):
                pq.write_table(chunk, f"{bucket()}/{prefix}/part-{i:02d}.parquet", filesystem=fs,
                               compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
        return {"rows": sum(c.num_rows for c in chunks), "seconds": timer.wall, "cpu_seconds": timer.cpu}
    finally:
        _drop(prefix)


# -- W3_minio ---------------------------------------------------------------------------------------


def w3_strata(work_dir: str, scale: float) -> dict[str, Any]:
    upserts = gen.w2_data(scale)
    _warm_up(work_dir)
    prefix = run_prefix("w3")
    try:
        catalog = _catalog(work_dir, prefix)
        catalog.create_database("bench")
        table = catalog.create_table("bench.w2", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                     options={"bucket": "1", "file.compression": COMPRESSION,
                                              "file.compression.zstd-level": str(COMPRESSION_LEVEL),
                                              "write-only": "true"})
        table.write(upserts.base)
        for chunk in upserts.commits:
            table.write(chunk)
        table = catalog.get_table("bench.w2")  # a reader's fresh table object
        timing, result = _median_time(table.to_arrow, READ_RUNS)
        files = sum(len(s.files) for s in table.new_scan().plan().splits)
        return {**timing, "files": files, "digest": gen.digest(result)}
    finally:
        _drop(prefix)


def w3_reference(work_dir: str, scale: float) -> dict[str, Any]:
    upserts = gen.w2_data(scale)
    _warm_up(work_dir)
    final = gen.final_rows(upserts)
    fs = _arrow_s3()
    prefix = run_prefix("w3-ref")
    try:
        per = -(-final.num_rows // gen.COMMITS)
        files = [f"{bucket()}/{prefix}/part-{i:02d}.parquet" for i in range(gen.COMMITS)]
        for i, path in enumerate(files):
            pq.write_table(final.slice(i * per, per), path, filesystem=fs, compression=COMPRESSION,
                           compression_level=COMPRESSION_LEVEL)
        timing, result = _median_time(lambda: pq.read_table(files, filesystem=fs), READ_RUNS)
        return {**timing, "digest": gen.digest(result)}
    finally:
        _drop(prefix)


PARTS: dict[tuple[str, str], Callable[[str, float], dict[str, Any]]] = {
    ("MINIO_COMMIT", "strata"): commit_strata, ("MINIO_COMMIT", "reference"): commit_reference,
    ("W1_minio", "strata"): w1_strata, ("W1_minio", "reference"): w1_reference,
    ("W3_minio", "strata"): w3_strata, ("W3_minio", "reference"): w3_reference,
}

