"""Branches under concurrency on MinIO, in both safe publish modes (the JDBC lock on PostgreSQL, and
the conditional PUT without a lock): a writer on main and a writer on a branch commit at the same
time and nothing is lost on either; a fast-forward racing main's writer either wins whole (main is
the branch, then main's later commits on top) or fails with a clear conflict, leaving main intact.

Threads, each with its own catalog (connections, FileIO), so that commits interleave on the wire
without the seconds a spawned process costs; the lock and the conditional PUT decide, not the GIL."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.errors import CommitConflictError
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

pytestmark = [pytest.mark.minio, pytest.mark.postgres]

COMMITS = 12
SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("who", pa.string())])
OPTIONS = {"bucket": "1", "write-only": "true", "commit.max-retries": "1000", "commit.max-retry-wait": "200 ms"}
MODES = {
    "jdbc-lock": {"s3.conditional-put": "false", "commit.lock-free": "false"},
    "conditional-put": {"s3.conditional-put": "auto", "commit.lock-free": "true"},
}


def options_for(mode: str, minio: Service, postgres: Service) -> dict[str, str]:
    env = minio.client_env()
    return {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"],
            "catalog-key": f"br_{uuid.uuid4().hex[:10]}", "lock-check-max-sleep": "100 ms",
            "s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"], **MODES[mode]}


def batch(who: str, seq: int) -> pa.Table:
    base = {"main": 0, "branch": 100_000}[who]
    return pa.table({"k": [base + seq * 10, base + seq * 10 + 1], "who": [who, who]}, schema=SCHEMA)


def keys(table: strata.Table) -> set[int]:
    data = table.to_arrow()
    found = data.column("k").to_pylist()
    assert len(found) == len(set(found)), "a primary key appears twice"
    return set(found)


def writer(warehouse: str, options: dict[str, str], name: str, who: str, start: threading.Event,
           errors: list[BaseException], first: int = 1) -> None:
    try:
        table = strata.load_catalog(warehouse, **options).get_table(name)
        start.wait(60)
        for seq in range(first, first + COMMITS):
            with table.new_write(f"{who}-writer") as write:
                write.write_arrow(batch(who, seq))
                messages = write.prepare_commit()
            table.new_commit(f"{who}-writer").commit(messages, identifier=seq)
    except BaseException as exc:  # reported by the test
        errors.append(exc)


@pytest.fixture(params=list(MODES))
def setup(request: pytest.FixtureRequest, minio: Service, postgres: Service) -> Any:
    mode = request.param
    warehouse = f"s3://warehouse/it-branches-{uuid.uuid4().hex[:10]}"
    options = options_for(mode, minio, postgres)
    catalog = strata.load_catalog(warehouse, **options)
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options=OPTIONS)
    assert catalog.publish_mode(table) == {"jdbc-lock": "lock", "conditional-put": "atomic"}[mode]
    table.write(batch("main", 0))
    table.create_branch("b1", from_snapshot=1)
    yield warehouse, options, catalog
    S3FileIO(options).delete_dir(warehouse)


def test_main_and_branch_writers_commit_concurrently(setup: Any) -> None:
    warehouse, options, catalog = setup
    start, errors = threading.Event(), list[BaseException]()
    threads = [threading.Thread(target=writer, args=(warehouse, options, "db.t", "main", start, errors)),
               threading.Thread(target=writer, args=(warehouse, options, "db.t$branch_b1", "branch", start, errors))]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join(600)
    assert not errors, errors
    main, branch = catalog.get_table("db.t"), catalog.get_table("db.t$branch_b1")
    main_keys = {k for s in range(COMMITS + 1) for k in batch("main", s).column("k").to_pylist()}
    branch_keys = {k for s in range(1, COMMITS + 1) for k in batch("branch", s).column("k").to_pylist()}
    assert keys(main) == main_keys
    assert keys(branch) == branch_keys | set(batch("main", 0).column("k").to_pylist())
    for table, who in ((main, "main"), (branch, "branch")):  # each commit exactly once, in order
        ids = [s.commit_identifier for s in table.snapshots() if s.commit_user == f"{who}-writer"]
        assert ids == list(range(1, COMMITS + 1)), (who, ids)


def test_fast_forward_racing_a_main_commit_wins_whole_or_fails_clearly(setup: Any) -> None:
    warehouse, options, catalog = setup
    branch = catalog.get_table("db.t$branch_b1")
    for seq in range(1, 2 * COMMITS):  # the branch is longer than main will be
        branch.write(batch("branch", seq))
    branch_keys = keys(branch)
    start, errors = threading.Event(), list[BaseException]()
    main_writer = threading.Thread(target=writer, args=(warehouse, options, "db.t", "main", start, errors))
    main_writer.start()
    start.set()
    outcomes = []
    for _ in range(3):  # fast-forward attempts while main's writer commits
        try:
            outcomes.append(("won", strata.load_catalog(warehouse, **options).get_table("db.t").fast_forward("b1")))
        except CommitConflictError as exc:
            assert "main" in str(exc) and "retry" in str(exc)
            outcomes.append(("conflict", None))
    main_writer.join(600)
    assert not errors, errors
    main = catalog.get_table("db.t")
    won = [latest for outcome, latest in outcomes if outcome == "won"]
    ids = [s.id for s in main.snapshots()]
    assert ids == list(range(ids[0], ids[-1] + 1))  # one contiguous chain
    mains = [s for s in main.snapshots() if s.commit_user == "main-writer"]
    if won:  # main is the branch as of the last win, plus the main commits published after it
        last = won[-1]
        after = [s for s in mains if s.id > last]
        assert keys(main) == branch_keys | {k for s in after for k in batch("main", s.commit_identifier)
                                            .column("k").to_pylist()}
        assert all(main.snapshot_manager.snapshot(i) == branch.snapshot_manager.snapshot(i)
                   for i in range(2, min(last, branch.latest_snapshot().id) + 1))
    else:  # every fast-forward lost: main is exactly its own writer's work
        assert keys(main) == {k for s in range(COMMITS + 1) for k in batch("main", s).column("k").to_pylist()}
    print(f"fast-forward outcomes: {outcomes}")
