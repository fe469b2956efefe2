"""The benchmark page's figures, from the bench's JSON (``make bench`` writes ``build/bench.json``).

``python -m strata_platform.bench_report [BENCH_JSON]`` (``make bench-report``) copies the bench's
results into ``docs/benchmarks/results.json`` and draws, with matplotlib, the plots the page shows:

- ``peers.svg``: each workload against its reference (raw pyarrow, Trino's own Iceberg tables,
  Spark over plain Parquet), as Strata's speed relative to the reference: right of 1 is ahead;
- ``tpch.svg``: TPC-H seconds per query, Strata beside native, in Trino and Spark;
- ``growth.svg``: commit latency (p50, p99) as a table's snapshots grow.

The tables of the page are rendered from the same JSON at every docs build (``markdown_tables``).
A bench run of a subset keeps the figures of the other workloads, and the per-query TPC-H
seconds (from ``make tpch``) are carried over until a run brings new ones.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_JSON = REPO_ROOT / "build" / "bench.json"
DOCS_DIR = REPO_ROOT / "docs" / "benchmarks"
PLOTS = ("peers.svg", "tpch.svg", "growth.svg")
_TARGET = re.compile(r"(?:(\w+)\s+)?(>=|<=)\s*([-+0-9.e]+)")
_CURVE_POINT = re.compile(r"(\d+):([0-9.]+)/([0-9.]+)ms")


class BenchReportError(ValueError):
    """The bench JSON is not what the report reads; the message says what is wrong where."""


def load_results(path: Path) -> dict[str, Any]:
    """The bench report in ``path``, checked for the fields the page and the plots read."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchReportError(f"{path}: no such file (run `make bench` first)") from None
    except json.JSONDecodeError as exc:
        raise BenchReportError(f"{path}: not JSON: {exc}") from None
    if not isinstance(report, dict) or not isinstance(report.get("results"), list):
        raise BenchReportError(f"{path}: no 'results' list (is it the JSON `make bench` writes?)")
    for i, row in enumerate(report["results"]):
        missing = [key for key in ("workload", "target") if key not in row and "error" not in row]
        if missing:
            raise BenchReportError(f"{path}: result {i} ({row.get('workload', '?')}) has no {', '.join(missing)}")
    return report


def merge(previous: dict[str, Any] | None, latest: dict[str, Any]) -> dict[str, Any]:
    """The latest run's results, with the previous figures of workloads it did not run; its
    ``sources`` say which run measured which workloads (the caption's ``source``, newest first)."""
    if previous is None:
        return latest
    ran = {row["workload"] for row in latest["results"]}
    kept = [row for row in previous["results"] if row["workload"] not in ran]
    merged = {**latest, "results": latest["results"] + kept}
    if kept:
        sources = [{"workloads": sorted(ran), "from": _run_of(latest)}]
        for source in _sources(previous):
            left = [w for w in source["workloads"] if w not in ran]
            if left:
                sources.append({"workloads": left, "from": source["from"]})
        merged["sources"] = sources
        *newer, oldest = sources
        merged["source"] = "; ".join([*(f"{', '.join(s['workloads'])} from {s['from']}" for s in newer),
                                      f"the other workloads from {oldest['from']}"])
    if "tpch_per_query" not in latest and "tpch_per_query" in previous:
        merged["tpch_per_query"] = previous["tpch_per_query"]
    return merged


def _run_of(report: dict[str, Any]) -> str:
    return f"a run of {str(report.get('created', 'an unknown date'))[:10]}"


def _sources(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Which run measured which of the report's workloads, newest first."""
    if "sources" in report:
        return list(report["sources"])
    return [{"workloads": [row["workload"] for row in report["results"]],
             "from": report.get("source") or _run_of(report)}]


# -- what a row says ---------------------------------------------------------------------------
def target_op(row: dict[str, Any]) -> str:
    match = _TARGET.search(str(row["target"]))
    if match is None:
        raise BenchReportError(f"{row['workload']}: target {row['target']!r} is not '[key] >=|<= number'")
    return match.group(2)


def relative_speed(row: dict[str, Any]) -> float | None:
    """Strata's speed relative to the reference (above 1: ahead), or None without a reference.

    A ratio with a ``>=`` target is already a throughput ratio; with ``<=`` it is a cost (time,
    latency) ratio, inverted here so that every bar reads the same way."""
    ratio = row.get("ratio")
    if not isinstance(ratio, (int, float)) or ratio <= 0 or "error" in row:
        return None
    return float(ratio) if target_op(row) == ">=" else 1.0 / float(ratio)


def measured(row: dict[str, Any]) -> str:
    match = _TARGET.search(str(row["target"]))
    key = (match.group(1) if match else None) or ("ratio" if "ratio" in row else "value")
    if key not in row:
        key = "ratio" if "ratio" in row else "value"
    value = row.get(key)
    return _number(value) if value is not None else ""


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def growth_points(row: dict[str, Any]) -> list[tuple[int, float, float]]:
    """(snapshots, p50 ms, p99 ms) of GROWTH_COMMIT's curve."""
    if isinstance(row.get("points"), list):
        return [(int(p["snapshots"]), float(p["p50_ms"]), float(p["p99_ms"])) for p in row["points"]]
    return [(int(n), float(p50), float(p99)) for n, p50, p99 in _CURVE_POINT.findall(str(row.get("curve", "")))]


# -- the page's tables ---------------------------------------------------------------------------
def markdown_tables(report: dict[str, Any]) -> str:
    rows = [r for r in report["results"] if "error" not in r]
    lines = [f"Results of {report.get('created', 'an unknown date')[:10]}"
             + (f" ({report['source']})" if report.get("source") else "") + ".\n",
             "| workload | what it measures | result | target | met | Strata vs reference |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        speed = relative_speed(row)
        versus = "" if speed is None else f"{speed:.2f}x " + ("ahead" if speed >= 1 else "behind")
        lines.append(f"| {row['workload']} | {row.get('description', '')} | {measured(row)} | "
                     f"{row['target']} | {'yes' if row.get('pass') else '**no**'} | {versus} |")
    errors = [r for r in report["results"] if "error" in r]
    lines += [f"\n{r['workload']} did not run: {r['error']}" for r in errors]
    tpch = report.get("tpch_per_query")
    if tpch:
        engines = list(tpch["seconds"])
        count = len(next(iter(tpch["seconds"].values())))
        lines += ["", f"TPC-H SF {tpch['scale_factor']}, {tpch['phase']}, seconds per query "
                  f"(recorded {tpch.get('recorded', '')}):", "",
                  "| query | " + " | ".join(engines) + " |", "|---|" + "---|" * len(engines)]
        for q in range(count):
            lines.append(f"| Q{q + 1} | " + " | ".join(f"{tpch['seconds'][e][q]:.2f}" for e in engines) + " |")
        lines.append("| geomean | " + " | ".join(f"{_geomean(tpch['seconds'][e]):.2f}" for e in engines) + " |")
    growth = next((r for r in rows if r["workload"] == "GROWTH_COMMIT"), None)
    if growth and growth_points(growth):
        lines += ["", "Streaming commit latency as a table grows:", "",
                  "| snapshots | p50 ms | p99 ms |", "|---|---|---|"]
        lines += [f"| {n:,} | {p50:.1f} | {p99:.1f} |" for n, p50, p99 in growth_points(growth)]
    return "\n".join(lines) + "\n"


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


# -- plots ---------------------------------------------------------------------------------------
def draw(report: dict[str, Any], out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams["svg.hashsalt"] = "strata-bench"  # the same JSON draws the same bytes
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, plot in (("peers.svg", _peers), ("tpch.svg", _tpch), ("growth.svg", _growth)):
        figure = plot(plt, report)
        if figure is None:
            continue
        figure.savefig(out_dir / name, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(figure)
        written.append(out_dir / name)
    return written


def _peers(plt: Any, report: dict[str, Any]) -> Any:
    rows = [(r["workload"], relative_speed(r)) for r in report["results"] if relative_speed(r) is not None]
    if not rows:
        return None
    names, speeds = zip(*rows, strict=True)
    figure, axes = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
    colors = ["#2e7d32" if s >= 1 else "#c62828" for s in speeds]
    axes.barh(names, speeds, color=colors)
    axes.axvline(1.0, color="black", linewidth=1)
    axes.invert_yaxis()
    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_formatter(plt.FuncFormatter(lambda value, _: f"{value:g}x"))
    axes.set_xlabel("Strata's speed relative to the reference (right of 1: Strata ahead)")
    axes.set_title("Strata beside its peers")
    return figure


def _tpch(plt: Any, report: dict[str, Any]) -> Any:
    tpch = report.get("tpch_per_query")
    if not tpch:
        return None
    import numpy as np

    engines = list(tpch["seconds"])
    count = len(tpch["seconds"][engines[0]])
    x = np.arange(count)
    width = 0.8 / len(engines)
    figure, axes = plt.subplots(figsize=(11, 4))
    for i, engine in enumerate(engines):
        axes.bar(x + (i - (len(engines) - 1) / 2) * width, tpch["seconds"][engine], width, label=engine)
    axes.set_xticks(x, [f"Q{q + 1}" for q in range(count)])
    axes.set_yscale("log")
    axes.set_ylabel("seconds (log scale)")
    axes.set_title(f"TPC-H SF {tpch['scale_factor']} per query, {tpch['phase']}")
    axes.legend()
    return figure


def _growth(plt: Any, report: dict[str, Any]) -> Any:
    row = next((r for r in report["results"] if r["workload"] == "GROWTH_COMMIT" and "error" not in r), None)
    points = growth_points(row) if row else []
    if not points:
        return None
    snapshots, p50, p99 = zip(*points, strict=True)
    figure, axes = plt.subplots(figsize=(6, 3.5))
    axes.plot(snapshots, p50, marker="o", label="p50")
    axes.plot(snapshots, p99, marker="o", label="p99")
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("snapshots in the table")
    axes.set_ylabel("commit latency (ms)")
    axes.set_title("Streaming commit latency as a table grows")
    axes.legend()
    return figure


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Tables' JSON and plots of the benchmark page, from the bench's JSON.")
    parser.add_argument("bench_json", nargs="?", type=Path, default=BENCH_JSON,
                        help="the JSON `make bench` wrote (default: build/bench.json)")
    parser.add_argument("--docs", type=Path, default=DOCS_DIR, help="the benchmark page's directory")
    args = parser.parse_args(argv)
    target = args.docs / "results.json"
    try:
        previous = load_results(target) if target.exists() else None
        if args.bench_json.exists():
            report = merge(previous, load_results(args.bench_json))
            target.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            print(f"{target}: results of {args.bench_json}")
        elif previous is not None:
            report = previous
            print(f"{args.bench_json} not found: drawing the results already in {target}")
        else:
            raise BenchReportError(f"{args.bench_json}: no such file (run `make bench` first)")
    except BenchReportError as exc:
        print(f"bench_report: error: {exc}", file=sys.stderr)
        return 2
    for path in draw(report, args.docs):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
