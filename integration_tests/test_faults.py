"""Commits through a network that misbehaves: every acknowledged batch lands exactly once, and the
table stays whole.

A fault proxy (strata_platform.faults) sits between the writers and MinIO, another between them and
PostgreSQL (the JDBC catalog and its lock). On S3 requests it loses replies after the request
landed, answers 503 SlowDown after it landed, resets new connections, adds latency, and goes away
for 1-2 s every ~10 s; the database proxy resets connections and has outages of its own.

Workload, per commit mode (conditional PUT without a lock; the JDBC lock with conditional PUT off):
WRITERS processes each commit BATCHES batches into four tables (append; primary key with fixed
buckets, dynamic buckets, deletion vectors), while a maintenance process compacts and expires
them. A batch that fails is retried as a restarted streaming job does: the same commit user and
identifier, a fresh catalog and table, whatever the error (CommitStateUnknownError included).
Primary-key tables aggregate (``cnt`` sums, ``last`` keeps the last batch), so a batch committed
twice shows as a doubled count. Right after its last batch, each writer reads the deletion-vector
table at the snapshot its commit names as the first to show the batch (readers skip level 0, so a
batch whose compaction did not follow would read as the one before; when the maintenance process
moved it up first, its snapshot is the one named) and finds its keys as the model has them. Then, directly on MinIO and
without compacting first: each table holds every batch exactly once, every retained snapshot reads,
expiry plus orphan-file cleanup leave the same rows, and Java Paimon reads what Strata reads. A
branch fast-forward and the Spark streaming sink run through the proxy too.

Expiry keeps snapshots younger than ``snapshot.time-retained`` (30 s): a writer's retry must find
its landed attempt among the retained snapshots to skip it (as in Paimon).

Every run draws a seed (printed; ``STRATA_FAULT_SEED=<seed>`` replays its fault mix and timing);
``STRATA_FAULT_RATE`` scales the fault rates, ``STRATA_FAULT_WRITERS`` / ``STRATA_FAULT_BATCHES``
the workload, ``STRATA_FAULT_TABLES`` its tables (``append,dv``: the field run's pair). The module
takes 4-5 minutes on a busy 2-core machine (a workload 50-80 s each, the
branch test 40-50 s, the Spark test 25 s).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import random
import time
import traceback
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

import strata
from strata.errors import SnapshotNotFoundError
from strata.fs.s3 import S3FileIO
from strata_platform.faults import FaultProxy, Faults
from strata_platform.services import paimon_java
from strata_platform.services.base import Service
from strata_platform.services.paimon_java import canonical, judge_rows
from strata_platform.services.testing import provide

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.faults, pytest.mark.minio, pytest.mark.postgres]

SEED = int(os.environ.get("STRATA_FAULT_SEED") or random.SystemRandom().randrange(1, 2**31))
WRITERS = int(os.environ.get("STRATA_FAULT_WRITERS", "3"))
BATCHES = int(os.environ.get("STRATA_FAULT_BATCHES", "3"))
MAX_ATTEMPTS = 40  # per batch and table: a writer that cannot commit for this long is a failure

# the field run's mix was 3% lost replies, 3% SlowDown, 5% resets and an outage every 12 s; a commit
# makes 30-90 requests and each fault costs a client back-off (0.5-1 s), so the suite runs at
# two-thirds of that (STRATA_FAULT_RATE=1.5 for the field run's); resets strike new connections,
# which are fewer (boto3 keeps them alive)
RATE = float(os.environ.get("STRATA_FAULT_RATE", "1.0"))
S3_FAULTS = Faults(lost_reply=0.02, slow_down=0.02, reset=0.10, latency=0.03, latency_ms=(10, 150),
                   outage_every=10.0, outage_seconds=(1.0, 2.0)).scaled(RATE)
# a lock row whose holder lost the database stays until its lease (lock.expire-time) ends and
# stalls that table's writers: outages of the lock database are rarer than the store's
PG_FAULTS = Faults(reset=0.10, latency=0.05, latency_ms=(10, 100), outage_every=30.0, outage_seconds=(1.0, 2.0))

ROWS = 10  # rows per batch of the append table
KEYS = 12  # keys each writer owns in a primary-key table
PK_SCHEMA = pa.schema([("p", pa.int32()), ("k", pa.int64()), ("cnt", pa.int64()), ("last", pa.int32())])
APPEND_SCHEMA = pa.schema([("w", pa.int32()), ("b", pa.int32()), ("i", pa.int32()), ("payload", pa.string())])
AGGREGATE = {"merge-engine": "aggregation", "fields.cnt.aggregate-function": "sum",
             "fields.last.aggregate-function": "last_non_null_value"}
RETENTION = {"snapshot.num-retained.min": "3", "snapshot.time-retained": "30 s",
             "commit.max-retries": "100", "commit.max-retry-wait": "500 ms"}
TABLES: dict[str, dict[str, str]] = {
    "append": {},
    "fixed": {"bucket": "2", **AGGREGATE},
    "dynamic": {"bucket": "-1", **AGGREGATE},
    # writers compact what they write, beside the maintenance process: a writer's compaction that
    # conflicts after its batch's APPEND published leaves the write successful (before, it raised,
    # and a replay more than 30 s later found that APPEND expired and counted the batch twice)
    "dv": {"bucket": "2", "deletion-vectors.enabled": "true", **AGGREGATE},
}
# the tables of the workload (STRATA_FAULT_TABLES=append,dv: the field run's pair)
WORKLOAD = {kind: TABLES[kind] for kind in (os.environ.get("STRATA_FAULT_TABLES") or ",".join(TABLES)).split(",")}
MODES = {
    "conditional-put": {"s3.conditional-put": "true", "commit.lock-free": "true"},
    "jdbc-lock": {"s3.conditional-put": "false", "commit.lock-free": "false"},
}
PUBLISH_MODE = {"conditional-put": "atomic", "jdbc-lock": "lock"}


def seed_for(name: str) -> int:
    return random.Random(f"{SEED}:{name}").randrange(2**31)


def replay_hint() -> str:
    return f"fault seed {SEED}: replay with STRATA_FAULT_SEED={SEED}"


# -- batches and the model ------------------------------------------------------------------------
def batch(kind: str, writer: int, seq: int) -> pa.Table:
    """Batch `seq` of `writer` for a table of `kind` (deterministic). Primary-key batches touch 4
    of the writer's keys (counted and stamped with `seq`) and a marker key only this batch has."""
    if kind == "append":
        return pa.table({"w": [writer] * ROWS, "b": [seq] * ROWS, "i": list(range(ROWS)),
                         "payload": [f"w{writer}-b{seq}-{i}" for i in range(ROWS)]}, schema=APPEND_SCHEMA)
    keys = [writer * 1000 + k for k in random.Random(f"{writer}:{seq}").sample(range(KEYS), 4)]
    keys.append(writer * 1000 + 500 + seq)
    return pa.table({"p": [k % 2 for k in keys], "k": keys, "cnt": [1] * len(keys), "last": [seq] * len(keys)},
                    schema=PK_SCHEMA)


def expected(kind: str, batches: dict[int, list[int]]) -> Counter | dict:
    """What the table must hold after every writer's batches ({writer: [seq, ...]}) once each."""
    if kind == "append":
        return Counter({(w, s): ROWS for w, seqs in batches.items() for s in seqs})
    state: dict[tuple[int, int], tuple[int, int]] = {}
    for w, seqs in batches.items():
        for s in seqs:
            for p, k in zip(*(batch(kind, w, s).column(c).to_pylist() for c in ("p", "k")), strict=True):
                cnt, _ = state.get((p, k), (0, 0))
                state[(p, k)] = (cnt + 1, s)
    return state


def actual(kind: str, table: strata.Table, snapshot_id: int | None = None) -> Counter | dict:
    data = table.to_arrow(snapshot_id=snapshot_id)
    if kind == "append":
        rows = list(zip(*(data.column(c).to_pylist() for c in ("w", "b", "i")), strict=True))
        assert len(rows) == len(set(rows)), f"a row of {table.identifier} appears twice"
        return Counter((w, b) for w, b, _ in rows)
    rows = list(zip(*(data.column(c).to_pylist() for c in ("p", "k", "cnt", "last")), strict=True))
    twice = [row for row, n in Counter(row[:2] for row in rows).items() if n > 1]
    assert not twice, f"{table.identifier} snapshot {snapshot_id or 'latest'}: keys read twice: {twice}"
    return {(p, k): (cnt, last) for p, k, cnt, last in rows}


# -- proxies and catalogs -------------------------------------------------------------------------
@dataclass
class Network:
    """The two proxies of one run, and the catalog options that send a writer through them."""

    s3: FaultProxy
    pg: FaultProxy
    warehouse: str
    direct: dict[str, str]
    proxied: dict[str, str]

    def injected(self) -> dict[str, dict[str, int]]:
        return {"s3": self.s3.injected(), "pg": self.pg.injected()}

    def totals(self) -> dict[str, int]:
        return {"s3_requests": self.s3.counts["requests"], "pg_connections": self.pg.counts["connections"]}


def catalog_options(mode: str, minio: Service, postgres: Service, catalog_key: str) -> dict[str, str]:
    env = minio.client_env()
    return {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"], "catalog-key": catalog_key,
            "lock-check-max-sleep": "100 ms", "lock.expire-time": "10 s",
            "s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"], **MODES[mode]}


def through(options: dict[str, str], s3: FaultProxy, pg: FaultProxy) -> dict[str, str]:
    """The same catalog, reached through the proxies."""
    dsn = urllib.parse.urlsplit(options["uri"])
    return {**options, "s3.endpoint": s3.endpoint, "uri": dsn._replace(netloc=dsn.netloc.replace(
        f"{dsn.hostname}:{dsn.port}", pg.endpoint)).geturl()}


def address(url: str) -> tuple[str, int]:
    parts = urllib.parse.urlsplit(url if "://" in url else f"tcp://{url}")
    assert parts.hostname and parts.port, url
    return parts.hostname, parts.port


@contextlib.contextmanager
def network(name: str, mode: str, minio: Service, postgres: Service, s3_faults: Faults = S3_FAULTS,
            pg_faults: Faults = PG_FAULTS) -> Iterator[Network]:
    """A fresh warehouse, and the proxies in front of MinIO and PostgreSQL (faults on from the
    start: set tables up with `direct` options first)."""
    direct = catalog_options(mode, minio, postgres, f"ft_{uuid.uuid4().hex[:10]}")
    warehouse = f"s3://warehouse/it-faults-{name}-{uuid.uuid4().hex[:8]}"
    s3 = FaultProxy(address(direct["s3.endpoint"]), s3_faults, seed_for(f"{name}:s3"), "http", f"{name}-s3")
    pg = FaultProxy(address(direct["uri"]), pg_faults, seed_for(f"{name}:pg"), "tcp", f"{name}-pg")
    try:
        with s3, pg:
            yield Network(s3, pg, warehouse, direct, through(direct, s3, pg))
    finally:
        S3FileIO(direct).delete_dir(warehouse)


def load(warehouse: str, options: dict[str, str], identifier: str) -> strata.Table:
    return strata.load_catalog(warehouse, **options).get_table(identifier)


# -- the processes under faults -------------------------------------------------------------------
def new_report(name: str) -> dict[str, Any]:
    return {"name": name, "committed": 0, "duplicates": 0, "errors": Counter(), "samples": {}, "failure": None,
            "replayed": {}, "not_yet_visible": {}, "hidden": {}}


def note_error(report: dict[str, Any], exc: BaseException) -> None:
    kind = type(exc).__name__
    report["errors"][kind] += 1
    report["samples"].setdefault(kind, str(exc)[:400])


def with_retries(report: dict[str, Any], rng: random.Random, what: str, attempt: Callable[[Any], Any],
                 warehouse: str, options: dict[str, str]) -> Any:
    """Run `attempt(catalog)` with a fresh catalog until it succeeds, as a restarted job would. A
    batch committed (not skipped) after failed attempts is noted with its errors and how long it
    took from the first attempt: a double count points at it."""
    began, failures = time.monotonic(), list[str]()
    for n in range(MAX_ATTEMPTS):
        catalog = None
        try:
            catalog = strata.load_catalog(warehouse, **options)
            result = attempt(catalog)
            if failures and not getattr(result, "skipped_as_duplicate", True):
                report["replayed"][what] = {"seconds": round(time.monotonic() - began, 1), "failures": failures}
            return result
        except Exception as exc:
            note_error(report, exc)
            failures.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            last = exc
            time.sleep(min(2.0, 0.1 * 2 ** n) * rng.uniform(0.5, 1.0))
        finally:
            close = getattr(catalog, "close", None)
            if close is not None:
                close()
    raise RuntimeError(f"{what}: still failing after {MAX_ATTEMPTS} attempts: {last!r}")


def writer_process(warehouse: str, options: dict[str, str], writer: int, seqs: list[int],
                   targets: list[tuple[str, str]], start: Any, out: Any) -> None:
    """Commit batch `seq` of this writer into every (kind, identifier) target, in order; a batch
    that fails is retried with the same commit user and identifier on a fresh table."""
    report = new_report(f"writer-{writer}")
    rng = random.Random(f"{SEED}:writer:{writer}")
    user = f"writer-{writer}"
    try:
        start.wait(timeout=300)
        for seq in seqs:
            for kind, identifier in targets:
                data = batch(kind, writer, seq)

                def commit(catalog: Any, identifier: str = identifier, data: pa.Table = data,
                           seq: int = seq) -> Any:
                    return catalog.get_table(identifier).write(data, commit_user=user, identifier=seq)

                result = with_retries(report, rng, f"batch {seq} of {user} into {identifier}", commit,
                                      warehouse, options)
                report["duplicates" if result.skipped_as_duplicate else "committed"] += 1
                if TABLES[kind].get("deletion-vectors.enabled") != "true":
                    continue
                if not getattr(result, "visible", True):
                    report["not_yet_visible"][f"batch {seq} into {identifier}"] = result.not_yet_visible[:300]
                elif seq == seqs[-1]:
                    hidden = hidden_keys(report, rng, warehouse, options, identifier, writer, seqs, result)
                    if hidden:
                        report["hidden"][identifier] = hidden
    except BaseException:
        report["failure"] = traceback.format_exc()[-3000:]
    out.put(report)


def hidden_keys(report: dict[str, Any], rng: random.Random, warehouse: str, options: dict[str, str],
                identifier: str, writer: int, seqs: list[int], result: Any) -> dict:
    """The writer's keys whose values a plain read of the deletion-vector table, at the snapshot
    its last batch's commit names as the first to show it (latest if the batch was a skipped
    replay), shows other than the model: {key: (read, model)}. Readers skip level 0, so a batch
    whose compaction did not follow reads as the previous batch; when the maintenance compaction
    moved it up first, that compaction's snapshot is the one named."""
    want = expected("dv", {writer: seqs})

    def read(catalog: Any) -> Counter | dict:
        table = catalog.get_table(identifier)
        try:
            return actual("dv", table, result.visible_from)
        except SnapshotNotFoundError:  # expired meanwhile: what the latest snapshot shows
            return actual("dv", table)

    got = with_retries(report, rng, f"read after the last batch of writer {writer} into {identifier}", read,
                       warehouse, options)
    return {key: (got.get(key), value) for key, value in want.items() if got.get(key) != value}


def maintenance_process(warehouse: str, options: dict[str, str], identifiers: list[str], start: Any,
                        stop: Any, out: Any) -> None:
    """Full compactions and snapshot expiry of every table, round after round, until told to stop."""
    report = {**new_report("maintenance"), "compactions": 0, "expired": 0}
    try:
        start.wait(timeout=300)
        rounds = 0
        while not stop.is_set():
            rounds += 1
            for identifier in identifiers:
                catalog = None
                try:
                    catalog = strata.load_catalog(warehouse, **options)
                    table = catalog.get_table(identifier)
                    compacted = table.compact(full=rounds % 3 == 0, commit_user="maintenance")  # partial: vectors
                    report["compactions"] += len(compacted.snapshot_ids)
                    report["expired"] += len(table.expire_snapshots().expired)
                except Exception as exc:
                    note_error(report, exc)
                finally:
                    if catalog is not None:
                        catalog.close()
            stop.wait(1.0)
    except BaseException:
        report["failure"] = traceback.format_exc()[-3000:]
    out.put(report)


def run_processes(net: Network, writers: dict[int, list[int]], targets: list[tuple[str, str]],
                  maintained: list[str]) -> dict[str, dict[str, Any]]:
    """The writers (and a maintenance process over `maintained`) through the proxies; their reports."""
    ctx = mp.get_context("spawn")  # boto3, pyarrow's S3 and database pools are not fork-safe
    start, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=writer_process, args=(net.warehouse, net.proxied, w, seqs, targets, start, out))
             for w, seqs in writers.items()]
    if maintained:
        procs.append(ctx.Process(target=maintenance_process,
                                 args=(net.warehouse, net.proxied, maintained, start, stop, out)))
    try:
        for proc in procs:
            proc.start()
        start.set()
        reports = {}
        for _ in writers:
            report = out.get(timeout=600)
            reports[report["name"]] = report
        stop.set()
        if maintained:
            report = out.get(timeout=300)
            reports[report["name"]] = report
        for proc in procs:
            proc.join(timeout=60)
        return reports
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()


def summary(reports: dict[str, dict[str, Any]]) -> dict[str, Any]:
    errors: Counter = Counter()
    for report in reports.values():
        errors.update(report["errors"])
    writers = [r for n, r in reports.items() if n.startswith("writer")]
    samples = {kind: text[:160] for r in reports.values() for kind, text in r["samples"].items()}
    return {"committed": sum(r["committed"] for r in writers), "replays_skipped": sum(r["duplicates"] for r in writers),
            "retried_errors": dict(errors), "compactions": reports.get("maintenance", {}).get("compactions"),
            "expired": reports.get("maintenance", {}).get("expired"), "error_samples": samples,
            "committed_after_failures": {what: r for rep in writers for what, r in rep["replayed"].items()},
            "not_yet_visible": {n: r["not_yet_visible"] for n, r in reports.items() if r["not_yet_visible"]}}


def assert_no_failures(reports: dict[str, dict[str, Any]]) -> None:
    failed = {n: r["failure"] for n, r in reports.items() if r["failure"]}
    samples = {n: r["samples"] for n, r in reports.items()}
    assert not failed, f"{replay_hint()}\nprocesses failed: {failed}\nerrors seen: {samples}"


# -- checks, directly on MinIO --------------------------------------------------------------------
def check_snapshots(table: strata.Table) -> int:
    """Ids contiguous, every retained snapshot reads (time travel), and no writer's (user,
    identifier) was published twice; returns how many were read."""
    snapshots = table.snapshots()
    ids = [s.id for s in snapshots]
    assert ids == list(range(ids[0], ids[-1] + 1)), f"{table.identifier}: snapshot ids not contiguous: {ids}"
    for snapshot in snapshots:
        try:
            table.to_arrow(snapshot_id=snapshot.id)
        except Exception as exc:
            commit = (snapshot.commit_user, snapshot.commit_identifier)
            raise AssertionError(f"{replay_hint()}: snapshot {snapshot.id} of {table.identifier} {commit} "
                                 f"does not read: {exc!r}") from exc
    commits = Counter((s.commit_user, s.commit_identifier) for s in snapshots
                      if s.commit_user.startswith("writer-") and s.commit_kind != "COMPACT")
    twice = {c: n for c, n in commits.items() if n > 1}
    assert not twice, f"{replay_hint()}: {table.identifier}: commits published twice: {twice}"
    return len(snapshots)


def expire_and_clean(table: strata.Table) -> tuple[int, int]:
    """Expire down to the last two snapshots, then remove every unreferenced file."""
    expired = table.expire_snapshots(retain_min=1, retain_max=2, time_retained="0 ms", max_deletes=100_000)
    orphans = table.remove_orphan_files(older_than="0 ms")
    return len(expired.expired), len(orphans.deleted)


def download(io: S3FileIO, table_path: str, local: Path) -> None:
    """Copy a table's files from MinIO to a local directory (the Java judge reads local warehouses)."""
    bucket, key = table_path[len("s3://"):].split("/", 1)
    client = boto3.client("s3", endpoint_url=io.config.endpoint, region_name=io.config.region,
                          aws_access_key_id=io.config.access_key, aws_secret_access_key=io.config.secret_key)
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{key}/"):
        for obj in page.get("Contents", []):
            target = local / obj["Key"][len(key) + 1:]
            if obj["Key"].endswith("/"):
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(target))


def java_reads_as_strata(warehouse: str, options: dict[str, str], identifiers: list[str], local: Path) -> None:
    """Java Paimon's read of each table (copied to `local`) equals Strata's, row for row."""
    catalog = strata.load_catalog(warehouse, **options)
    tables = {i: catalog.get_table(i) for i in identifiers}
    for identifier, table in tables.items():
        download(S3FileIO(options), table.path, local / "db.db" / identifier.split(".", 1)[1])
    results = paimon_java.read_many(str(local), [{"table": i} for i in identifiers])
    for identifier, result in zip(identifiers, results, strict=True):
        assert "error" not in result, f"{replay_hint()}: Java Paimon cannot read {identifier}: {result['error']}"
        ours = canonical(judge_rows(tables[identifier].to_arrow()))
        assert canonical(result["rows"]) == ours, f"{replay_hint()}: Java and Strata disagree on {identifier}"


# -- the workload, once per commit mode -----------------------------------------------------------
@dataclass
class Run:
    mode: str
    warehouse: str
    options: dict[str, str]  # direct (no proxy)
    writers: dict[int, list[int]]
    reports: dict[str, dict[str, Any]]
    injected: dict[str, dict[str, int]]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def table(self, kind: str) -> strata.Table:
        return load(self.warehouse, self.options, f"db.{kind}")

    def settled(self, kind: str) -> strata.Table:
        """The table as a plain read shows it, with no compaction after the writers. Only a
        deletion-vector table some writer was told holds a batch not yet visible is compacted
        first: its rows show with the bucket's next compaction (README, "When an acknowledged
        batch of a deletion-vector table becomes visible")."""
        told = [r["not_yet_visible"] for r in self.reports.values() if r["not_yet_visible"]]
        if TABLES[kind].get("deletion-vectors.enabled") == "true" and told:
            print(f"\n{kind}: batches acknowledged as not yet visible: {told}; compacted before the check")
            self.table(kind).compact(full=True, commit_user="check")
        return self.table(kind)

    def describe(self) -> str:
        return (f"{self.mode}: {replay_hint()}; {len(self.writers)} writers x {BATCHES} batches x {len(WORKLOAD)} "
                f"tables in {self.seconds:.1f} s; injected {self.injected}; {summary(self.reports)}; {self.extra}")


@pytest.fixture(scope="module")
def judge_service() -> Iterator[Service]:
    yield from provide("paimon_java")


@pytest.fixture(scope="module", params=list(MODES))
def run(request: pytest.FixtureRequest, minio: Service, postgres: Service) -> Iterator[Run]:
    mode = request.param
    with network(f"workload-{mode}", mode, minio, postgres) as net:
        catalog = strata.load_catalog(net.warehouse, **net.direct)
        catalog.create_database("db")
        for kind, options in WORKLOAD.items():
            keys = {} if kind == "append" else {"partition_keys": ["p"], "primary_keys": ["p", "k"]}
            table = catalog.create_table(f"db.{kind}", APPEND_SCHEMA if kind == "append" else PK_SCHEMA,
                                         options={**options, **RETENTION}, **keys)
            assert catalog.publish_mode(table) == PUBLISH_MODE[mode]
        writers = {w: list(range(1, BATCHES + 1)) for w in range(WRITERS)}
        began = time.monotonic()
        reports = run_processes(net, writers, [(k, f"db.{k}") for k in WORKLOAD], [f"db.{k}" for k in WORKLOAD])
        result = Run(mode, net.warehouse, net.direct, writers, reports, net.injected(), time.monotonic() - began,
                     {"traffic": net.totals()})
        print(f"\n{result.describe()}")
        yield result


@pytest.mark.parametrize("kind", list(WORKLOAD))
def test_every_acknowledged_batch_lands_exactly_once(run: Run, kind: str,
                                                     record_property: Callable[[str, object], None]) -> None:
    record_property("faults", run.describe())
    assert_no_failures(run.reports)
    assert all(r["committed"] + r["duplicates"] == BATCHES * len(WORKLOAD)
               for n, r in run.reports.items() if n.startswith("writer")), run.describe()
    got, want = actual(kind, run.settled(kind)), expected(kind, run.writers)
    missing = {k: v for k, v in want.items() if got.get(k) != v}
    extra = {k: v for k, v in got.items() if k not in want}
    assert not missing and not extra, f"{run.describe()}\n{kind}: wrong or missing {missing}, unexpected {extra}"
    faults = run.injected["s3"]
    assert faults["lost_reply"] and faults["slow_down"] and faults["reset"] and faults["outage"], run.describe()


def test_each_writers_last_batch_reads_from_the_snapshot_its_commit_names(run: Run) -> None:
    """Right after each writer's last batch into the deletion-vector table, a plain read at the
    commit's `visible_from` shows that writer's keys as the model has them, unless the commit
    said its batch is not yet visible."""
    if "dv" not in WORKLOAD:
        pytest.skip("the workload has no deletion-vector table (STRATA_FAULT_TABLES)")
    assert_no_failures(run.reports)
    hidden = {n: r["hidden"] for n, r in run.reports.items() if r["hidden"]}
    assert not hidden, f"{run.describe()}\nacknowledged rows a read hides, per writer and table, " \
                       f"{{key: (read, model)}}: {hidden}"


def test_every_retained_snapshot_reads(run: Run) -> None:
    assert_no_failures(run.reports)
    read = {kind: check_snapshots(run.table(kind)) for kind in WORKLOAD}
    print(f"\n{run.mode}: retained snapshots read per table: {read}")


def test_expiry_and_orphan_cleanup_keep_the_rows(run: Run) -> None:
    assert_no_failures(run.reports)
    cleaned = {}
    for kind in WORKLOAD:
        table = run.settled(kind)
        before = actual(kind, table)
        cleaned[kind] = expire_and_clean(table)
        table = run.table(kind)
        assert actual(kind, table) == before == expected(kind, run.writers), f"{run.describe()}\n{kind}"
        check_snapshots(table)
    run.extra["expired_and_orphans_removed"] = cleaned
    print(f"\n{run.mode}: (snapshots expired, orphan files removed) per table: {cleaned}")


@pytest.mark.paimon_java
def test_java_paimon_reads_the_result(run: Run, judge_service: Service, tmp_path: Path) -> None:
    assert_no_failures(run.reports)
    for kind in WORKLOAD:
        run.settled(kind)
    java_reads_as_strata(run.warehouse, run.options, [f"db.{k}" for k in WORKLOAD], tmp_path / "warehouse")


# -- the proxy itself -----------------------------------------------------------------------------
def s3_client(endpoint: str, minio: Service, attempts: int = 1) -> Any:
    env = minio.client_env()
    return boto3.client("s3", endpoint_url=endpoint, region_name=env["AWS_REGION"],
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                        config=Config(s3={"addressing_style": "path"},
                                      retries={"total_max_attempts": attempts, "mode": "standard"}))


def s3_options(endpoint: str, minio: Service) -> dict[str, str]:
    env = minio.client_env()
    return {"s3.endpoint": endpoint, "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"],
            "s3.conditional-put": "true"}


@pytest.fixture
def prefix(minio: Service) -> Iterator[str]:
    path = f"s3://warehouse/it-faults-proxy-{uuid.uuid4().hex[:8]}"
    yield path
    S3FileIO(s3_options(minio.client_env()["AWS_ENDPOINT_URL"], minio)).delete_dir(path)


def test_proxy_relays_s3_traffic_intact(minio: Service, prefix: str) -> None:
    """Without faults the proxy is invisible: boto3's signed uploads (Content-Length, Expect:
    100-continue), conditional PUTs, pyarrow's multipart uploads (aws-chunked in chunked framing,
    with checksum trailers), reads and listings all work, over kept-alive connections."""
    upstream = address(minio.client_env()["AWS_ENDPOINT_URL"])
    with FaultProxy(upstream, seed=SEED, name="relay") as proxy:
        io = S3FileIO(s3_options(proxy.endpoint, minio))
        io.write_bytes(f"{prefix}/a", b"a" * 1000)
        assert io.write_new(f"{prefix}/b", b"first") and not io.write_new(f"{prefix}/b", b"second")
        assert io.read_bytes(f"{prefix}/b") == b"first" and io.file_size(f"{prefix}/a") == 1000
        fs, _ = io.arrow_fs()
        data = pa.table({"x": pa.array(os.urandom(6_000_000)), "y": pa.array(range(6_000_000))})
        pq.write_table(data, io.arrow_path(f"{prefix}/big.parquet"), filesystem=fs)  # two parts
        assert pq.read_table(io.arrow_path(f"{prefix}/big.parquet"), filesystem=fs).equals(data)
        assert sorted(s.path.rsplit("/", 1)[1] for s in io.list_status(prefix)) == ["a", "b", "big.parquet"]
        io.delete(f"{prefix}/a")
        assert not io.exists(f"{prefix}/a")
        counts = dict(proxy.counts)
    assert all(counts[kind] == 0 for kind in proxy.injected()), counts
    assert counts["requests"] >= 15 and counts["connections"] <= counts["requests"] // 3, counts


@pytest.mark.parametrize("kind", ["lost_reply", "slow_down", "reset"])
def test_proxy_faults_strike_before_or_after_the_request_lands(minio: Service, prefix: str, kind: str) -> None:
    """A lost reply and a SlowDown come after MinIO stored the object; a reset comes before."""
    upstream = address(minio.client_env()["AWS_ENDPOINT_URL"])
    bucket, key = prefix[len("s3://"):].split("/", 1)
    direct = s3_client(minio.client_env()["AWS_ENDPOINT_URL"], minio)
    faults = {"lost_reply": Faults(lost_reply=1.0), "slow_down": Faults(slow_down=1.0),
              "reset": Faults(reset=1.0)}[kind]
    with FaultProxy(upstream, faults, seed=SEED, name=kind) as proxy:
        with pytest.raises((BotoCoreError, ClientError)) as raised:
            s3_client(proxy.endpoint, minio).put_object(Bucket=bucket, Key=f"{key}/o", Body=b"payload")
        counts = proxy.injected()
    if kind == "slow_down":
        assert isinstance(raised.value, ClientError)
        assert raised.value.response["Error"]["Code"] == "SlowDown"
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    landed = direct.list_objects_v2(Bucket=bucket, Prefix=f"{key}/o").get("KeyCount", 0) == 1
    assert landed == (kind != "reset"), (kind, raised.value)
    assert counts[kind] == 1, counts


def test_proxy_seed_replays_the_same_faults(minio: Service, prefix: str) -> None:
    """One client's requests meet the same faults through two proxies with the same seed."""
    upstream = address(minio.client_env()["AWS_ENDPOINT_URL"])
    bucket, key = prefix[len("s3://"):].split("/", 1)

    def outcomes(seed: int) -> list[str]:
        seen = []
        with FaultProxy(upstream, Faults(lost_reply=0.3, slow_down=0.3), seed=seed, name="replay") as proxy:
            client = s3_client(proxy.endpoint, minio)
            for n in range(24):
                try:
                    client.put_object(Bucket=bucket, Key=f"{key}/r{n}", Body=b"x")
                    seen.append("ok")
                except ClientError as exc:
                    seen.append(exc.response["Error"]["Code"])
                except BotoCoreError:
                    seen.append("lost")
        return seen

    first, again, other = outcomes(SEED), outcomes(SEED), outcomes(SEED + 1)
    assert first == again, (first, again)
    assert first != other and {"ok", "SlowDown", "lost"} <= set(first), (first, other)


def test_lock_database_goes_away(postgres: Service) -> None:
    """The TCP proxy's outage cuts PostgreSQL sessions and refuses new ones, then lets them in."""
    import psycopg

    dsn = postgres.client_env()["STRATA_PG_DSN"]
    host, port = address(dsn)
    with FaultProxy((host, port), seed=SEED, mode="tcp", name="pg") as proxy:
        proxied = dsn.replace(f"{host}:{port}", proxy.endpoint)
        conn = psycopg.connect(proxied, connect_timeout=5, autocommit=True)
        assert conn.execute("SELECT 1").fetchone() == (1,)
        proxy.begin_outage(3.0)
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
        conn.close()
        with pytest.raises(psycopg.OperationalError, match="refused"):
            psycopg.connect(proxied, connect_timeout=5)
        assert proxy.injected()["outage"] == 1 and proxy.injected()["outage_cut"] == 1, proxy.counts
        deadline = time.monotonic() + 60
        while True:  # back once the window closes
            try:
                with psycopg.connect(proxied, connect_timeout=5, autocommit=True) as again:
                    assert again.execute("SELECT 2").fetchone() == (2,)
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "the proxy did not listen again after its outage"
                time.sleep(0.1)


# -- a branch fast-forward, and the Spark streaming sink --------------------------------------------
def test_branch_fast_forward_under_faults(minio: Service, postgres: Service, judge_service: Service,
                                          tmp_path: Path) -> None:
    """Writers commit to a branch through the faults, main is fast-forwarded to it (retried until
    it succeeds, under the table lock), and the writers go on on main, with compaction and expiry
    alongside: main then holds every batch once and reads everywhere, for Java Paimon too."""
    with network("branch", "jdbc-lock", minio, postgres, pg_faults=Faults(reset=0.10)) as net:
        catalog = strata.load_catalog(net.warehouse, **net.direct)
        catalog.create_database("db")
        table = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["p"], primary_keys=["p", "k"],
                                     options={**TABLES["fixed"], **RETENTION})
        for seq in (1, 2):
            table.write(batch("fixed", 0, seq), commit_user="writer-0", identifier=seq)
        table.create_branch("dev", from_snapshot=table.snapshot_manager.latest_id())
        began = time.monotonic()
        on_branch = run_processes(net, {0: [3, 4], 1: [3, 4]}, [("fixed", "db.t$branch_dev")], [])
        assert_no_failures(on_branch)
        forward = new_report("fast-forward")
        with_retries(forward, random.Random(SEED), "fast-forward of main to dev",
                     lambda catalog: catalog.get_table("db.t").fast_forward("dev"), net.warehouse, net.proxied)
        on_main = run_processes(net, {0: [5, 6], 1: [5, 6]}, [("fixed", "db.t")], ["db.t"])
        assert_no_failures(on_main)
        injected, seconds = net.injected(), time.monotonic() - began
        print(f"\nbranch: {replay_hint()}; {seconds:.1f} s; injected {injected}; on the branch "
              f"{summary(on_branch)}; fast-forward retried {dict(forward['errors'])}; on main {summary(on_main)}")

        main = load(net.warehouse, net.direct, "db.t")
        assert actual("fixed", main) == expected("fixed", {0: list(range(1, 7)), 1: list(range(3, 7))}), replay_hint()
        check_snapshots(main)
        java_reads_as_strata(net.warehouse, net.direct, ["db.t"], tmp_path / "warehouse")
        before = actual("fixed", main)
        expire_and_clean(main)
        assert actual("fixed", load(net.warehouse, net.direct, "db.t")) == before, replay_hint()
        assert injected["s3"]["lost_reply"] and injected["s3"]["slow_down"], injected


SPARK_FILES = 6
SPARK_ROWS = 20
SPARK_RUNS = 20  # restarts of the query allowed before the test gives up


@pytest.mark.spark
def test_spark_streaming_sink_through_faults(session: SparkSession, minio: Service, tmp_path: Path) -> None:
    """The ``strata`` streaming sink writes through the faults; a query that fails is started
    again from its checkpoint until the source is consumed: every source row lands exactly once."""
    source = tmp_path / "source"
    source.mkdir()
    for n in range(SPARK_FILES):
        ids = range(n * SPARK_ROWS, (n + 1) * SPARK_ROWS)
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}),
                       source / f"part-{n:03d}.parquet")
        os.utime(source / f"part-{n:03d}.parquet", (1_000_000 + n, 1_000_000 + n))
    direct = s3_options(minio.client_env()["AWS_ENDPOINT_URL"], minio)
    warehouse = f"s3://warehouse/it-faults-spark-{uuid.uuid4().hex[:8]}"
    catalog = strata.load_catalog(warehouse, **direct)
    catalog.create_database("db")
    catalog.create_table("db.events", pa.schema([("id", pa.int64()), ("v", pa.string())]))
    from pyspark.errors import StreamingQueryException

    failures: list[str] = []
    try:
        upstream = address(direct["s3.endpoint"])
        with FaultProxy(upstream, S3_FAULTS, seed_for("spark:s3"), name="spark-s3") as proxy:
            sink = {f"catalog.{key}": value for key, value in s3_options(proxy.endpoint, minio).items()}
            for _ in range(SPARK_RUNS):
                stream = session.readStream.schema("id bigint, v string").option("maxFilesPerTrigger", 1)
                query = (stream.parquet(str(source)).writeStream.format("strata").options(**sink)
                         .option("checkpointLocation", str(tmp_path / "checkpoint"))
                         .trigger(availableNow=True).start(f"{warehouse}#db.events"))
                try:
                    finished = query.awaitTermination(300)
                except StreamingQueryException as exc:  # the Python error is the last line naming one
                    named = [line for line in str(exc).splitlines() if "Error" in line or "Exception" in line]
                    failures.append((named or str(exc).splitlines() or [type(exc).__name__])[-1].strip()[:300])
                    continue
                assert finished, f"{replay_hint()}: the query did not finish in 300 s"
                break
            injected = proxy.injected()
        print(f"\nspark: {replay_hint()}; injected {injected}; {len(failures)} query restarts: {failures}")
        assert len(failures) < SPARK_RUNS, f"{replay_hint()}: the query never finished: {failures}"
        table = catalog.get_table("db.events")
        landed = Counter(table.to_arrow().column("id").to_pylist())
        assert landed == Counter(range(SPARK_FILES * SPARK_ROWS)), f"{replay_hint()}: {sorted(landed.items())}"
        check_snapshots(table)
    finally:
        S3FileIO(direct).delete_dir(warehouse)
