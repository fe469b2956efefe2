"""Exactly-once proof of the ``strata`` streaming sink: the driver is killed and restarted.

``spark_kill_driver.py`` streams a directory of Parquet files (written here in advance, one file
per micro-batch) into a primary-key table, an append table and an aggregation (sum) table. The
test kills the whole driver (Python, the Spark JVM and its Python workers) with SIGKILL at
random moments (most after the run committed a batch, some soon after its queries started),
KILLS times, restarting it each time from the same checkpoints, then lets a last run finish
the source. The tables must then equal the model exactly: every source row once in the append
table, the last value per key in the primary-key table, sums and counts not double-counted, and
one snapshot per micro-batch.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.spark.options import commit_user_for_checkpoint
from strata_platform.services.base import Service

pytestmark = pytest.mark.spark

SEED = 20261107
KILLS = 5
FILES = 12
ROWS_PER_FILE = 20
KEYS = 40  # the keys of one file are distinct: a batch never writes one key twice
GROUPS = 5
MAX_KILL_DELAY = 2.0  # seconds after the run's first commit
EARLY_KILLS = {1, 3}  # these runs die 1-6 s after their queries start: often inside the first batch
DRIVER = Path(__file__).with_name("spark_kill_driver.py")
TABLES = ("pk", "log", "agg")


def source_rows(file_no: int) -> pa.Table:
    ids = list(range(file_no * ROWS_PER_FILE, (file_no + 1) * ROWS_PER_FILE))
    return pa.table({"id": ids, "key": [(i * 7) % KEYS for i in ids], "grp": [i % GROUPS for i in ids],
                     "v": [f"v{i}" for i in ids]})


def write_source(directory: Path) -> None:
    """One Parquet file per micro-batch; modification times fix the order Spark takes them in."""
    directory.mkdir()
    base = time.time() - 10_000
    for file_no in range(FILES):
        path = directory / f"part-{file_no:03d}.parquet"
        pq.write_table(source_rows(file_no), path)
        os.utime(path, (base + file_no, base + file_no))


def create_tables(catalog: strata.Catalog) -> dict[str, strata.Table]:
    return {
        "pk": catalog.create_table("db.pk", pa.schema([("id", pa.int64()), ("last_id", pa.int64()),
                                                      ("v", pa.string())]),
                                   primary_keys=["id"], options={"bucket": "2"}),
        "log": catalog.create_table("db.log", pa.schema([("id", pa.int64()), ("key", pa.int64()),
                                                        ("v", pa.string())])),
        "agg": catalog.create_table("db.agg", pa.schema([("grp", pa.int64()), ("total", pa.int64()),
                                                        ("n", pa.int64())]),
                                    primary_keys=["grp"],
                                    options={"bucket": "1", "merge-engine": "aggregation",
                                             "fields.total.aggregate-function": "sum",
                                             "fields.n.aggregate-function": "sum"}),
    }


# -- the model ---------------------------------------------------------------------------------------
def expected_rows() -> dict[str, list[dict]]:
    rows = pa.concat_tables([source_rows(f) for f in range(FILES)]).to_pylist()
    last: dict[int, dict] = {}
    sums: dict[int, list[int]] = {}
    for row in rows:  # ids grow with the file number: the later batch wins
        last[row["key"]] = {"id": row["key"], "last_id": row["id"], "v": row["v"]}
        total = sums.setdefault(row["grp"], [0, 0])
        total[0] += row["id"]
        total[1] += 1
    return {
        "pk": sorted(last.values(), key=lambda r: r["id"]),
        "log": sorted(({"id": r["id"], "key": r["key"], "v": r["v"]} for r in rows), key=lambda r: r["id"]),
        "agg": [{"grp": g, "total": s[0], "n": s[1]} for g, s in sorted(sums.items())],
    }


# -- driver processes --------------------------------------------------------------------------------
def session_pids(session_id: int) -> list[int]:
    """Processes of one session: the driver started a new one, and Spark's JVM and Python
    workers stay in it (PySpark's daemon changes only its process group)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        # fields after the name: state, ppid, pgrp, session; a zombie is dead already
        if int(fields[3]) == session_id and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def kill_session(driver: subprocess.Popen) -> int:
    """SIGKILL every process of the driver's session, by id, until none is left."""
    killed: set[int] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        alive = [p for p in session_pids(driver.pid) if p != os.getpid()]
        if not alive:
            driver.wait(timeout=30)
            return len(killed)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        driver.poll()  # reap the driver itself
        time.sleep(0.05)
    raise AssertionError(f"processes of driver session {driver.pid} survived SIGKILL")


@dataclass
class Driver:
    process: subprocess.Popen
    started: threading.Event
    lines: list[str]


def start_driver(warehouse: str, source: Path, checkpoints: Path, log: Path) -> Driver:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, str(DRIVER), "--warehouse", warehouse, "--source", str(source),
         "--checkpoints", str(checkpoints)],
        stdout=subprocess.PIPE, stderr=log.open("ab"), text=True, env=env, start_new_session=True)
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


@pytest.fixture
def drivers() -> Iterator[list[Driver]]:
    """Every driver started by the test; a failing test leaves none running."""
    started: list[Driver] = []
    yield started
    for driver in started:
        if driver.process.poll() is None or session_pids(driver.process.pid):
            kill_session(driver.process)


# -- checkpoint and table state ----------------------------------------------------------------------
def batch_ids(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.glob("*") if p.name.isdigit()} if directory.exists() else set()


@dataclass
class KillState:
    snapshots: dict[str, int]
    in_flight: int  # queries with a planned batch (offsets/N) not yet marked done (commits/N)
    committed_unmarked: int  # ... whose batch the table already holds: the restart must skip it


def state_at_kill(tables: dict[str, strata.Table], checkpoints: Path) -> KillState:
    in_flight = committed_unmarked = 0
    for name, table in tables.items():
        ck = checkpoints / name
        offsets, commits = batch_ids(ck / "offsets"), batch_ids(ck / "commits")
        pending = offsets - commits
        if pending:
            in_flight += 1
            last = table.new_commit(commit_user_for_checkpoint(str(ck))).last_committed_identifier()
            committed_unmarked += int(last is not None and last >= max(pending))
    return KillState({n: table.snapshot_manager.latest_id() or 0 for n, table in tables.items()},
                     in_flight, committed_unmarked)


def total_snapshots(tables: dict[str, strata.Table]) -> int:
    return sum(t.snapshot_manager.latest_id() or 0 for t in tables.values())


def wait_for_progress(driver: Driver, tables: dict[str, strata.Table], log: Path) -> None:
    """Until the run has started its queries and committed at least one new snapshot."""
    assert driver.started.wait(180), f"driver never started; log: {log.read_text()[-3000:]}"
    before = total_snapshots(tables)
    deadline = time.monotonic() + 180
    while total_snapshots(tables) == before:
        assert driver.process.poll() is None, f"driver exited early; log: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no micro-batch committed within 180 s"
        time.sleep(0.05)


def test_killed_driver_restarts_exactly_once(spark: Service, tmp_path: Path, drivers: list[Driver]) -> None:
    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    tables = create_tables(catalog)
    source, checkpoints, log = tmp_path / "source", tmp_path / "checkpoints", tmp_path / "driver.log"
    write_source(source)
    warehouse = str(tmp_path / "warehouse")
    rng = random.Random(SEED)
    kills: list[KillState] = []
    delays: list[float] = []
    began = time.monotonic()

    while len(kills) < KILLS:
        driver = start_driver(warehouse, source, checkpoints, log)
        drivers.append(driver)
        if len(kills) in EARLY_KILLS:
            assert driver.started.wait(180), f"driver never started; log: {log.read_text()[-3000:]}"
            delay = rng.uniform(1.0, 6.0)
        else:
            wait_for_progress(driver, tables, log)
            delay = rng.uniform(0.0, MAX_KILL_DELAY)
        time.sleep(delay)
        assert driver.process.poll() is None, "the source ran out before every kill: add files"
        kill_session(driver.process)
        delays.append(delay)
        kills.append(state_at_kill(tables, checkpoints))

    before_final = {n: t.snapshot_manager.latest_id() or 0 for n, t in tables.items()}
    final = start_driver(warehouse, source, checkpoints, log)
    drivers.append(final)
    assert final.process.wait(timeout=300) == 0, f"final run failed; log: {log.read_text()[-3000:]}"
    assert "DONE" in final.lines
    elapsed = time.monotonic() - began
    replays = log.read_text().count("was already committed; dropped the replay")
    print(f"\n{KILLS} kills after {[round(d, 2) for d in delays]} s; snapshots at kills "
          f"{[k.snapshots for k in kills]}; in-flight batches {[k.in_flight for k in kills]}, "
          f"already committed but unmarked {[k.committed_unmarked for k in kills]}; replays the sink "
          f"dropped: {replays}; total {elapsed:.0f} s")

    expected = expected_rows()
    assert tables["log"].to_arrow().sort_by("id").to_pylist() == expected["log"]  # no loss, no duplicate
    assert tables["pk"].to_arrow().sort_by("id").to_pylist() == expected["pk"]
    assert tables["agg"].to_arrow().sort_by("grp").to_pylist() == expected["agg"]  # sums counted once
    for name, table in tables.items():
        # one snapshot per micro-batch of the checkpoint, each once. (A batch may hold two files:
        # Spark's file source logs the files of its next batch before the offsets, and a kill
        # in between makes the restarted batch take the logged file and one more.)
        batches = batch_ids(checkpoints / name / "commits")
        assert batches == batch_ids(checkpoints / name / "offsets") == set(range(len(batches)))
        snaps = table.snapshots()
        assert [s.commit_identifier for s in snaps] == sorted(batches), name
        assert len({s.commit_user for s in snaps}) == 1
        # the kills hit mid-stream: the killed runs committed some batches, the last run the rest
        assert 0 < before_final[name] < len(snaps), (name, before_final)
    assert any(k.in_flight for k in kills), "no kill caught a micro-batch in flight"
