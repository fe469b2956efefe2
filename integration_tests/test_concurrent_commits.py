"""Concurrent writer processes appending to one table on MinIO: every commit lands exactly once.

Publishing ``snapshot-N`` on an object store is made safe either by the JDBC (PostgreSQL) lock
around check-then-put (the store's conditional PUT switched off, so the lock alone decides), or
lock-free by the conditional PUT (``If-None-Match: *``). Each mode prints its commit throughput.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

pytestmark = [pytest.mark.minio, pytest.mark.postgres]

WRITERS = 4
COMMITS = 20
ROWS = 50
SCHEMA = pa.schema([("writer", pa.int32()), ("seq", pa.int32()), ("k", pa.int32()), ("payload", pa.string())])
TABLE_OPTIONS = {"write-only": "true", "commit.max-retries": "200", "commit.max-retry-wait": "500 ms"}

MODES = {
    # the lock alone: check-then-put, conditional PUT off
    "jdbc-lock": {"s3.conditional-put": "false", "commit.lock-free": "false"},
    # no lock: the conditional PUT decides
    "conditional-put": {"s3.conditional-put": "auto", "commit.lock-free": "true"},
}


def batch(writer: int, seq: int) -> pa.Table:
    return pa.table({"writer": pa.array([writer] * ROWS, pa.int32()), "seq": pa.array([seq] * ROWS, pa.int32()),
                     "k": pa.array(range(ROWS), pa.int32()), "payload": [f"w{writer}-s{seq}-{k}" for k in range(ROWS)]},
                    schema=SCHEMA)


def writer_process(warehouse: str, options: dict[str, str], writer: int, start: Any, out: Any) -> None:
    """One writer: its own catalog and connections; COMMITS streaming commits (identifier = seq)."""
    try:
        table = strata.load_catalog(warehouse, **options).get_table("db.events")
        start.wait(timeout=120)
        began = time.monotonic()
        attempts = 0
        for seq in range(1, COMMITS + 1):
            result = table.write(batch(writer, seq), commit_user=f"writer-{writer}", identifier=seq)
            assert len(result.snapshot_ids) == 1, result
            attempts += result.attempts
        out.put((writer, "ok", attempts, time.monotonic() - began))
    except BaseException as exc:
        out.put((writer, "error", repr(exc), 0.0))
        raise


@pytest.mark.parametrize("mode", list(MODES))
def test_concurrent_writer_processes(mode: str, minio: Service, postgres: Service,
                                     record_property: Callable[[str, object], None]) -> None:
    env = minio.client_env()
    warehouse = f"s3://warehouse/it-concurrent-{uuid.uuid4().hex[:10]}"
    options = {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"],
               "catalog-key": f"cc_{uuid.uuid4().hex[:10]}", "lock-check-max-sleep": "100 ms",
               "s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
               "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"], **MODES[mode]}
    catalog = strata.load_catalog(warehouse, **options)
    catalog.create_database("db")
    table = catalog.create_table("db.events", SCHEMA, options=TABLE_OPTIONS)
    expected_mode = "lock" if mode == "jdbc-lock" else "atomic"
    assert catalog.publish_mode(table) == expected_mode  # type: ignore[attr-defined]

    ctx = mp.get_context("spawn")  # no fork: boto3, pyarrow's S3 and the DB pools are not fork-safe
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer_process, args=(warehouse, options, w, start, out)) for w in range(WRITERS)]
    try:
        for p in procs:
            p.start()
        time.sleep(0.5)
        began = time.monotonic()
        start.set()
        reports = [out.get(timeout=150) for _ in procs]
        elapsed = time.monotonic() - began
        for p in procs:
            p.join(timeout=30)
        errors = [r for r in reports if r[1] != "ok"]
        assert not errors, errors
        assert all(p.exitcode == 0 for p in procs)

        total = WRITERS * COMMITS
        attempts = sum(r[2] for r in reports)
        rate = total / elapsed
        print(f"\n{mode}: {WRITERS} processes x {COMMITS} commits in {elapsed:.1f} s = {rate:.1f} commits/s, "
              f"{attempts} publish attempts ({attempts - total} lost races retried)")
        record_property(f"{mode}_commits_per_second", round(rate, 2))
        record_property(f"{mode}_attempts", attempts)

        # snapshot ids are continuous, and every (writer, identifier) appears exactly once
        snapshots = strata.load_catalog(warehouse, **options).get_table("db.events").snapshots()
        assert [s.id for s in snapshots] == list(range(1, total + 1))
        commits = Counter((s.commit_user, s.commit_identifier) for s in snapshots)
        assert commits == Counter({(f"writer-{w}", seq): 1 for w in range(WRITERS) for seq in range(1, COMMITS + 1)})
        assert all(s.commit_kind == "APPEND" for s in snapshots)
        assert [s.total_record_count for s in snapshots] == [ROWS * i for i in range(1, total + 1)]

        # and so is every row
        data = table.to_arrow()
        assert data.num_rows == total * ROWS
        keys = Counter(zip(data.column("writer").to_pylist(), data.column("seq").to_pylist(),
                           data.column("k").to_pylist(), strict=True))
        assert len(keys) == total * ROWS and max(keys.values()) == 1
        assert set(keys) == {(w, s, k) for w in range(WRITERS) for s in range(1, COMMITS + 1) for k in range(ROWS)}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        S3FileIO(options).delete_dir(warehouse)
