"""TPC-H through the whole stack (``strata_platform.tpch``), as bench entries.

One run at ``BENCH_SCALE_FACTOR`` x ``--scale`` (SF 0.1 at scale 1: 600,000 lineitems, where the
data outweighs the fixed costs of a query and a commit; ``make tpch SF=1`` measures scale factor 1) does
the load (Spark into Strata, Trino CTAS into its native Iceberg catalog), the 22 queries on
Trino over Strata, Trino native and Spark over Strata (and Spark over the same rows as plain
Parquet, and through format("strata")), ``REFRESH_ROUNDS`` refresh rounds and the queries again
on the two Trino catalogs; its result is kept in the bench's work directory, keyed by the source
revision of strata and strata_platform (a changed source runs again), so the four entries share it:

TPCH_TRINO    geometric mean over the 22 queries of Trino on Strata / Trino native (the worse of
              after-load and after-refresh; the worst query is named).
TPCH_SPARK    geometric mean of Spark SQL over Strata (``strata.spark.read_table``: Spark's Parquet
              reader over the files Strata plans) / Spark SQL over plain Parquet (the native
              tables' files, on the same MinIO), each run timed from the creation of the views it
              reads (Strata's scan planning and deletion vectors; Spark's listing of the Parquet
              files) to its last row; and the same for format("strata") (the Python data source,
              every column through a Python worker; one run a query).
TPCH_LOAD     rows/s through Spark into Strata (from a local Parquet copy of the rows), against
              Spark writing the same DataFrames as plain Parquet to the same MinIO; Trino's CTAS
              into its native catalog (generating the rows from its tpch catalog) beside it.
TPCH_REFRESH  seconds per refresh round through Spark (RF1 + RF2 on orders and lineitem, one
              changelog write of +I and -D rows per table) / Trino's INSERT and DELETE of the
              same rounds, after a first round that warms both sides (reported beside it);
              beside it too, how long until Trino sees a round once Spark's commits are
              published (p99, no target).

TPCH_SF1      TPC-H at SF 1 (``SF1_SCALE_FACTOR`` x ``--scale``), its own run, opt-in (only with
              ``--only TPCH_SF1``: many minutes): the geometric mean of Trino on Strata / Trino
              native after the load (``ratio``, the target's) and after the refresh rounds
              (``ratio_after_refresh``), the worst query of either, the load's seconds. Spark
              runs the queries once after the load (its results are compared), without the
              plain-Parquet and format("strata") references.

Needs the platform package (``strata_platform``) and MinIO, PostgreSQL, the Iceberg REST catalog
and Trino running (``make bench`` starts them); skipped with a note otherwise.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strata.bench.spec import PartResult, Target, Workload

BENCH_SCALE_FACTOR = 0.1
SF1_SCALE_FACTOR = 1.0  # TPCH_SF1's, x --scale
REFRESH_ROUNDS = 2  # timed rounds, after one warm-up round of each side
REPEAT = 3  # timed rounds of each query after a warm-up, in alternating order on Trino; the fastest counts


def unavailable() -> str | None:
    if importlib.util.find_spec("strata_platform") is None:
        return "the platform package (strata_platform) is not installed"
    from strata_platform.services import registry
    from strata_platform.services.base import port_open

    down = [name for name in ("minio", "postgres", "iceberg_rest", "trino") if not port_open(registry.get(name).port)]
    return f"not running: {', '.join(down)}" if down else None


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(max(v, 1e-9)) for v in values) / len(values))


def source_revision() -> str:
    """A digest of the code the run measures (strata's and strata_platform's sources and query
    files) and of this run's settings: a result cached under another revision is not reused."""
    import strata
    import strata_platform

    digest = hashlib.sha256(f"{BENCH_SCALE_FACTOR}/{REFRESH_ROUNDS}/{REPEAT}".encode())
    for package in (strata, strata_platform):
        root = Path(str(package.__file__)).parent
        for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".sql")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def run_once(work_dir: str, scale: float) -> PartResult:
    """The whole TPC-H run at ``BENCH_SCALE_FACTOR`` x `scale`, shared by the four SF 0.1 entries."""
    return run_tpch(work_dir, round(BENCH_SCALE_FACTOR * scale, 4))


def run_sf1(work_dir: str, scale: float) -> PartResult:
    """TPCH_SF1's run: SF 1 x `scale`, Trino's two catalogs only (Spark runs the queries once after
    the load, to check its results, and is not timed against plain Parquet)."""
    return run_tpch(work_dir, round(SF1_SCALE_FACTOR * scale, 4), spark_references=False)


def run_tpch(work_dir: str, scale_factor: float, spark_references: bool = True) -> PartResult:
    """One TPC-H run at `scale_factor` (cached in work_dir by scale factor, settings and source
    revision: entries of one scale factor share one run, and a run after a code change starts
    afresh). Without `spark_references`, Spark's plain-Parquet load and queries and its queries
    through format("strata") are left out."""
    suffix = "" if spark_references else "-trino"
    cache = os.path.join(work_dir, f"tpch-sf{scale_factor:g}{suffix}-{source_revision()}.json")
    if os.path.exists(cache):
        with open(cache) as f:
            cached: PartResult = json.load(f)
        return cached
    from strata_platform.tpch.__main__ import start
    from strata_platform.tpch.workload import peak_rss_mb

    tpch = start(scale_factor)
    tpch.work_dir = Path(work_dir) / "tpch"
    result: PartResult = {"scale_factor": scale_factor}
    result["native_load_s"] = tpch.load_native()["total"]
    tpch.export_parquet()
    if spark_references:
        result["parquet_load_s"] = tpch.load_parquet()["total"]  # Spark's own writer first: it warms the JVM alike
    result["strata_load_s"] = tpch.load_strata()["total"]
    result["rows"] = sum(count for count, _ in tpch.verify_load().values())
    # the three engines' results are compared with Trino native's (run_all raises on a difference)
    result["after_load"] = _seconds(tpch.run_all(repeat=REPEAT, spark_repeat=REPEAT if spark_references else 1))
    if spark_references:
        # the reference: the native tables' own Parquet files, on the same MinIO, through the same s3a
        result["spark_parquet"] = {str(q): r.seconds
                                   for q, r in tpch.run_spark(source="parquet-s3", repeat=REPEAT).items()}
        result["spark_python"] = {str(q): r.seconds for q, r in tpch.run_spark(source="strata-python").items()}
    rounds = []
    for round_no in range(1, REFRESH_ROUNDS + 2):  # round 1 warms both sides (reported, not in the ratio)
        native = tpch.refresh_native(round_no)
        strata = tpch.refresh_strata(round_no)
        rounds.append({"native_s": native, "strata_s": strata, "visibility_s": tpch.visibility_seconds()})
    result["refresh"] = rounds
    # Trino only: Spark's results after the refresh are checked by the integration test
    result["after_refresh"] = _seconds(tpch.run_all(with_spark=False, repeat=REPEAT))
    result["processes_peak_rss_mb"] = peak_rss_mb(tpch.trino)
    tpch.spark.stop()
    with open(cache, "w") as f:
        json.dump(result, f)
    return result


def _seconds(runs: Mapping[str, Mapping[int, Any]]) -> dict[str, dict[str, float]]:
    return {engine: {str(q): run.seconds for q, run in by_query.items()} for engine, by_query in runs.items()}


def _ratios(mine: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, float]:
    return {q: mine[q] / max(reference[q], 1e-9) for q in mine}


def _trino_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    r = parts["tpch"]
    phases = {phase: _ratios(r[phase]["trino_strata"], r[phase]["trino_native"])
              for phase in ("after_load", "after_refresh")}
    means = {phase: _geomean(list(ratios.values())) for phase, ratios in phases.items()}
    worst_phase = max(means, key=means.__getitem__)
    worst = max(phases[worst_phase], key=phases[worst_phase].__getitem__)
    return {"value": round(_geomean(list(r["after_load"]["trino_strata"].values())), 3),
            "reference": round(_geomean(list(r["after_load"]["trino_native"].values())), 3),
            "ratio": round(max(means.values()), 3), "ratio_after_load": round(means["after_load"], 3),
            "ratio_after_refresh": round(means["after_refresh"], 3),
            "worst_query": f"Q{worst} {phases[worst_phase][worst]:.2f}x ({worst_phase})",
            "scale_factor": r["scale_factor"], "processes_peak_rss_mb": r["processes_peak_rss_mb"]}


def _sf1_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """TPCH_SF1's row: the geomean of Trino on Strata / Trino native after the load (``ratio``) and
    after the refresh rounds, and the worst query of either phase with its ratio."""
    r = parts["tpch_sf1"]
    phases = {phase: _ratios(r[phase]["trino_strata"], r[phase]["trino_native"])
              for phase in ("after_load", "after_refresh")}
    worst_phase, worst = max(((phase, q) for phase, ratios in phases.items() for q in ratios),
                             key=lambda pq: phases[pq[0]][pq[1]])
    slow = {phase: {f"Q{q}": round(ratio, 2) for q, ratio in sorted(ratios.items(), key=lambda x: -x[1])
                    if ratio > 1.1} for phase, ratios in phases.items()}
    return {"value": round(_geomean(list(r["after_load"]["trino_strata"].values())), 3),
            "reference": round(_geomean(list(r["after_load"]["trino_native"].values())), 3),
            "ratio": round(_geomean(list(phases["after_load"].values())), 3),
            "ratio_after_refresh": round(_geomean(list(phases["after_refresh"].values())), 3),
            "worst_query": f"Q{worst} {phases[worst_phase][worst]:.2f}x ({worst_phase})",
            "worst_query_ratio": round(phases[worst_phase][worst], 3), "slow_queries": slow,
            "load": f"{r['strata_load_s']:.1f} s ({r['native_load_s']:.1f} s)",
            "scale_factor": r["scale_factor"], "processes_peak_rss_mb": r["processes_peak_rss_mb"]}


def _spark_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    r = parts["tpch"]
    ratios = _ratios(r["after_load"]["spark_strata"], r["spark_parquet"])
    python = _ratios(r["spark_python"], r["spark_parquet"])
    worst = max(ratios, key=ratios.__getitem__)
    return {"value": round(_geomean(list(r["after_load"]["spark_strata"].values())), 3),
            "reference": round(_geomean(list(r["spark_parquet"].values())), 3),
            "ratio": round(_geomean(list(ratios.values())), 3), "worst_query": f"Q{worst} {ratios[worst]:.2f}x",
            "ratio_python_source": round(_geomean(list(python.values())), 3)}


def _load_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    r = parts["tpch"]
    strata, parquet, native = (r["rows"] / r[k] for k in ("strata_load_s", "parquet_load_s", "native_load_s"))
    return {"value": round(strata), "reference": round(parquet), "ratio": round(strata / parquet, 3),
            "rows": r["rows"], "trino_ctas_rows_per_s": round(native), "ratio_to_trino_ctas": round(strata / native, 3)}


def _refresh_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """Seconds per round of the rounds after the first. The first Spark write after the query phase
    starts Python workers afresh (PySpark stops idle ones), and Trino's first statements warm it:
    the first round is reported beside the ratio, not in it."""
    first, *rounds = parts["tpch"]["refresh"]
    visible = sorted(x["visibility_s"] for x in rounds)
    strata = sum(x["strata_s"] for x in rounds) / len(rounds)
    native = sum(x["native_s"] for x in rounds) / len(rounds)
    return {"value": round(strata, 2), "reference": round(native, 2), "ratio": round(strata / native, 3),
            "visibility_p99_s": round(visible[min(len(visible) - 1, math.ceil(0.99 * len(visible)) - 1)], 3),
            "first_round": f"{first['strata_s']:.2f} s vs {first['native_s']:.2f} s"}


_PARTS = {"tpch": run_once}
_WHAT = f"TPC-H SF {BENCH_SCALE_FACTOR:g} x scale, {REFRESH_ROUNDS} refresh rounds"
WORKLOADS = {
    "TPCH_TRINO": Workload(
        f"{_WHAT}: geomean of Trino on Strata / Trino native over the 22 queries (worse of after load and "
        "after refresh)", Target("<=", 1.1), "ratio", "geomean s Strata (Trino native); ratio", _PARTS, _trino_summary,
        unavailable=unavailable, extra_lines=(("ratio after load", "ratio_after_load"),
                                              ("ratio after refresh", "ratio_after_refresh"),
                                              ("worst query", "worst_query"))),
    "TPCH_SPARK": Workload(
        f"{_WHAT}: geomean of Spark SQL on Strata (read_table) / Spark SQL on plain Parquet of the same rows "
        "(the native tables' files, same MinIO), each run timed with the planning of the tables it reads",
        Target("<=", 1.2), "ratio", "geomean s Strata (plain Parquet); ratio", _PARTS, _spark_summary,
        unavailable=unavailable, extra_lines=(("worst query", "worst_query"),
                                              ("ratio of format('strata')", "ratio_python_source"))),
    "TPCH_LOAD": Workload(
        f"{_WHAT}: rows/s of the load, Spark writing a local Parquet copy of the rows into Strata / Spark "
        "writing the same DataFrames as plain Parquet to the same MinIO (same source, same order, each timed "
        "from its start)", Target(">=", 0.7), "ratio", "rows/s Strata (Spark Parquet); ratio", _PARTS,
        _load_summary, unavailable=unavailable,
        extra_lines=(("Trino CTAS rows/s (from its tpch catalog; no target)", "trino_ctas_rows_per_s"),
                     ("Strata / Trino CTAS", "ratio_to_trino_ctas"))),
    "TPCH_REFRESH": Workload(
        f"{_WHAT}: seconds per refresh round (RF1 + RF2), Spark into Strata (one changelog write per table) / "
        "Trino INSERT and DELETE",
        Target("<=", 1.5), "ratio", "s per round Strata (Trino INSERT/DELETE); ratio", _PARTS, _refresh_summary,
        unavailable=unavailable,
        extra_lines=(("Trino sees a round, p99 s (no target)", "visibility_p99_s"),
                     ("warm-up round, Strata vs Trino (no target)", "first_round"))),
    "TPCH_SF1": Workload(
        f"TPC-H SF {SF1_SCALE_FACTOR:g} x scale, {REFRESH_ROUNDS} refresh rounds: geomean of Trino on Strata / "
        "Trino native over the 22 queries after the load (after the refresh beside it); warm, alternating, best of "
        f"{REPEAT}; run only when named (make bench ONLY=TPCH_SF1)", Target("<=", 1.0), "ratio",
        "geomean s Strata (Trino native); ratio after load", {"tpch_sf1": run_sf1}, _sf1_summary,
        unavailable=unavailable, opt_in=True,
        extra_lines=(("ratio after refresh", "ratio_after_refresh"), ("worst query", "worst_query"),
                     ("queries above 1.1x", "slow_queries"),
                     ("load, Spark into Strata (Trino CTAS)", "load"))),
}
