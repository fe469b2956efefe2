"""Strata tables in the Python data stack against the same engine over plain Parquet, an extension
of ``strata.bench`` (see strata.bench.spec).

The rows: W2's final rows (1.5M at scale 1, four ``dt`` partitions) in two Strata tables, and as
plain Parquet, one file per ``dt`` value, as each table has one file per partition:

- ``append``: an append table (bucket -1) written in one commit: the headline figure, since its
  files hold what the plain files hold, so the ratio is the cost of reading through Strata;
- ``pk``: W2's primary-key table (the base and W2's upsert commits), fully compacted, so that it
  is read without a merge (an uncompacted one merges its sorted runs): a side figure, no target.

POLARS_SCAN  ``strata.polars.scan(table).filter(k2 < 500,000).group_by("dt").agg(...)`` (about half
             the rows: count, sum(k2), sum(v1), max(ts)), against ``polars.scan_parquet`` over the
             plain files with the same query.
DUCKDB_SCAN  the same query in SQL over the table registered by ``Table.to_duckdb`` (registered in
             the timed part, as the reference's ``read_parquet`` lists its files in it), against
             ``read_parquet`` of the plain files, in the same DuckDB connection.
RAY_READ     ``strata.ray.read(table).materialize()`` (every column, one task per split) against
             ``ray.data.read_parquet`` of the plain files, on one local Ray of 2 CPUs. Ray 2.60's
             default Parquet reader (datasource V2) reads the four files in one task after a listing
             task that waits for seconds on this kind of machine; the reference is its V1 reader,
             one task per file, Ray's fastest here.

Each workload runs in one process, in rounds: every round queries the reference and both tables
back to back, in an order that rotates from round to round, after untimed rounds. The ratio is
the median over rounds of the append table's time / the reference's (the PK table's beside it),
so that a slow moment of the machine falls on all sides of a round alike; every side's answer is
checked against the reference's (``verified``). CPU figures are this process's (all its threads),
so for RAY_READ the driver's only, not the workers'.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

import strata
from strata.bench import data as gen
from strata.bench.spec import PartResult, Target, Workload
from strata.bench.workloads import COMPRESSION, COMPRESSION_LEVEL, PK_BUCKETS, Timer, _fresh, _parquet_files
from strata.table.table import Table

SIDES = ("reference", "append", "pk")
QUERY_ROUNDS = 11
QUERY_WARM_UP = 2
RAY_ROUNDS = 7
RAY_WARM_UP = 1
K2_BELOW = 500_000  # k2 is uniform in [0, 1,000,000): about half the rows
_READY = "stack-ready.json"
_OPTIONS = {"file.compression": COMPRESSION, "file.compression.zstd-level": str(COMPRESSION_LEVEL)}
_SQL = ("SELECT dt, count(*) AS n, sum(k2) AS k2, sum(v1) AS v1, max(ts) AS ts FROM {source} "
        f"WHERE k2 < {K2_BELOW} GROUP BY dt ORDER BY dt")

Answer = list[tuple[Any, ...]]
Query = Callable[[], Answer]


# -- the tables and the plain files -------------------------------------------------------------------


def stack_tables(work_dir: str, scale: float) -> tuple[dict[str, Table], list[str]]:
    """The append and compacted primary-key tables and the plain Parquet files of the same rows,
    built unless an earlier workload of this run built them at this scale."""
    ready = f"{work_dir}/{_READY}"
    if os.path.exists(ready):
        with open(ready) as f:
            if json.load(f).get("scale") == scale:
                catalog = strata.load_catalog(f"{work_dir}/stack")
                return ({name: catalog.get_table(f"bench.{name}") for name in ("append", "pk")},
                        _parquet_files(f"{work_dir}/stack-ref"))
    upserts = gen.w2_data(scale)
    final = gen.final_rows(upserts)
    catalog = strata.load_catalog(_fresh(f"{work_dir}/stack"))
    catalog.create_database("bench")
    pk = catalog.create_table("bench.pk", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                              options={**_OPTIONS, "bucket": str(PK_BUCKETS), "write-only": "true"})
    for chunk in (upserts.base, *upserts.commits):
        pk.write(chunk)
    pk.compact(full=True)
    append = catalog.create_table("bench.append", gen.SCHEMA, partition_keys=["dt"],
                                  options={**_OPTIONS, "bucket": "-1"})
    append.write(final)
    directory = _fresh(f"{work_dir}/stack-ref")
    for dt in gen.DTS:
        pq.write_table(final.filter(pc.equal(final["dt"], dt)), f"{directory}/{dt}.parquet",
                       compression=COMPRESSION, compression_level=COMPRESSION_LEVEL)
    with open(ready, "w") as f:
        json.dump({"scale": scale}, f)
    return {"append": catalog.get_table("bench.append"), "pk": catalog.get_table("bench.pk")}, \
        _parquet_files(directory)


def _file_counts(tables: Mapping[str, Table], files: Sequence[str]) -> dict[str, int]:
    counts = {name: sum(len(s.files) for s in t.new_scan().plan().splits) for name, t in tables.items()}
    return {"reference": len(files), **counts}


# -- rounds ------------------------------------------------------------------------------------------


def _same_answer(got: Answer, expected: Answer) -> bool:
    """Equal rows, floats within rounding (sums added in another order)."""
    def same(a: Any, b: Any) -> bool:
        return math.isclose(a, b, rel_tol=1e-9) if isinstance(a, float) else bool(a == b)

    return len(got) == len(expected) and all(
        len(g) == len(e) and all(same(a, b) for a, b in zip(g, e, strict=True))
        for g, e in zip(got, expected, strict=True))


def _rounds(queries: Mapping[str, Query], rounds: int, warm_up: int) -> dict[str, Any]:
    """Wall and CPU seconds of each side's query in `rounds` rounds after `warm_up` untimed ones;
    round i starts at side i (mod sides), so that no side always runs first."""
    names = list(queries)
    answers = {name: queries[name]() for name in names}
    verified = all(_same_answer(answers[n], answers["reference"]) for n in names)
    for _ in range(warm_up - 1):
        for name in names:
            queries[name]()
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    for i in range(rounds):
        for name in names[i % len(names):] + names[:i % len(names)]:
            with Timer() as timer:
                queries[name]()
            walls[name].append(timer.wall)
            cpus[name].append(timer.cpu)
    return {"walls": walls, "cpus": cpus, "verified": verified, "answer_rows": len(answers["reference"])}


def _paired_ratio(mine: Sequence[float], reference: Sequence[float]) -> float:
    return statistics.median(m / max(r, 1e-9) for m, r in zip(mine, reference, strict=True))


def _summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """The append table's figures (headline) against the reference, the PK table's beside them."""
    part = parts["rounds"]
    walls, cpus = part["walls"], part["cpus"]

    def ms(side: str, seconds: Mapping[str, list[float]] = walls) -> float:
        return round(statistics.median(seconds[side]) * 1000, 1)

    row: dict[str, Any] = {
        "value": ms("append"), "reference": ms("reference"), "pk_ms": ms("pk"),
        "cpu_ms": ms("append", cpus), "reference_cpu_ms": ms("reference", cpus), "pk_cpu_ms": ms("pk", cpus),
        "ratio": round(_paired_ratio(walls["append"], walls["reference"]), 3),
        "pk_ratio": round(_paired_ratio(walls["pk"], walls["reference"]), 3),
        "cpu_ratio": round(_paired_ratio(cpus["append"], cpus["reference"]), 3),
        "pk_cpu_ratio": round(_paired_ratio(cpus["pk"], cpus["reference"]), 3),
        "rounds": len(walls["reference"]), "verified": part["verified"], "rows": part["rows"],
        "files": " / ".join(str(part["files"][side]) for side in SIDES),
    }
    return row


# -- POLARS_SCAN --------------------------------------------------------------------------------------


def _polars_answer(frame: Any) -> Answer:
    import polars as pl

    aggregated = frame.filter(pl.col("k2") < K2_BELOW).group_by("dt").agg(
        pl.len().alias("n"), pl.col("k2").sum(), pl.col("v1").sum(), pl.col("ts").max())
    return [tuple(r) for r in aggregated.sort("dt").collect().rows()]


def polars_rounds(work_dir: str, scale: float) -> PartResult:
    import polars as pl

    import strata.polars

    tables, files = stack_tables(work_dir, scale)
    def lazy(table: Table) -> Query:
        return lambda: _polars_answer(strata.polars.scan(table))

    queries: dict[str, Query] = {"reference": lambda: _polars_answer(pl.scan_parquet(files)),
                                 **{name: lazy(table) for name, table in tables.items()}}
    return {**_rounds(queries, QUERY_ROUNDS, QUERY_WARM_UP), "files": _file_counts(tables, files),
            "rows": _row_count(files)}


# -- DUCKDB_SCAN --------------------------------------------------------------------------------------


def duckdb_rounds(work_dir: str, scale: float) -> PartResult:
    import duckdb

    tables, files = stack_tables(work_dir, scale)
    con = duckdb.connect()
    listed = ", ".join(f"'{f}'" for f in files)

    def registered(name: str, table: Table) -> Query:
        def query() -> Answer:
            table.to_duckdb(con, name)
            return con.sql(_SQL.format(source=name)).fetchall()
        return query

    queries: dict[str, Query] = {
        "reference": lambda: con.sql(_SQL.format(source=f"read_parquet([{listed}])")).fetchall(),
        **{name: registered(f"strata_{name}", table) for name, table in tables.items()},
    }
    return {**_rounds(queries, QUERY_ROUNDS, QUERY_WARM_UP), "files": _file_counts(tables, files),
            "rows": _row_count(files), "duckdb_threads": con.sql("SELECT current_setting('threads')").fetchall()[0][0]}


# -- RAY_READ -----------------------------------------------------------------------------------------

RAY_CPUS = 2


def ray_rounds(work_dir: str, scale: float) -> PartResult:
    import logging

    import ray
    import ray.data

    import strata.ray

    tables, files = stack_tables(work_dir, scale)
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        context.use_datasource_v2 = False  # see the module: V1 reads one task per file

        def answer(dataset: Any) -> Answer:
            return [(dataset.count(),)]

        def checked(dataset: Any) -> Answer:
            return [(dataset.count(), dataset.sum("k2"))]

        def read(table: Table) -> Query:
            return lambda: answer(strata.ray.read(table).materialize())

        queries: dict[str, Query] = {
            "reference": lambda: answer(ray.data.read_parquet(files, override_num_blocks=len(files)).materialize()),
            **{name: read(table) for name, table in tables.items()},
        }
        sums = {"reference": checked(ray.data.read_parquet(files).materialize()),
                **{name: checked(strata.ray.read(t).materialize()) for name, t in tables.items()}}
        result = _rounds(queries, RAY_ROUNDS, RAY_WARM_UP)
        # the timed answers are row counts: the rows' sums are compared once, here
        result["verified"] = result["verified"] and all(s == sums["reference"] for s in sums.values())
    finally:
        ray.shutdown()
    return {**result, "files": _file_counts(tables, files), "rows": _row_count(files), "ray_cpus": RAY_CPUS}


def _row_count(files: Sequence[str]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _missing(module: str, extra: str) -> Callable[[], str | None]:
    def unavailable() -> str | None:
        import importlib.util

        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'strata[{extra}]')"
        return None
    return unavailable


_EXTRA_LINES = (("PK table (compacted) ms", "pk_ms"), ("PK table ratio (side figure)", "pk_ratio"),
                ("CPU ratio (append; PK)", "cpu_ratios"), ("files (reference, append, PK)", "files"))


def _with_cpu_line(summarize: Callable[[Mapping[str, PartResult]], dict[str, Any]]
                   ) -> Callable[[Mapping[str, PartResult]], dict[str, Any]]:
    def summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
        row = summarize(parts)
        row["cpu_ratios"] = f"{row['cpu_ratio']:.2f}; {row['pk_cpu_ratio']:.2f}"
        return row
    return summary


WORKLOADS = {
    "POLARS_SCAN": Workload(
        "filtered aggregate through strata.polars.scan on an append table (a compacted PK table beside it) "
        "vs polars.scan_parquet over the same rows as plain Parquet",
        Target("<=", 1.3), "ratio", "query ms, ratio to Polars scan_parquet", {"rounds": polars_rounds},
        _with_cpu_line(_summary), _missing("polars", "polars"), _EXTRA_LINES),
    "DUCKDB_SCAN": Workload(
        "the same aggregate in DuckDB SQL over Table.to_duckdb (append table; compacted PK table beside it) "
        "vs DuckDB's read_parquet of the same rows as plain Parquet",
        Target("<=", 1.5), "ratio", "query ms, ratio to DuckDB read_parquet", {"rounds": duckdb_rounds},
        _with_cpu_line(_summary), _missing("duckdb", "duckdb"), _EXTRA_LINES),
    "RAY_READ": Workload(
        "strata.ray.read(...).materialize() of an append table (compacted PK table beside it) on a local "
        "Ray of 2 CPUs vs ray.data.read_parquet of the same rows as plain Parquet",
        Target("<=", 1.3), "ratio", "read ms, ratio to Ray read_parquet", {"rounds": ray_rounds},
        _summary, _missing("ray", "ray"), _EXTRA_LINES[:2] + _EXTRA_LINES[3:]),
}
