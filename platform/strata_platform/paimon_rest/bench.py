"""PAIMON_REST, a ``make bench`` entry (``strata.bench`` finds it through the ``strata.bench``
entry point group, and registers its workloads when imported: the engine's runner, the
platform's workloads).

PAIMON_REST  Java Paimon 1.3.1 (the Paimon judge, one JVM per side) commits through Strata's
             Paimon REST catalog (in this process: a JDBC catalog on SQLite) against the same
             commits straight to Paimon's filesystem catalog, the warehouses on MinIO (as the
             stack runs it), then on local disk (a side figure, where a commit is cheapest and the
             server's fixed cost weighs most). Each round, each side (in an order that alternates)
             makes COMMITS commits of ROWS rows to its own append table; the ratio is the median
             over rounds of REST time / filesystem time: what the server adds to a commit.
PAIMON_REST_SNAPSHOT  the p99 of ``GET .../snapshot`` on a table of SNAPSHOTS snapshots, over GETS
             calls on one keep-alive connection (the call clients make on each commit try, scan
             and streaming poll).
"""

from __future__ import annotations

import functools
import http.client
import json
import shutil
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from strata.bench import register
from strata.bench.spec import PartResult, Target, Workload

COMMITS = 20  # commits per side and round
ROWS = 10
ROUNDS = 7
WARM_UP_COMMITS = 10
SNAPSHOTS = 1_000
GETS = 1_000
TOKEN = "bench"
PREFIX = "strata"
FIELDS = [{"name": "id", "type": "BIGINT NOT NULL"}, {"name": "v", "type": "STRING"}]


def _batch(start: int) -> list[dict[str, Any]]:
    return [{"rows": [{"id": start + i, "v": f"v{start + i}"} for i in range(ROWS)]}]


def _commit_seconds(session: Any, table: str, first_id: int, commits: int) -> float:
    spec = [{"table": table, "commits": [_batch(first_id + c * ROWS)[0] for c in range(commits)]}]
    began = time.perf_counter()
    session.call("write", spec=spec)
    return time.perf_counter() - began


def _warehouses(work_dir: str, storage: str) -> tuple[str, str, dict[str, str]]:
    """The REST catalog's warehouse, the filesystem catalog's, and the storage options (S3's)."""
    if storage == "local":
        local = Path(work_dir) / "paimon_rest"
        shutil.rmtree(local, ignore_errors=True)
        return str(local / "rest"), str(local / "filesystem"), {}
    from strata.bench import minio

    root = f"s3://{minio.bucket()}/{minio.run_prefix('paimon-rest')}"
    return f"{root}/rest", f"{root}/filesystem", minio.s3_options()


def commit_rounds(work_dir: str, scale: float, storage: str) -> PartResult:
    from strata.catalog.jdbc import JdbcCatalog
    from strata_platform.paimon_rest import PaimonRestCatalog, start
    from strata_platform.services.paimon_java import JudgeSession

    rest_warehouse, fs_warehouse, s3 = _warehouses(work_dir, storage)
    database = Path(work_dir).resolve() / f"paimon-rest-{storage}.sqlite"
    database.unlink(missing_ok=True)
    catalog = JdbcCatalog(rest_warehouse, {"uri": f"sqlite:///{database}", **s3})
    server = start(PaimonRestCatalog(catalog, prefix=PREFIX), port=0, token=TOKEN)
    rest = {"metastore": "rest", "uri": f"http://127.0.0.1:{server.server_port}", "token.provider": "bear",
            "token": TOKEN, "warehouse": PREFIX, **s3, **({"s3.path.style.access": "true"} if s3 else {})}
    direct_options = {"warehouse": fs_warehouse, **s3, **({"s3.path.style.access": "true"} if s3 else {})}
    commits, rounds = max(2, round(COMMITS * scale)), max(2, round(ROUNDS * min(1.0, scale * 10)))
    walls: dict[str, list[float]] = {"rest": [], "filesystem": []}
    try:
        catalog.create_database("bench")
        with JudgeSession(rest) as via_rest, JudgeSession(direct_options) as direct:
            sides = {"rest": via_rest, "filesystem": direct}
            for session in sides.values():  # create, then warm both JVMs up alike
                session.call("write", spec=[{"table": "bench.t", "fields": FIELDS, "commits": _batch(0)}])
                _commit_seconds(session, "bench.t", ROWS, WARM_UP_COMMITS)
            next_id = ROWS * (WARM_UP_COMMITS + 1)
            for r in range(rounds):
                for name in (("rest", "filesystem") if r % 2 == 0 else ("filesystem", "rest")):
                    walls[name].append(_commit_seconds(sides[name], "bench.t", next_id, commits))
                next_id += commits * ROWS
            counts = {name: session.call("read", table="bench.t")["rows"] for name, session in sides.items()}
        verified = len(counts["rest"]) == len(counts["filesystem"]) == next_id
    finally:
        server.shutdown()
        server.server_close()
        catalog.close()
    return {"walls": walls, "commits": commits, "verified": verified}


def snapshot_gets(work_dir: str, scale: float) -> PartResult:
    from strata.catalog.jdbc import JdbcCatalog
    from strata_platform.paimon_rest import PaimonRestCatalog, start

    root = Path(work_dir) / "paimon_rest_gets"
    shutil.rmtree(root, ignore_errors=True)
    catalog = JdbcCatalog(str(root), {})
    snapshots, gets = max(10, round(SNAPSHOTS * scale)), max(50, round(GETS * scale))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    catalog.create_database("bench")
    table = catalog.create_table("bench.t", schema)
    for i in range(snapshots):
        table.write(pa.table({"id": [i], "v": [f"v{i}"]}, schema=schema))
    server = start(PaimonRestCatalog(catalog, prefix=PREFIX), port=0, token=TOKEN)
    connection = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    path = f"/v1/{PREFIX}/databases/bench/tables/t/snapshot"
    millis: list[float] = []
    try:
        for i in range(gets + 10):
            began = time.perf_counter()
            connection.request("GET", path, headers=headers)
            answer = connection.getresponse()
            body = json.loads(answer.read())
            if i >= 10:  # after ten untimed calls (the table's first load)
                millis.append((time.perf_counter() - began) * 1000)
            if answer.status != 200 or body["snapshot"]["snapshot"]["id"] != snapshots:
                raise AssertionError(f"GET snapshot answered {answer.status}: {body}")
    finally:
        connection.close()
        server.shutdown()
        server.server_close()
        catalog.close()
    return {"millis": millis, "snapshots": snapshots}


def _ratios(part: PartResult) -> dict[str, float]:
    walls, commits = part["walls"], part["commits"]
    rest_ms, fs_ms = (statistics.median(walls[s]) / commits * 1000 for s in ("rest", "filesystem"))
    ratio = statistics.median(r / f for r, f in zip(walls["rest"], walls["filesystem"], strict=True))
    return {"ratio": ratio, "rest_ms": rest_ms, "fs_ms": fs_ms}


def _commit_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    minio, local = _ratios(parts["minio"]), _ratios(parts["local"])
    return {"ratio": minio["ratio"], "value": minio["rest_ms"], "reference": minio["fs_ms"],
            "commits_per_s": 1000 / minio["rest_ms"], "reference_commits_per_s": 1000 / minio["fs_ms"],
            "local_ratio": local["ratio"], "local_ms": local["rest_ms"], "local_reference_ms": local["fs_ms"],
            "rounds": len(parts["minio"]["walls"]["rest"]),
            "verified": parts["minio"]["verified"] and parts["local"]["verified"]}


def _gets_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    millis = parts["gets"]["millis"]
    return {"p99_ms": float(np.percentile(millis, 99)), "p50_ms": float(np.median(millis)),
            "snapshots": parts["gets"]["snapshots"], "calls": len(millis)}


def _unavailable() -> str | None:
    from strata.bench import minio
    from strata_platform.services.base import ServiceError
    from strata_platform.services.spark import _java_major, java_version

    try:
        version = java_version()
    except (ServiceError, OSError) as exc:  # no Java, or one that does not run
        return f"Java Paimon needs Java 17+ ({exc})"
    if _java_major(version) < 17:
        return f"Java Paimon needs Java 17+, found {version}"
    return minio.unavailable()


WORKLOADS = {
    "PAIMON_REST": Workload(
        "Java Paimon's commits (10 rows each) through Strata's Paimon REST catalog vs the same commits straight "
        "to Paimon's filesystem catalog, both on MinIO (local disk beside it)",
        Target("<=", 1.2), "ratio", "ms per commit, ratio to Java's filesystem catalog",
        {"minio": functools.partial(commit_rounds, storage="minio"),
         "local": functools.partial(commit_rounds, storage="local")},
        _commit_summary, _unavailable,
        (("commits/s through REST (MinIO)", "commits_per_s"),
         ("commits/s, filesystem catalog (MinIO)", "reference_commits_per_s"),
         ("local disk: ratio to the filesystem catalog", "local_ratio"),
         ("local disk: ms per commit through REST", "local_ms"))),
    "PAIMON_REST_SNAPSHOT": Workload(
        "GET .../snapshot of a table of 1,000 snapshots from Strata's Paimon REST catalog, one keep-alive "
        "connection: p99 latency",
        Target("<=", 10.0), "p99_ms", "p99 ms", {"gets": snapshot_gets}, _gets_summary, None,
        (("p50 ms", "p50_ms"),)),
}
register(WORKLOADS)
