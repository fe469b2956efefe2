"""Concurrent writer processes on one dynamic-bucket table on MinIO, under both safe commit modes
(the JDBC lock, and the conditional PUT without a lock). Writers share a partition and its keys;
a commit whose new keys another writer placed meanwhile, or whose bucket index another writer
replaced, is refused, and the writer retries its batch from the latest snapshot. At the end every
row equals the model (a sequence field orders the writers' rows), and no key sits in two buckets."""

from __future__ import annotations

import multiprocessing as mp
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_concurrent_commits import catalog_options

import strata
from strata.errors import CommitConflictError
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "tests" / "index"))
from dynamic_helpers import check_placement

pytestmark = [pytest.mark.minio, pytest.mark.postgres]

WRITERS, COMMITS = 3, 8
SCHEMA = pa.schema([("p", pa.string()), ("k", pa.int32()), ("ts", pa.int64()), ("v", pa.string())])
OPTIONS = {"dynamic-bucket.target-row-num": "6", "sequence.field": "ts", "write-only": "true",
           "commit.max-retries": "1000", "commit.max-retry-wait": "300 ms"}
Row = tuple[str, int, int, str, str]  # partition, key, ts, value, kind


def batch(writer: int, seq: int) -> list[Row]:
    rng = random.Random(writer * 7919 + seq)
    keys = rng.sample(range(24), 4)  # shared by every writer: a key is often new to two at once
    rows = [("shared", k, time.time_ns(), f"w{writer}s{seq}", "-D" if seq % 5 == 4 and i == 0 else "+I")
            for i, k in enumerate(keys)]
    return [*rows, (f"own{writer}", seq, time.time_ns(), f"w{writer}s{seq}", "+I")]


def writer_process(warehouse: str, options: dict[str, str], writer: int, start: Any, out: Any) -> None:
    try:
        table = strata.load_catalog(warehouse, **options).get_table("db.t")
        start.wait(timeout=300)
        refused, written = 0, []
        for seq in range(1, COMMITS + 1):
            rows = batch(writer, seq)
            data = pa.table({"p": [r[0] for r in rows], "k": pa.array([r[1] for r in rows], pa.int32()),
                             "ts": [r[2] for r in rows], "v": [r[3] for r in rows]}, schema=SCHEMA)
            while True:
                with table.new_write(f"writer-{writer}") as write:  # placement from the latest snapshot
                    write.write_arrow(data, row_kind=[r[4] for r in rows])
                    messages = write.prepare_commit()
                try:
                    table.new_commit(f"writer-{writer}").commit(messages, identifier=seq)
                    break
                except CommitConflictError:
                    refused += 1
            written += rows
        out.put((writer, "ok", refused, written))
    except BaseException as exc:
        out.put((writer, "error", repr(exc), []))
        raise


def model(rows: list[Row]) -> dict[tuple[str, int], str]:
    latest: dict[tuple[str, int], Row] = {}
    for row in rows:
        if (row[0], row[1]) not in latest or latest[(row[0], row[1])][2] < row[2]:
            latest[(row[0], row[1])] = row
    return {key: row[3] for key, row in latest.items() if row[4] != "-D"}


@pytest.mark.parametrize("mode", ["jdbc-lock", "conditional-put"])
def test_concurrent_writers_never_split_a_key(mode: str, minio: Service, postgres: Service) -> None:
    warehouse = f"s3://warehouse/it-dynamic-{uuid.uuid4().hex[:10]}"
    options = catalog_options(mode, minio, postgres)
    catalog = strata.load_catalog(warehouse, **options)
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA, partition_keys=["p"], primary_keys=["p", "k"], options=OPTIONS)
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer_process, args=(warehouse, options, w, start, out)) for w in range(WRITERS)]
    try:
        for p in procs:
            p.start()
        start.set()
        reports = [out.get(timeout=900) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        assert all(r[1] == "ok" for r in reports), reports
        table = strata.load_catalog(warehouse, **options).get_table("db.t")
        got = table.to_arrow()
        keys = list(zip(got.column("p").to_pylist(), got.column("k").to_pylist(), strict=True))
        assert len(keys) == len(set(keys)), "a key is read twice"
        assert dict(zip(keys, got.column("v").to_pylist(), strict=True)) == model([r for rep in reports
                                                                                   for r in rep[3]])
        check_placement(table)
        appends = [s for s in table.snapshots()]
        assert len(appends) == WRITERS * COMMITS  # refused commits published nothing
        print(f"\n{mode}: {sum(r[2] for r in reports)} commits refused and retried")
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        S3FileIO(options).delete_dir(warehouse)
