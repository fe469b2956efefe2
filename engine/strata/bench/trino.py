"""Trino reading Strata tables as Iceberg tables, an extension of ``strata.bench`` (see strata.bench.spec).

Trino's ``strata`` catalog is its Iceberg connector on Strata's Iceberg REST catalog; the tables are
written here on MinIO, in the warehouse that catalog serves, with ``metadata.iceberg.storage=rest-catalog``
(Iceberg metadata published by every commit).

TRINO_SCAN        the W2 data at W2's scale (a base, then W2's upsert commits, half updates: 1.5M live
                  rows at scale 1) written as a deletion-vector primary-key table (W2's layout:
                  partitioned by dt, key (dt, id), one bucket per partition; Trino reads its files
                  above level 0 and the position deletes of its deletion vectors, which its writer
                  purges above 1% of a file's rows, as for any table published to Iceberg), and the
                  same live rows as a plain append table. Median latency (of SCAN_RUNS, interleaved)
                  of a full scan, ``SELECT count(*), sum(k2), sum(v1)``, and of a selective filter,
                  ``SELECT * ... WHERE k2 BETWEEN x AND x + 1000`` (~0.1% of the rows, fetched), on
                  each table in the same run. ratio: DV table / append table (the median of the
                  pairs' ratios, each pair querying both back to back), the worse of the two queries;
                  both tables must answer alike (``verified``). SCAN_REPEATS such runs, each in its
                  own process with its own tables; the report gives the median of each figure, and
                  Trino's own CPU time ratio beside it. Side figure, no target: the same ratio from
                  one run on SMALL_SCAN_SCALE of the rows, where Trino's fixed cost per split (the DV
                  table has about 10 files, the append table 4) weighs most.
TRINO_VISIBILITY  VISIBILITY_COMMITS upserts of one row each to a deletion-vector table; after each,
                  Trino is polled until it returns the new value. Latency from the start of the write
                  (write, commit, Iceberg metadata, Trino's catalog load and read) to the first query
                  that sees it; p50 and p99 after WARMUP_COMMITS.

Connection, from the environment ``strata-services run minio iceberg_rest trino -- ...`` (or
``eval "$(strata-services env minio iceberg_rest trino)"``) sets: ``STRATA_TRINO_URL``,
``STRATA_ICEBERG_REST_URI``, ``AWS_ENDPOINT_URL`` / ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` /
``AWS_REGION``; the warehouse the REST catalog serves is ``STRATA_ICEBERG_REST_WAREHOUSE`` (default
``s3://warehouse/iceberg-rest``, the service's), Trino's catalog ``STRATA_TRINO_CATALOG`` (default
``strata``). Without them, or when a service does not answer, both are skipped with a note.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pyarrow as pa

import strata
from strata.bench import data as gen
from strata.bench.spec import PartResult, Target, Workload
from strata.bench.workloads import PK_BUCKETS

DEFAULT_WAREHOUSE = "s3://warehouse/iceberg-rest"
TRINO_SCAN_SCALE = 1.0  # of W2's rows at scale 1: 1,000,000 base rows and 10 commits of 100,000
# the side figure's share: 300k live rows, where a query takes as long as at 1.5M (fixed costs)
SMALL_SCAN_SCALE = 0.2
SCAN_RUNS = 11
WARM_UP_PAIRS = 3  # untimed rounds of both queries on both tables first
SCAN_REPEATS = 3  # independent runs (processes, tables); the report takes the median of each figure
FILTER_RANGE = 1000  # k2 is uniform in [0, 1,000,000): ~0.1% of the rows
VISIBILITY_COMMITS = 20
WARMUP_COMMITS = 2
VISIBILITY_BASE_ROWS = 1000
POLL_SECONDS = 0.05
VISIBILITY_TIMEOUT = 60.0
_ENV = ("STRATA_TRINO_URL", "STRATA_ICEBERG_REST_URI", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY")
_ICEBERG = {"metadata.iceberg.storage": "rest-catalog", "metadata.iceberg.statistics": "compaction"}  # stats on


def warehouse() -> str:
    return os.environ.get("STRATA_ICEBERG_REST_WAREHOUSE", DEFAULT_WAREHOUSE)


def trino_catalog() -> str:
    return os.environ.get("STRATA_TRINO_CATALOG", "strata")


def _s3_options() -> dict[str, str]:
    env = os.environ
    return {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env.get("AWS_REGION", "us-east-1")}


def _get_json(url: str) -> Any:
    request = urllib.request.Request(url)
    token = os.environ.get("STRATA_ICEBERG_REST_TOKEN", "").strip()
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def unavailable() -> str | None:
    """Why Trino, the REST catalog or MinIO cannot be used here, or None."""
    missing = [name for name in _ENV if not os.environ.get(name)]
    if missing:
        return f"{', '.join(missing)} not set (strata-services run minio iceberg_rest trino -- ...)"
    try:
        import trino  # noqa: F401
    except ImportError as exc:
        return f"the trino client is not installed (pip install 'strata[trino]'): {exc}"
    from strata.bench.minio import unavailable as minio_unavailable

    why = minio_unavailable()
    if why:
        return why
    for name, url in (("Iceberg REST catalog", f"{os.environ['STRATA_ICEBERG_REST_URI']}/health"),
                      ("Trino", f"{os.environ['STRATA_TRINO_URL']}/v1/info")):
        try:
            answer = _get_json(url)
        except Exception as exc:
            return f"{name} at {url} does not answer: {exc}"
        if name == "Trino" and answer.get("starting", True):
            return f"Trino at {url} is still starting"
    try:
        if trino_catalog() not in {row[0] for row in _query("SHOW CATALOGS")}:
            return f"Trino has no catalog {trino_catalog()!r} (the Iceberg REST catalog)"
    except Exception as exc:
        return f"Trino does not answer queries: {exc}"
    return None


# -- Trino -----------------------------------------------------------------------------------------


def _connection() -> Any:
    import trino

    url = urllib.parse.urlsplit(os.environ["STRATA_TRINO_URL"])
    return trino.dbapi.connect(host=url.hostname, port=url.port or 8080, user="strata-bench",
                               http_scheme=url.scheme or "http", catalog=trino_catalog())


def _query(sql: str, connection: Any = None) -> list[list[Any]]:
    return _query_stats(sql, connection)[0]


def _query_stats(sql: str, connection: Any = None) -> tuple[list[list[Any]], dict[str, Any]]:
    """Rows and Trino's statistics of the query (cpuTimeMillis, totalSplits, processedRows...)."""
    cursor = (connection or _connection()).cursor()
    try:
        cursor.execute(sql)
        rows: list[list[Any]] = cursor.fetchall()
        return rows, dict(cursor.stats or {})
    finally:
        cursor.close()


@contextmanager
def _database(prefix: str) -> Iterator[tuple[strata.Catalog, str]]:
    """A fresh database in the REST catalog's warehouse, dropped (with its files) afterwards."""
    catalog = strata.load_catalog(warehouse(), **_s3_options())
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    catalog.create_database(name)
    try:
        yield catalog, name
    finally:
        catalog.drop_database(name, cascade=True)


def _check_served(database: str, table: str) -> None:
    """The REST catalog serves the table (else the warehouse is not the one it serves)."""
    url = f"{os.environ['STRATA_ICEBERG_REST_URI']}/v1/namespaces/{database}/tables"
    names = {t["name"] for t in _get_json(url)["identifiers"]}
    if table not in names:
        raise RuntimeError(f"the Iceberg REST catalog does not serve {database}.{table}: is "
                           f"STRATA_ICEBERG_REST_WAREHOUSE ({warehouse()}) the warehouse it serves?")


# -- TRINO_SCAN ---------------------------------------------------------------------------------------


def _w2_tables(catalog: strata.Catalog, database: str, share: float) -> tuple[int, int]:
    """The DV table (base + upsert commits) and the append table (its live rows) of `share` of W2's
    rows at scale 1; (rows, commits)."""
    data = gen.w2_data(share)
    dv = catalog.create_table(f"{database}.w2dv", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                              options={**_ICEBERG, "bucket": str(PK_BUCKETS), "deletion-vectors.enabled": "true"})
    dv.write(data.base)
    for chunk in data.commits:
        dv.write(chunk)
    live = gen.final_rows(data)
    append = catalog.create_table(f"{database}.w2append", gen.SCHEMA, partition_keys=["dt"], options=_ICEBERG)
    append.write(live)
    return live.num_rows, len(data.commits)


def _timed(sql: str, connection: Any) -> tuple[float, float, list[list[Any]]]:
    """Wall ms (as the client sees it), Trino's CPU ms and the rows of a query."""
    started = time.perf_counter()
    rows, stats = _query_stats(sql, connection)
    return (time.perf_counter() - started) * 1000, float(stats.get("cpuTimeMillis", 0)), rows


def _files(connection: Any, database: str, table: str) -> dict[int, int]:
    rows = _query(f'SELECT content, count(*) FROM {database}."{table}$files" GROUP BY content', connection)
    return {int(content): int(n) for content, n in rows}


def scan_part(work_dir: str, scale: float) -> PartResult:
    return _scan(scale * TRINO_SCAN_SCALE)


def small_scan_part(work_dir: str, scale: float) -> PartResult:
    return _scan(scale * SMALL_SCAN_SCALE)


def _scan(share: float) -> PartResult:
    with _database("bench_trino_scan") as (catalog, database):
        started = time.perf_counter()
        live_rows, commits = _w2_tables(catalog, database, share)
        write_seconds = time.perf_counter() - started
        for table in ("w2dv", "w2append"):
            _check_served(database, table)
        connection = _connection()
        tables = {"dv": f"{database}.w2dv", "append": f"{database}.w2append"}
        scan = "SELECT count(*), sum(k2), sum(v1) FROM {}"
        xs = [int(x) for x in np.random.default_rng(gen.SEED + 50).integers(0, 1_000_000 - FILTER_RANGE, SCAN_RUNS)]
        timings: dict[str, dict[str, list[float]]] = {
            kind: {"scan": [], "filter": [], "scan_cpu": [], "filter_cpu": []} for kind in tables}
        answers: dict[str, dict[str, Any]] = {kind: {} for kind in tables}
        # untimed: Trino's first queries of a table load and plan it, and compile its readers'
        # code (the first pairs of a run took up to twice as long as the last)
        for x in xs[:WARM_UP_PAIRS]:
            for name in tables.values():
                _query(scan.format(name), connection)
                _query(f"SELECT * FROM {name} WHERE k2 BETWEEN {x} AND {x + FILTER_RANGE}", connection)
        for run, x in enumerate(xs):
            # interleaved, the order alternating, so that load on the machine falls on both alike
            for kind in (("dv", "append") if run % 2 == 0 else ("append", "dv")):
                name = tables[kind]
                ms, cpu, rows = _timed(scan.format(name), connection)
                timings[kind]["scan"].append(ms)
                timings[kind]["scan_cpu"].append(cpu)
                answers[kind]["scan"] = rows[0][:2]  # count and sum(k2): exact
                ms, cpu, rows = _timed(f"SELECT * FROM {name} WHERE k2 BETWEEN {x} AND {x + FILTER_RANGE}",
                                       connection)
                timings[kind]["filter"].append(ms)
                timings[kind]["filter_cpu"].append(cpu)
                answers[kind].setdefault("filter", []).append(sorted(row[0] for row in rows))
        files = {kind: _files(connection, database, name.split(".")[1]) for kind, name in tables.items()}
    result: PartResult = {
        "live_rows": live_rows, "commits": commits, "write_seconds": write_seconds, "xs": xs,
        "verified": answers["dv"] == answers["append"] and answers["dv"]["scan"][0] == live_rows,
        "rows_per_filter": [len(ids) for ids in answers["dv"]["filter"]],
        "dv_data_files": files["dv"].get(0, 0), "dv_delete_files": files["dv"].get(1, 0),
        "append_data_files": files["append"].get(0, 0),
    }
    for kind in tables:
        for q in ("scan", "filter", "scan_cpu", "filter_cpu"):
            result[f"{kind}_{q}_ms"] = statistics.median(timings[kind][q])
            result[f"{kind}_{q}_runs_ms"] = [round(t, 1) for t in timings[kind][q]]
    return result


def _paired_ratio(mine: list[float], reference: list[float]) -> float:
    return statistics.median(m / max(r, 1e-9) for m, r in zip(mine, reference, strict=True))


def _scan_run(r: PartResult) -> dict[str, float]:
    """One run's ratios: the median of each interleaved pair's DV/append ratio (the two queries of a
    pair ran back to back, under the same load from the rest of the machine), the worse of the two
    queries, and Trino's own CPU time ratios (what the DV table costs, whatever else runs)."""
    scan = _paired_ratio(r["dv_scan_runs_ms"], r["append_scan_runs_ms"])
    filt = _paired_ratio(r["dv_filter_runs_ms"], r["append_filter_runs_ms"])
    return {"scan": scan, "filter": filt, "worse": max(scan, filt),
            "scan_cpu": r["dv_scan_cpu_ms"] / max(r["append_scan_cpu_ms"], 1.0),
            "filter_cpu": r["dv_filter_cpu_ms"] / max(r["append_filter_cpu_ms"], 1.0)}


_SMALL_PART = "trino_small"


def _small_details(small: PartResult) -> dict[str, Any]:
    """The side run's figures (SMALL_SCAN_SCALE of the rows)."""
    run = _scan_run(small)
    return {"ratio": round(run["worse"], 3), "scan_ratio": round(run["scan"], 3),
            "filter_ratio": round(run["filter"], 3),
            **{k: small[k] for k in ("live_rows", "dv_data_files", "append_data_files", "verified",
                                     "dv_scan_ms", "append_scan_ms")}}


def _scan_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """The median over the runs (each its own process, tables and Trino queries) of each figure;
    the small run's ratio beside them."""
    results = [r for name, r in parts.items() if name != _SMALL_PART]
    runs = [_scan_run(r) for r in results]
    small = parts.get(_SMALL_PART)
    small_details = _small_details(small) if small is not None else None

    def median(key: str) -> float:
        return round(statistics.median(run[key] for run in runs), 3)

    def median_ms(key: str) -> float:
        return round(statistics.median(r[key] for r in results), 1)

    first = results[0]
    return {
        "value": median_ms("dv_scan_ms"), "reference": median_ms("append_scan_ms"),
        "ratio": median("worse"), "scan_ratio": median("scan"), "filter_ratio": median("filter"),
        "dv_filter_ms": median_ms("dv_filter_ms"), "append_filter_ms": median_ms("append_filter_ms"),
        "verified": all(r["verified"] for r in parts.values()),
        "scan_cpu_ratio": median("scan_cpu"), "filter_cpu_ratio": median("filter_cpu"), "runs": len(runs),
        "small_ratio": small_details["ratio"] if small_details else None,
        "details": {"small": small_details,
                    "worse_ratio_per_run": [round(run["worse"], 3) for run in runs],
                    "scan_ratio_per_run": [round(run["scan"], 3) for run in runs],
                    "filter_ratio_per_run": [round(run["filter"], 3) for run in runs],
                    "cpu_ratio_per_run": [[round(run["scan_cpu"], 3), round(run["filter_cpu"], 3)] for run in runs],
                    **{k: first[k] for k in ("live_rows", "commits", "write_seconds", "dv_data_files",
                                             "dv_delete_files", "append_data_files", "rows_per_filter",
                                             "dv_scan_runs_ms", "append_scan_runs_ms", "dv_filter_runs_ms",
                                             "append_filter_runs_ms", "dv_scan_cpu_ms", "append_scan_cpu_ms",
                                             "dv_filter_cpu_ms", "append_filter_cpu_ms")}},
    }


# -- TRINO_VISIBILITY ---------------------------------------------------------------------------------

_VIS_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64()),
                         pa.field("name", pa.string())])


def _vis_rows(ids: list[int], value: int) -> pa.Table:
    return pa.table({"id": ids, "v": [value] * len(ids), "name": [f"n{i}-{value}" for i in ids]}, schema=_VIS_SCHEMA)


def _poll(sql: str, expected: Any, connection: Any, started: float) -> float:
    """Seconds from `started` until `sql` answers `expected`."""
    while True:
        rows = _query(sql, connection)
        if rows and rows[0][0] == expected:
            return time.perf_counter() - started
        if time.perf_counter() - started > VISIBILITY_TIMEOUT:
            raise TimeoutError(f"not visible to Trino after {VISIBILITY_TIMEOUT:.0f}s: {sql} gave {rows}")
        time.sleep(POLL_SECONDS)


def visibility_part(work_dir: str, scale: float) -> PartResult:
    with _database("bench_trino_vis") as (catalog, database):
        table = catalog.create_table(f"{database}.events", _VIS_SCHEMA, primary_keys=["id"], options={
            **_ICEBERG, "bucket": "2", "deletion-vectors.enabled": "true"})
        table.write(_vis_rows(list(range(VISIBILITY_BASE_ROWS)), 0))
        _check_served(database, "events")
        connection = _connection()
        name = f"{database}.events"
        visible, committed = [], []
        for i in range(WARMUP_COMMITS + VISIBILITY_COMMITS):
            key, value = (i * 37) % VISIBILITY_BASE_ROWS, i + 1  # an upsert: the old row goes to a vector
            started = time.perf_counter()
            table.write(_vis_rows([key], value))
            commit_seconds = time.perf_counter() - started
            seconds = _poll(f"SELECT v FROM {name} WHERE id = {key}", value, connection, started)
            if i >= WARMUP_COMMITS:
                visible.append(seconds * 1000)
                committed.append(commit_seconds * 1000)
        count = _query(f"SELECT count(*) FROM {name}", connection)[0][0]
    return {"visible_ms": visible, "commit_ms": committed, "rows": count, "expected_rows": VISIBILITY_BASE_ROWS}


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def _visibility_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    r = parts["trino"]
    visible, committed = r["visible_ms"], r["commit_ms"]
    return {
        "p50_ms": round(_percentile(visible, 50), 1), "p99_ms": round(_percentile(visible, 99), 1),
        "value": round(_percentile(visible, 99), 1), "max_ms": round(max(visible), 1),
        "commit_p50_ms": round(_percentile(committed, 50), 1),
        "after_commit_p50_ms": round(_percentile([v - c for v, c in zip(visible, committed, strict=True)], 50), 1),
        "verified": r["rows"] == r["expected_rows"],
        "details": {"commits": len(visible), "visible_ms": [round(v, 1) for v in visible],
                    "commit_ms": [round(c, 1) for c in committed]},
    }


WORKLOADS = {
    "TRINO_SCAN": Workload(
        f"Trino (Iceberg REST) full scan and k2 filter: W2 data ({TRINO_SCAN_SCALE:g} of W2's rows) as a "
        f"deletion-vector PK table vs the same rows as an append table, on MinIO ({SCAN_REPEATS} runs of "
        f"{SCAN_RUNS} query pairs)",
        Target("<=", 1.2), "ratio", f"scan ms DV (append); ratio DV/append, worse of scan/filter, median of "
        f"{SCAN_REPEATS} runs", {**{f"trino_{i + 1}": scan_part for i in range(SCAN_REPEATS)},
                                 _SMALL_PART: small_scan_part}, _scan_summary,
        unavailable=unavailable,
        extra_lines=(("scan ratio DV/append", "scan_ratio"), ("filter ms DV", "dv_filter_ms"),
                     ("filter ms append", "append_filter_ms"), ("filter ratio DV/append", "filter_ratio"),
                     ("Trino CPU ratio, scan", "scan_cpu_ratio"), ("Trino CPU ratio, filter", "filter_cpu_ratio"),
                     (f"ratio at {SMALL_SCAN_SCALE:g} of the rows (side, one run)", "small_ratio"))),
    "TRINO_VISIBILITY": Workload(
        f"one-row upsert to a DV table until Trino sees it (write start to first query that does), "
        f"{VISIBILITY_COMMITS} commits", Target("<=", 3000.0), "p99_ms", "visible p99 ms",
        {"trino": visibility_part}, _visibility_summary, unavailable=unavailable,
        extra_lines=(("visible p50 ms", "p50_ms"), ("commit p50 ms", "commit_p50_ms"),
                     ("after commit p50 ms", "after_commit_p50_ms"))),
}
