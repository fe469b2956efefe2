"""Faults a network alone does not reach, met through the fault proxies of ``test_faults``: two jobs
sharing one commit user, a lock that times out between a commit's APPEND and its COMPACT, and the
Paimon REST server's catalog failing right after it published a client's snapshot.

* Two batch jobs with one commit user and no commit identifier (a Spark job with ``commit-user``
  set: every commit carries the batch identifier) append to one table through the faults. A batch
  that fails is run again only if its rows are not in the table, as the README asks. Each batch
  must be in the table once, and the snapshot a job was told is its own must be the one that
  added its rows (a retry must not take the other job's snapshot for its own).
* Right after a writer's APPEND is published, another connection takes the table's JDBC lock row
  (on the proxied PostgreSQL) for a few seconds, so the COMPACT of the same commit cannot get the
  lock within ``lock-acquire-timeout``. The batch is durable: the commit succeeds, the batch is
  in once, and every file the latest snapshot names exists (a dynamic-bucket commit whose writers
  share a bucket merges their index files: the published APPEND names the merged one).
* The Paimon REST server's PostgreSQL goes away right after it published a Java client's
  snapshot. The client must hear success, so that the batch job is not run again (it would write
  its rows twice).

The lock and the outage are started by a hook on the catalog's snapshot publisher, at the moment
they must strike; the rest of the traffic goes through the proxies as in ``test_faults``.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import random
import socket
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from test_faults import (
    AGGREGATE,
    APPEND_SCHEMA,
    PK_SCHEMA,
    ROWS,
    SEED,
    Network,
    actual,
    address,
    assert_no_failures,
    batch,
    check_snapshots,
    expected,
    load,
    network,
    new_report,
    replay_hint,
    summary,
    with_retries,
)

import strata
from strata.catalog.lock import LOCK_TABLE
from strata.manifest.manifest_entry import FileKind, merge_entries
from strata.operation.expire import TableFiles
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.table.write import TableWrite
from strata_platform.faults import Faults
from strata_platform.services.base import Service

pytestmark = [pytest.mark.faults, pytest.mark.minio, pytest.mark.postgres]

QUIET = Faults()


# -- two jobs, one commit user --------------------------------------------------------------------
SHARED_USER = "nightly-load"  # the commit-user both jobs were configured with
JOB_BATCHES = 6


def job_batch(job: int, seq: int) -> pa.Table:
    return batch("append", job, seq)


def landed_batches(table: strata.Table, snapshot_id: int | None = None) -> Counter:
    """Rows per (job, batch) in the table (at `snapshot_id`, else its latest snapshot)."""
    data = table.to_arrow(snapshot_id=snapshot_id, columns=["w", "b"])
    return Counter(zip(data.column("w").to_pylist(), data.column("b").to_pylist(), strict=True))


def run_batch(catalog: Any, job: int, seq: int, tried: list[bool]) -> list[int]:
    """One run of batch `seq`: after a failed run, first look whether its rows landed (a batch
    commit is not deduplicated). The snapshots the commit reports; [] when found landed."""
    table = catalog.get_table("db.events")
    if tried and landed_batches(table)[(job, seq)]:
        return []
    tried.append(True)
    result = table.write(job_batch(job, seq), commit_user=SHARED_USER)
    assert result.snapshot_ids, f"batch {seq} of job {job}: a commit of new rows published nothing: {result}"
    return list(result.snapshot_ids)


def shared_user_job(warehouse: str, options: dict[str, str], job: int, start: Any, out: Any) -> None:
    """Commit JOB_BATCHES batches with the shared commit user and no identifier, each run again
    until it succeeds or is found in the table; reports the snapshots each commit named."""
    report = {**new_report(f"writer-{job}"), "acknowledged": {}}
    rng = random.Random(f"{SEED}:job:{job}")
    try:
        start.wait(timeout=300)
        for seq in range(JOB_BATCHES):
            tried: list[bool] = []
            snapshot_ids = with_retries(
                report, rng, f"batch {seq} of job {job}",
                functools.partial(run_batch, job=job, seq=seq, tried=tried), warehouse, options)
            report["acknowledged"][seq] = snapshot_ids
            report["committed" if snapshot_ids else "duplicates"] += 1
    except BaseException:
        report["failure"] = traceback.format_exc()[-3000:]
    out.put(report)


def run_jobs(net: Network, target: Callable[..., None], jobs: int) -> dict[str, dict[str, Any]]:
    """`target(warehouse, options, job, start, out)` in `jobs` processes through the proxies."""
    ctx = mp.get_context("spawn")  # boto3, pyarrow's S3 and database pools are not fork-safe
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(net.warehouse, net.proxied, job, start, out)) for job in range(jobs)]
    try:
        for proc in procs:
            proc.start()
        start.set()
        reports = [out.get(timeout=600) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        return {r["name"]: r for r in reports}
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()


def test_two_jobs_with_one_commit_user(minio: Service, postgres: Service) -> None:
    """Every batch of both jobs is in once, and the APPEND snapshot each job was given for a
    batch is the one that added that batch's rows."""
    with network("shared-user", "conditional-put", minio, postgres) as net:
        catalog = strata.load_catalog(net.warehouse, **net.direct)
        catalog.create_database("db")
        catalog.create_table("db.events", APPEND_SCHEMA)
        reports = run_jobs(net, shared_user_job, 2)
        print(f"\nshared user: {replay_hint()}; injected {net.injected()}; {summary(reports)}")
        assert_no_failures(reports)
        table = load(net.warehouse, net.direct, "db.events")
        want = Counter({(job, seq): ROWS for job in range(2) for seq in range(JOB_BATCHES)})
        assert landed_batches(table) == want, f"{replay_hint()}: {summary(reports)}"
        for report in reports.values():
            job = int(report["name"].split("-")[1])
            for seq, snapshot_ids in report["acknowledged"].items():
                if not snapshot_ids:
                    continue  # found in the table after a failed run
                added = snapshot_ids[0]
                before = landed_batches(table, added - 1)[(job, seq)] if added > 1 else 0
                assert (landed_batches(table, added)[(job, seq)], before) == (ROWS, 0), (
                    f"{replay_hint()}: job {job} was told snapshot {added} holds its batch {seq}, but that "
                    f"snapshot did not add it: {table.snapshot_manager.snapshot(added)}")
        check_snapshots(table)
        assert net.injected()["s3"]["lost_reply"] + net.injected()["s3"]["slow_down"], net.injected()


# -- a lock that times out between a commit's APPEND and its COMPACT -------------------------------
LOCK_TIMEOUT = {"lock-acquire-timeout": "1 s", "lock.expire-time": "10 s"}
HELD_SECONDS = 4  # the other holder's lease: longer than the acquire timeout, short enough to pass
COMPACTING = {"full-compaction.delta-commits": "1"}  # each commit compacts what it wrote
LOCK_TABLES = {
    "fixed": {"bucket": "2", **AGGREGATE, **COMPACTING},
    "dv": {"bucket": "2", "deletion-vectors.enabled": "true", **AGGREGATE, **COMPACTING},
    "dynamic": {"bucket": "-1", **AGGREGATE, **COMPACTING},
}


@contextmanager
def lock_taken_after_append(catalog: Any, dsn: str) -> Iterator[list[str]]:
    """Right after a batch's snapshot (an APPEND) is published under the catalog's lock, another
    owner takes the table's lock row for HELD_SECONDS (its lease; then any writer may take it
    over). Yields the lock ids taken; the rows are removed at the end."""
    original = catalog.snapshot_publisher
    taken: list[str] = []
    owner = f"other-job-{uuid.uuid4().hex[:8]}"

    def publisher(store: Any) -> Callable[[SnapshotManager, Snapshot], bool]:
        publish = original(store)
        assert publish is not None, f"{store.identifier} is not published under the JDBC lock"
        lock_id = catalog.locks.lock_id(store.identifier.database, store.identifier.table)

        def publish_then_take_lock(manager: SnapshotManager, snapshot: Snapshot) -> bool:
            published = publish(manager, snapshot)
            if published and snapshot.commit_kind != "COMPACT" and lock_id not in taken:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    conn.execute(f"INSERT INTO {LOCK_TABLE} (lock_id, expire_time_seconds, lock_owner) "
                                 "VALUES (%s, %s, %s)", (lock_id, HELD_SECONDS, owner))
                taken.append(lock_id)
            return published
        return publish_then_take_lock

    catalog.snapshot_publisher = publisher
    try:
        yield taken
    finally:
        del catalog.snapshot_publisher
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {LOCK_TABLE} WHERE lock_owner = %s", (owner,))


def missing_files(table: strata.Table) -> list[str]:
    """The data and index files the latest snapshot names that do not exist."""
    files = TableFiles(table)
    snapshot = table.snapshot_manager.latest()
    assert snapshot is not None
    entries = files.entries(snapshot.base_manifest_list) + files.entries(snapshot.delta_manifest_list)
    paths = [p for e in merge_entries(entries) if e.kind == FileKind.ADD for p in files.data_paths(e)]
    paths += [files.index_path(e) for e in files.index_entries(snapshot.index_manifest)]
    return [p for p in paths if not table.file_io.exists(p)]


def commit_second_batch(table: strata.Table, kind: str) -> Any:
    """Batch 2 of writer 0 in one commit. Into the dynamic-bucket table it comes from two writers
    of one bucket (Spark tasks given rows of one partition), one of them compacting: the commit
    merges their index files of that bucket."""
    data = batch(kind, 0, 2)
    if kind != "dynamic":
        return table.write(data, commit_user="writer-0", identifier=2)
    halves = [data.filter(pa.compute.equal(data.column("p"), p)) for p in (0, 1)]
    first, second = TableWrite(table, commit_user="writer-0"), TableWrite(table, compaction=False,
                                                                          commit_user="writer-0", sequence_offset=1000)
    with first, second:
        first.write_arrow(pa.concat_tables([halves[0], halves[1].slice(0, 1)]))
        second.write_arrow(halves[1].slice(1))
        messages = first.prepare_commit(wait_compaction=True) + second.prepare_commit()
    rewritten = Counter((e.partition, e.bucket) for m in messages for e in m.index_changes if e.kind == FileKind.ADD)
    assert max(rewritten.values()) == 2, f"the two writers did not both rewrite one bucket's index: {rewritten}"
    return table.new_commit("writer-0").commit(messages, identifier=2)


@pytest.mark.parametrize("kind", list(LOCK_TABLES))
def test_lock_times_out_between_append_and_compact(minio: Service, postgres: Service, kind: str) -> None:
    """The COMPACT of a commit cannot get the table lock (another holder took it right after the
    APPEND published): the commit still succeeds, its batch reads once, and the latest snapshot's
    files all exist; the next commit goes through once the other holder's lease ended."""
    with network(f"lock-{kind}", "jdbc-lock", minio, postgres, s3_faults=QUIET, pg_faults=QUIET) as net:
        catalog = strata.load_catalog(net.warehouse, **net.direct)
        catalog.create_database("db")
        keys = {"partition_keys": ["p"], "primary_keys": ["p", "k"]}
        catalog.create_table("db.t", PK_SCHEMA, options=LOCK_TABLES[kind], **keys)
        catalog.get_table("db.t").write(batch(kind, 0, 1), commit_user="writer-0", identifier=1)

        proxied = strata.load_catalog(net.warehouse, **{**net.proxied, **LOCK_TIMEOUT})
        with lock_taken_after_append(proxied, net.direct["uri"]) as taken:
            result = commit_second_batch(proxied.get_table("db.t"), kind)
        print(f"\nlock timeout, {kind}: {result}")
        assert taken and result.snapshot_ids, (taken, result)

        table = load(net.warehouse, net.direct, "db.t")
        assert actual(kind, table) == expected(kind, {0: [1, 2]}), f"{kind}: {result}"
        assert not missing_files(table), f"{kind}: the latest snapshot names missing files: {missing_files(table)}"
        check_snapshots(table)
        proxied.get_table("db.t").write(batch(kind, 0, 3), commit_user="writer-0", identifier=3)
        assert actual(kind, load(net.warehouse, net.direct, "db.t")) == expected(kind, {0: [1, 2, 3]})
        proxied.close()


# -- the Paimon REST server's catalog fails right after a commit ------------------------------------
REST_TOKEN = "faults-paimon-rest"
REST_FIELDS = [{"name": "id", "type": "BIGINT"}, {"name": "v", "type": "STRING"}]
OUTAGE_SECONDS = 2.0
JOB_RUNS = 5  # runs of the batch job a scheduler allows


def cut_database_then_mirror(net: Network) -> Callable[[Any], None]:
    """The REST server's work after a published commit, preceded by an outage of its PostgreSQL
    proxy (connections cut, new ones refused for OUTAGE_SECONDS); it returns or raises once the
    database is reachable again, so that only this step meets the outage."""
    from strata_platform.paimon_rest.catalog import mirror_after_commit

    def after_commit(table: Any) -> None:
        net.pg.begin_outage(OUTAGE_SECONDS)
        try:
            mirror_after_commit(table)
        finally:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(address(net.pg.endpoint), timeout=5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the database proxy did not come back"
                    time.sleep(0.1)
    return after_commit


def commit_errors(server: Any) -> int:
    """Commit requests the REST server answered with a 5xx."""
    return int(sum(sample.value for metric in server.metrics.registry.collect() for sample in metric.samples
                   if sample.name.endswith("_requests_total") and "commit" in sample.labels.get("endpoint", "")
                   and sample.labels.get("status", "").startswith("5")))


def test_paimon_rest_commit_succeeds_when_its_catalog_fails_after_publishing(minio: Service,
                                                                            postgres: Service) -> None:
    """A Java batch job appends through Strata's Paimon REST server, whose PostgreSQL (through the
    proxy) goes away right after the job's snapshot is published: the job is told success, and a
    scheduler that re-runs failed jobs does not write its rows twice."""
    from strata_platform.paimon_rest import PaimonRestCatalog, start
    from strata_platform.services.paimon_java import JudgeError, JudgeSession

    with network("rest", "conditional-put", minio, postgres, s3_faults=QUIET, pg_faults=QUIET) as net:
        catalog = strata.load_catalog(net.warehouse, **net.proxied)
        catalog.create_database("db")
        rest = PaimonRestCatalog(catalog, prefix="faults", after_commit=cut_database_then_mirror(net))
        server = start(rest, port=0, token=REST_TOKEN)
        client = {"metastore": "rest", "uri": f"http://127.0.0.1:{server.server_port}", "token.provider": "bear",
                  "token": REST_TOKEN, "warehouse": "faults", "s3.endpoint": net.direct["s3.endpoint"],
                  "s3.access-key": net.direct["s3.access-key"], "s3.secret-key": net.direct["s3.secret-key"],
                  "s3.path.style.access": "true"}
        rows = [{"id": i, "v": f"row-{i}"} for i in range(ROWS)]
        failures: list[str] = []
        try:
            with JudgeSession(client) as java:
                java.call("write", spec=[{"table": "db.events", "fields": REST_FIELDS, "commits": []}])
                for _ in range(JOB_RUNS):  # the batch job, run again by its scheduler until it succeeds
                    try:
                        java.call("write", spec=[{"table": "db.events", "commits": [{"rows": rows}]}])
                        break
                    except JudgeError as exc:
                        failures.append(str(exc)[:300])
        finally:
            server.shutdown()
            server.server_close()
        print(f"\nrest: injected {net.injected()}; failed runs {failures}")
        assert net.injected()["pg"]["outage"] == 1, net.injected()
        answered = commit_errors(server)
        assert not answered and not failures, f"commit requests answered 5xx: {answered}; failed job runs: {failures}"
        ids = load(net.warehouse, net.direct, "db.events").to_arrow(columns=["id"]).column("id").to_pylist()
        assert Counter(ids) == Counter(range(ROWS)), f"rows after {len(failures) + 1} runs: {sorted(ids)}"
