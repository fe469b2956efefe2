"""``make tpch SF=1 REFRESH=2``: load, refresh, query, report (see strata_platform.tpch.workload).

    python -m strata_platform.tpch --sf 1 --refresh 2     # services must run (make tpch starts them)

Prints per query the seconds of Trino on Strata, Trino native and Spark on Strata and the ratio of
the two Trino columns, after the load and after the refresh rounds; writes the chart to
``build/tpch-sf<SF>.svg`` and every number to ``build/tpch-sf<SF>.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from strata_platform.services.base import REPO_ROOT
from strata_platform.tpch import report
from strata_platform.tpch.workload import Tpch, peak_rss_mb


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.tpch", description=__doc__.splitlines()[0])
    parser.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (0.01 is Trino's 'tiny')")
    parser.add_argument("--refresh", type=int, default=2, help="refresh rounds (RF1 + RF2 each)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed rounds per query after a warm-up of both Trino sides, in alternating order "
                             "(the fastest counts; 1: one cold run each)")
    parser.add_argument("--out-dir", default=str(REPO_ROOT / "build"), help="where the SVG and JSON go")
    return parser


def start(scale_factor: float) -> Tpch:
    from strata.spark import register
    from strata_platform.services.iceberg_rest import IcebergRestService
    from strata_platform.services.spark import SparkService, s3a_conf, spark_session
    from strata_platform.services.trino import TrinoService

    SparkService().install()
    spark = spark_session("strata-tpch", **s3a_conf(), **{"spark.driver.memory": "3g",
                                            "spark.sql.execution.arrow.maxRecordsPerBatch": "100000"})
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return Tpch(scale_factor, spark, TrinoService(), IcebergRestService(),
                progress=lambda line: print(line, flush=True))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tpch = start(args.sf)
    result: dict[str, Any] = {"scale_factor": args.sf, "refresh_rounds": args.refresh}
    print(f"TPC-H SF {args.sf:g}: loading Trino's native tables (CTAS from {tpch.source})", flush=True)
    result["native_load_s"] = tpch.load_native()
    tpch.export_parquet()
    print("loading the same rows through Spark as plain Parquet (the reference)", flush=True)
    result["parquet_load_s"] = tpch.load_parquet()
    print("loading Strata tables through Spark (format('strata'))", flush=True)
    result["strata_load_s"] = tpch.load_strata()
    print(f"load: Strata {result['strata_load_s']['total']:.1f} s, Spark's Parquet writer "
          f"{result['parquet_load_s']['total']:.1f} s, Trino CTAS {result['native_load_s']['total']:.1f} s", flush=True)
    result["rows"] = {name: count for name, (count, _) in tpch.verify_load().items()}
    print(f"row counts and checksums equal the source: {result['rows']}", flush=True)
    phases = {"after load": tpch.run_all(repeat=args.repeat)}
    rounds = []
    for round_no in range(1, args.refresh + 1):
        native = tpch.refresh_native(round_no)
        strata = tpch.refresh_strata(round_no)
        visible = tpch.visibility_seconds()
        rounds.append({"round": round_no, "native_s": native, "strata_s": strata, "visibility_s": visible})
        print(f"refresh round {round_no}: native {native:.1f} s, Strata (Spark) {strata:.1f} s, "
              f"Trino sees it after {visible:.2f} s", flush=True)
    result["refresh"] = rounds
    if rounds:
        phases[f"after {len(rounds)} refresh rounds"] = tpch.run_all(repeat=args.repeat)
    print(report.table(phases))
    for phase, runs in phases.items():
        ratios = report.ratios(runs)
        worst = max(ratios, key=ratios.__getitem__)
        print(f"{phase}: geomean Trino on Strata / Trino native {report.geomean(list(ratios.values())):.2f} "
              f"(worst Q{worst}: {ratios[worst]:.2f})")
    out = Path(args.out_dir)
    name = f"tpch-sf{args.sf:g}"
    svg = report.svg(phases, f"TPC-H SF {args.sf:g}: seconds per query", out / f"{name}.svg")
    result["queries"] = {phase: {engine: {q: run.seconds for q, run in runs[engine].items()} for engine in runs}
                         for phase, runs in phases.items()}
    result["peak_rss_mb"] = peak_rss_mb(tpch.trino)
    result["median_refresh_s"] = statistics.median(r["strata_s"] for r in rounds) if rounds else None
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"chart: {svg}; peak RSS (MB): {result['peak_rss_mb']}")
    tpch.spark.stop()
    return 0


if __name__ == "__main__":
    started = time.perf_counter()
    code = main()
    print(f"done in {time.perf_counter() - started:.0f} s")
    sys.exit(code)
