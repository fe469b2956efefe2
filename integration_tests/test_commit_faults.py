"""A writer killed with SIGKILL at random points of a commit: the table stays readable at its latest
snapshot, nothing partial is visible, and the next commit succeeds.

Each trial spawns a writer process that commits one batch (an upsert, or every third trial a full
compaction) into a primary-key table whose commits also expire snapshots (num-retained 2..4,
time-retained 0), so a kill can also land in the middle of expiry. The kill comes either from the
writer itself, just before its k-th storage operation (k random over the operations a commit
makes: data file, manifests, manifest lists, lock, snapshot, hints, expiry deletes), or from the
test after a random delay within the commit's duration. After every trial:

* the snapshot ids are contiguous and every snapshot from the earliest to the latest reads fully;
* the latest state is the model either with or without the killed commit (all or nothing);
* on MinIO, the killed writer's JDBC lock (if it held it) expires (``lock.expire-time`` 2 s);
* a new commit from another writer succeeds and shows up.

At the end, the orphans of the killed commits are removed and the table still reads as the model.
Runs on the local filesystem and on MinIO with the PostgreSQL lock (conditional PUT off).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.fs.s3 import S3FileIO
from strata.manifest.manifest_store import DECODED_MANIFESTS
from strata_platform.services.base import Service

TRIALS = 20
SCHEMA = pa.schema([("p", pa.string()), ("k", pa.int32()), ("v", pa.int64())])
TABLE_OPTIONS = {"bucket": "2", "snapshot.num-retained.min": "2", "snapshot.num-retained.max": "4",
                 "snapshot.time-retained": "0 ms"}
IO_METHODS = ("read_bytes", "write_bytes", "write_new", "exists", "delete", "list_status", "mkdirs", "file_size")


def batch(trial: int) -> pa.Table:
    """Upserts of 6 keys over two partitions, plus a marker row only this commit writes."""
    rng = random.Random(trial)
    keys = rng.sample(range(20), 6)
    ps = ["a" if i % 2 else "b" for i in range(6)] + ["marker"]
    return pa.table({"p": ps, "k": pa.array([*keys, trial], pa.int32()),
                     "v": pa.array([trial] * 7, pa.int64())}, schema=SCHEMA)


def apply(model: dict[tuple[str, int], int], data: pa.Table) -> None:
    for p, k, v in zip(*(data.column(c).to_pylist() for c in ("p", "k", "v")), strict=True):
        model[(p, k)] = v


def state(table: strata.Table, snapshot_id: int | None = None) -> dict[tuple[str, int], int]:
    data = table.to_arrow(snapshot_id=snapshot_id)
    return {(p, k): v for p, k, v in zip(*(data.column(c).to_pylist() for c in ("p", "k", "v")), strict=True)}


@contextmanager
def io_hook(file_io: Any, before: Callable[[str], None]) -> Iterator[None]:
    """Call `before(method)` ahead of every storage operation of this FileIO instance."""
    originals = {name: getattr(file_io, name) for name in IO_METHODS}

    def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def hooked(*args: Any, **kwargs: Any) -> Any:
            before(name)
            return fn(*args, **kwargs)
        return hooked

    for name, fn in originals.items():
        setattr(file_io, name, wrap(name, fn))
    try:
        yield
    finally:
        for name in originals:
            delattr(file_io, name)


def faulty_writer(warehouse: str, options: dict[str, str], trial: int, compact: bool, kill_at_value: Any,
                  ready: Any, go: Any, started: Any) -> None:
    """Commit once when told to; with kill_at > 0, SIGKILL this process just before storage
    operation kill_at. Spawned ahead of its trial: imports and warm-up overlap the previous one."""
    catalog = strata.load_catalog(warehouse, **options)
    # warm up (imports, caches) on a scratch table, so that a timed kill lands within the commit
    warm = catalog.create_table("db.warm", SCHEMA, partition_keys=["p"], primary_keys=["p", "k"],
                                options=TABLE_OPTIONS, ignore_if_exists=True)
    warm.write(batch(trial))
    warm.to_arrow()
    ready.set()
    if not go.wait(timeout=600):
        os._exit(3)
    table = catalog.get_table("db.t")
    kill_at = int(kill_at_value.value)
    count = [0]

    def before(_name: str) -> None:
        count[0] += 1
        if count[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    started.set()
    with io_hook(table.file_io, before):
        if compact:
            table.compact(full=True)
        else:
            table.write(batch(trial), commit_user="faulty", identifier=trial)
    os._exit(0)  # completed before the kill point


def check_table(table: strata.Table) -> None:
    """Contiguous ids, and every live snapshot reads completely (its files all exist)."""
    ids = [s.id for s in table.snapshots()]
    assert ids == list(range(ids[0], ids[-1] + 1)), ids
    assert table.snapshot_manager.latest_id() == ids[-1]
    for sid in ids:
        table.to_arrow(snapshot_id=sid)


def run_trials(warehouse: str, options: dict[str, str]) -> dict[str, int]:
    catalog = strata.load_catalog(warehouse, **options)
    catalog.create_database("db", ignore_if_exists=True)
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["p"], primary_keys=["p", "k"], options=TABLE_OPTIONS)
    model: dict[tuple[str, int], int] = {}
    seed = batch(0)
    table.write(seed, commit_user="parent", identifier=1)
    apply(model, seed)

    # calibrate: how many storage operations and how long a commit (with its expiry) takes
    ops, durations = 0, []
    for ident in (2, 3, 4):
        DECODED_MANIFESTS.clear()  # count a cold process's operations, as the killed writer's
        count = [0]
        began = time.monotonic()
        with io_hook(table.file_io, lambda _n, c=count: c.__setitem__(0, c[0] + 1)):
            calibration = batch(1000 + ident)
            table.write(calibration, commit_user="calibration", identifier=ident)
        durations.append(time.monotonic() - began)
        ops = max(ops, count[0])
        apply(model, calibration)
    duration = max(durations)

    rng = random.Random(42)
    ctx = mp.get_context("spawn")
    stats = {"killed": 0, "completed": 0, "landed": 0, "by_op": 0, "by_timer": 0, "ops_per_commit": ops}
    op_trials = (TRIALS + 1) // 2

    def spawn(trial: int) -> tuple[Any, ...]:
        ready, go, started, kill_at = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Value("i", 0)
        proc = ctx.Process(target=faulty_writer,
                           args=(warehouse, options, trial, trial % 3 == 0, kill_at, ready, go, started))
        proc.start()
        return proc, ready, go, started, kill_at

    trace = []
    upcoming = spawn(1)
    for trial in range(1, TRIALS + 1):
        proc, ready, go, started, kill_at_value = upcoming
        compact, by_op = trial % 3 == 0, trial % 2 == 1
        # stratified over the whole commit (as many storage operations as the last commit made):
        # the i-th of n kills lands in the i-th n-th of it
        low = ((trial - 1) // 2) * ops // op_trials
        high = max(low, ((trial - 1) // 2 + 1) * ops // op_trials - 1)
        kill_at = 1 + rng.randint(low, high) if by_op else 0
        kill_at_value.value = kill_at
        assert ready.wait(timeout=300), "writer did not start"
        go.set()
        assert started.wait(timeout=120), "writer did not begin its commit"
        if not by_op:
            time.sleep(rng.uniform(0, duration * 1.5))
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=120)
        if trial < TRIALS:
            upcoming = spawn(trial + 1)
        assert proc.exitcode in (0, -signal.SIGKILL), proc.exitcode
        killed = proc.exitcode == -signal.SIGKILL
        stats["killed" if killed else "completed"] += 1
        if killed:
            stats["by_op" if by_op else "by_timer"] += 1

        table = strata.load_catalog(warehouse, **options).get_table("db.t")
        check_table(table)
        landed = not compact and any(s.commit_user == "faulty" and s.commit_identifier == trial
                                     for s in table.snapshots())
        if landed:
            apply(model, batch(trial))
            stats["landed"] += 1
        trace.append((trial, "compact" if compact else "append", kill_at or "timer", "killed" if killed else "done",
                      "landed" if landed else "-"))
        assert not (not killed and not compact and not landed), "a completed commit is missing"
        assert state(table) == model, f"trial {trial}: latest state is neither before nor after the commit"

        # the next commit succeeds (after the killed writer's lock, if any, expired)
        follow = batch(100 + trial)  # the same shape as the faulty writer's, from a cold table object
        fresh = strata.load_catalog(warehouse, **options).get_table("db.t")
        DECODED_MANIFESTS.clear()  # cold, like the spawned writer (manifests are cached per process)
        count = [0]
        began = time.monotonic()
        with io_hook(fresh.file_io, lambda _n, c=count: c.__setitem__(0, c[0] + 1)):
            result = fresh.write(follow, commit_user="parent", identifier=100 + trial)
        # the next kill is drawn over a commit of this size (plus the faulty writer's longer
        # search for its own last commit) and duration
        ops, duration = count[0] + 8, time.monotonic() - began
        assert result.snapshot_ids
        apply(model, follow)
        assert state(table) == model
        check_table(table)

    # the leftovers of killed commits are orphans; removing them keeps every snapshot intact
    orphans = table.remove_orphan_files(older_than="0 ms")
    check_table(table)
    assert state(table) == model
    stats["orphans_removed"] = len(orphans.deleted)
    print("\n".join(map(str, trace)))
    return stats


def test_sigkill_during_commit_local(tmp_path: Path, record_property: Callable[[str, object], None]) -> None:
    stats = run_trials(str(tmp_path / "warehouse"), {})
    print(f"\nlocal: {stats}")
    record_property("local", stats)
    assert stats["killed"] >= TRIALS // 2
    assert stats["by_op"] >= TRIALS // 3
    assert stats["landed"] >= 1  # some kills came after the publish (hints, expiry)


@pytest.mark.minio
@pytest.mark.postgres
def test_sigkill_during_commit_minio(minio: Service, postgres: Service,
                                    record_property: Callable[[str, object], None]) -> None:
    env = minio.client_env()
    warehouse = f"s3://warehouse/it-faults-{uuid.uuid4().hex[:10]}"
    options = {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"],
               "catalog-key": f"cf_{uuid.uuid4().hex[:10]}", "lock-check-max-sleep": "200 ms",
               "lock.expire-time": "2 s", "s3.conditional-put": "false", "commit.lock-free": "false",
               "s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
               "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"]}
    try:
        stats = run_trials(warehouse, options)
        print(f"\nminio: {stats}")
        record_property("minio", stats)
        assert stats["killed"] >= TRIALS // 2
        assert stats["landed"] >= 1
    finally:
        S3FileIO(options).delete_dir(warehouse)
