"""Strata benchmarks against raw pyarrow: ``python -m strata.bench --out build/bench.json``.

Every workload runs twice, each time in its own process (so that peak RSS is per part): once
through Strata and once as the equivalent plain-pyarrow job (the reference), on the same
generated data. Results are written as JSON and printed as a table with PASS/MISS against the
targets; a miss never fails the run (an error does).

    python -m strata.bench --out build/bench.json            # W1..W4 at full size
    python -m strata.bench --only W1,W3 --scale 0.1           # a subset, 10% of the rows

Workloads marked ``opt_in`` (TPCH_SF1, a run of many minutes) run only when ``--only`` names them.

MINIO_COMMIT, W1_minio and W3_minio (``strata.bench.minio``) run against MinIO when it is reachable
(``eval "$(strata-services env minio postgres)"``) and are skipped with a note otherwise.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from strata.bench.spec import Target, Workload

CORE_WORKLOADS = ("W1", "W2", "W3", "W4", "MINIO_COMMIT", "W1_minio", "W3_minio")
# modules of strata.bench defining further workloads (see strata.bench.spec), in report order
EXTENSIONS = ("compaction", "deletion_vectors", "spark_stream", "log_store", "lookup_changelog", "growth",
              "cold_read", "trino", "dynamic_bucket", "tpch", "python_stack")


EXTENDED: dict[str, Workload] = {}
WORKLOADS: list[str] = list(CORE_WORKLOADS)  # every workload's name, in report order


def register(workloads: dict[str, Workload]) -> None:
    """Add workloads to the runner's, after those already known."""
    EXTENDED.update(workloads)
    WORKLOADS.extend(name for name in workloads if name not in WORKLOADS)


def _load_extensions() -> None:
    """The workloads of EXTENSIONS, then the modules other installed packages name under the
    ``strata.bench`` entry point group (the platform's services), which register their own when
    imported (also when one of them is imported first and imports this package)."""
    for name in EXTENSIONS:
        module_name = f"{__name__}.{name}"
        if importlib.util.find_spec(module_name) is not None:
            register(importlib.import_module(module_name).WORKLOADS)
    for entry in sorted(importlib.metadata.entry_points(group="strata.bench"), key=lambda e: e.name):
        entry.load()


_load_extensions()
MINIO_WORKLOADS = ("MINIO_COMMIT", "W1_minio", "W3_minio")
PARTS = ("strata", "reference")
DESCRIPTIONS = {
    "W1": "append table, partitioned by dt: 10 commits",
    "W2": "PK table (dt, id), one bucket per partition, write-only: 10 upsert commits (half updates) on a base",
    "W3": "full merged read of the W2 table (base + 10 level-0 runs)",
    "W4": "id BETWEEN x AND x+1000 on the W2 table (median of 7 after one untimed query), against "
          "pyarrow.dataset over its final rows as 10 plain files",
    "MINIO_COMMIT": "100 small commits (10 rows) to MinIO under the JDBC lock: latency",
    "W1_minio": "W1 with the warehouse on MinIO",
    "W3_minio": "W3 (full merged read of the W2 table) on MinIO",
}
W2_RSS_LIMIT_MB = 1500.0


TARGETS = {"W1": Target(">=", 0.6), "W2": Target(">=", 0.30), "W3": Target(">=", 0.8),
           "W4": Target("<=", 1.0),
           # MINIO_COMMIT: the p50 commit latency in ms itself; the others: ratios to raw pyarrow on MinIO
           "MINIO_COMMIT": Target("<=", 150.0), "W1_minio": Target(">=", 0.5), "W3_minio": Target(">=", 0.5)}


# -- entry point ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m strata.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/bench.json", help="JSON results file")
    parser.add_argument("--only", default=None,
                        help="comma-separated subset, e.g. W1,W3 (the only way to run opt-in workloads)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the full row counts")
    parser.add_argument("--work-dir", default=None,
                        help="where the temporary warehouses go (default: a new temp directory)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary warehouses")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    # internal: run one part of one workload in this process
    parser.add_argument("--workload", choices=WORKLOADS, help=argparse.SUPPRESS)
    parser.add_argument("--part", default="strata", help=argparse.SUPPRESS)
    parser.add_argument("--json-out", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.scale <= 0:
        print("strata.bench: error: --scale must be > 0", file=sys.stderr)
        return 2
    if args.workload:
        return _run_part(args)
    try:
        selected = _selection(args.only)
    except ValueError as exc:
        print(f"strata.bench: error: {exc}", file=sys.stderr)
        return 2
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="strata-bench-")
    os.makedirs(work_dir, exist_ok=True)
    try:
        report = run(selected, args.scale, work_dir, quiet=args.quiet)
    finally:
        if not args.keep:
            shutil.rmtree(work_dir, ignore_errors=True)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(format_report(report))
    print(f"\nresults written to {args.out}")
    return 1 if any("error" in r for r in report["results"]) else 0


def _selection(only: str | None) -> list[str]:
    if not only:
        return [w for w in WORKLOADS if not (w in EXTENDED and EXTENDED[w].opt_in)]
    names = {w.upper(): w for w in WORKLOADS}
    groups = {"GROWTH": [w for w in WORKLOADS if w.startswith("GROWTH_")]}  # one name for several curves
    wanted = [name for w in only.split(",") if w.strip()
              for name in groups.get(w.strip().upper(), [names.get(w.strip().upper(), w.strip().upper())])]
    unknown = [w for w in wanted if w not in WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown} in --only; choose from {', '.join(WORKLOADS)}")
    return [w for w in WORKLOADS if w in wanted]


# -- one part, in a child process -----------------------------------------------------------------


def _run_part(args: argparse.Namespace) -> int:
    from strata.bench.minio import PARTS as MINIO_PARTS
    from strata.bench.workloads import PARTS as FUNCTIONS

    FUNCTIONS = {**FUNCTIONS, **MINIO_PARTS,
                 **{(name, part): fn for name, w in EXTENDED.items() for part, fn in w.parts.items()}}

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="strata-bench-")
    os.makedirs(work_dir, exist_ok=True)
    result = FUNCTIONS[(args.workload, args.part)](work_dir, args.scale)
    result["peak_rss_mb"] = peak_rss_mb()
    text = json.dumps(result)
    if args.json_out:
        with open(args.json_out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


def peak_rss_mb() -> float:
    """Peak resident set size of this process, in MiB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


# -- the orchestrator ---------------------------------------------------------------------------------


def run(workloads: Sequence[str], scale: float, work_dir: str, quiet: bool = False) -> dict[str, Any]:
    load_start = _load_average()
    results = []
    skipped: list[dict[str, Any]] = []
    minio_unavailable = None
    if any(w in MINIO_WORKLOADS for w in workloads):
        from strata.bench.minio import unavailable

        minio_unavailable = unavailable()
    for workload in workloads:
        if workload in EXTENDED:
            results.extend(_run_extended(workload, EXTENDED[workload], scale, work_dir, quiet, skipped))
            continue
        if workload in MINIO_WORKLOADS and minio_unavailable:
            print(f"[bench] {workload} skipped: {minio_unavailable}", file=sys.stderr, flush=True)
            skipped.append({"workload": workload, "reason": minio_unavailable})
            continue
        parts, errors = _run_parts(workload, PARTS, scale, work_dir, quiet)
        if errors:
            results.append({"workload": workload, "description": DESCRIPTIONS[workload],
                            "error": "; ".join(errors)})
        else:
            results.append(combine(workload, parts["strata"], parts["reference"]))
    machine = machine_info()
    machine["load_average_start"], machine["load_average_end"] = load_start, _load_average()
    return {"results": results, "skipped": skipped, "machine": machine, "scale": scale,
            "targets": {w: str(t) for w, t in TARGETS.items()} | {"W2_peak_rss_mb": f"< {W2_RSS_LIMIT_MB:g}"}
            | {name: f"{w.key} {w.target}" for name, w in EXTENDED.items()},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def _run_extended(name: str, workload: Workload, scale: float, work_dir: str, quiet: bool,
                  skipped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    why = workload.unavailable() if workload.unavailable else None
    if why:
        print(f"[bench] {name} skipped: {why}", file=sys.stderr, flush=True)
        skipped.append({"workload": name, "reason": why})
        return []
    parts, errors = _run_parts(name, list(workload.parts), scale, work_dir, quiet)
    row: dict[str, Any] = {"workload": name, "description": workload.description}
    if errors:
        return [{**row, "error": "; ".join(errors)}]
    row.update(workload.summarize(parts))
    row["peak_rss_mb"] = max(p["peak_rss_mb"] for p in parts.values())
    row["target"] = f"{workload.key} {workload.target}"
    row["pass"] = workload.target.met(row[workload.key])
    return [row]


def _run_parts(workload: str, part_names: Sequence[str], scale: float, work_dir: str,
               quiet: bool) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each part of a workload in its own process: the results by part, and the errors."""
    parts: dict[str, dict[str, Any]] = {}
    errors = []
    for part in part_names:
        if not quiet:
            print(f"[bench] {workload} {part} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            parts[part] = _spawn(workload, part, scale, work_dir)
        except RuntimeError as exc:
            errors.append(f"{part}: {exc}")
        if not quiet:
            print(f"[bench] {workload} {part} done in {time.perf_counter() - started:.1f}s",
                  file=sys.stderr, flush=True)
    return parts, errors


def _spawn(workload: str, part: str, scale: float, work_dir: str) -> dict[str, Any]:
    out = os.path.join(work_dir, f"result-{workload}-{part}.json")
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "strata.bench", "--workload", workload, "--part", part,
               "--scale", repr(scale), "--work-dir", work_dir, "--json-out", out]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not os.path.exists(out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"exit {proc.returncode}: {' | '.join(tail)}")
    with open(out) as f:
        result: dict[str, Any] = json.load(f)
    return result


def combine(workload: str, mine: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """The result row of a workload from its Strata and reference parts."""
    target = TARGETS[workload]
    row: dict[str, Any] = {"workload": workload, "description": DESCRIPTIONS[workload]}
    if workload == "MINIO_COMMIT":
        row.update({
            "p50_ms": round(mine["p50_ms"], 2), "p99_ms": round(mine["p99_ms"], 2),
            "mean_ms": round(mine["mean_ms"], 2), "max_ms": round(mine["max_ms"], 2), "commits": mine["commits"],
            "lock": mine["lock"], "cpu_ms": round(mine["cpu_ms"], 2),
            "reference_p50_ms": round(ref["p50_ms"], 2), "reference_p99_ms": round(ref["p99_ms"], 2),
            "ratio": _sig(mine["p50_ms"] / ref["p50_ms"]) if ref["p50_ms"] > 0 else None,
            "runs_ms": [round(t, 2) for t in mine["runs_ms"]],
            "peak_rss_mb": mine["peak_rss_mb"], "reference_peak_rss_mb": ref["peak_rss_mb"],
            "target": f"p50 {target} ms", "pass": target.met(mine["p50_ms"]),
        })
        return row
    if workload == "W4":
        ratio = mine["latency_ms"] / ref["latency_ms"] if ref["latency_ms"] > 0 else float("inf")
        row.update({
            "latency_ms": round(mine["latency_ms"], 3), "reference_latency_ms": round(ref["latency_ms"], 3),
            "ratio": _sig(ratio),
            "runs_ms": [round(t, 3) for t in mine["runs_ms"]],
            "reference_runs_ms": [round(t, 3) for t in ref["runs_ms"]],
            "rows_per_query": mine["rows_per_query"],
            "verified": mine["rows_per_query"] == ref["rows_per_query"],
            "cpu_ms": round(mine["cpu_ms"], 3), "reference_cpu_ms": round(ref["cpu_ms"], 3),
            "first_query_ms": round(mine["first_ms"], 3), "reference_first_query_ms": round(ref["first_ms"], 3),
            "cpu_ratio": _sig(mine["cpu_ms"] / ref["cpu_ms"]) if ref["cpu_ms"] > 0 else None,
        })
    else:
        rows_per_s = mine["rows"] / mine["seconds"] if mine["seconds"] > 0 else float("inf")
        ref_rows_per_s = ref["rows"] / ref["seconds"] if ref["seconds"] > 0 else float("inf")
        ratio = rows_per_s / ref_rows_per_s if ref_rows_per_s else 0.0
        row.update({
            "rows": mine["rows"], "seconds": round(mine["seconds"], 4),
            "rows_per_s": round(rows_per_s, 1), "reference_rows": ref["rows"],
            "reference_seconds": round(ref["seconds"], 4),
            "reference_rows_per_s": round(ref_rows_per_s, 1), "ratio": _sig(ratio),
        })
        row["cpu_seconds"] = round(mine["cpu_seconds"], 4)
        row["reference_cpu_seconds"] = round(ref["cpu_seconds"], 4)
        # rows per CPU-second against the reference's: insensitive to other load on the machine
        row["cpu_ratio"] = _sig((mine["rows"] / mine["cpu_seconds"]) / (ref["rows"] / ref["cpu_seconds"])) \
            if mine["cpu_seconds"] > 0 and ref["cpu_seconds"] > 0 else None
        if "digest" in mine:
            row["verified"] = mine["digest"] == ref["digest"]
    row["peak_rss_mb"] = mine["peak_rss_mb"]
    row["reference_peak_rss_mb"] = ref["peak_rss_mb"]
    row["target"] = str(target)
    row["pass"] = target.met(ratio)
    if workload == "W2":
        row["peak_rss_target_mb"] = W2_RSS_LIMIT_MB
        row["peak_rss_pass"] = mine["peak_rss_mb"] < W2_RSS_LIMIT_MB
    extras = {k: v for k, v in mine.items()
              if k in ("commits", "base_rows", "base_seconds", "files", "runs_seconds", "built_table")}
    if extras:
        row["details"] = extras
    return row


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def machine_info() -> dict[str, Any]:
    import numpy
    import pyarrow

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        if models:
            info["cpu_model"] = models[0]
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_total_mb"] = round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    return info


# -- the printed table -----------------------------------------------------------------------------


def _extended_lines(row: dict[str, Any], workload: Workload, status: str) -> list[list[str]]:
    def shown(value: Any) -> str:
        return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)

    # the strata/reference columns show "value"/"reference" when the summary has them (e.g. rows/s
    # behind a ratio target), else the target's key itself
    reference, ratio = row.get("reference"), row.get("ratio")
    lines = [[row["workload"], workload.metric, shown(row.get("value", row[workload.key])),
              shown(reference) if reference is not None else "",
              f"{ratio:.2f}" if isinstance(ratio, float) else "",
              str(workload.target), status, f"{row['peak_rss_mb']:,.0f}", ""]]
    for label, key in workload.extra_lines:
        if key in row:
            lines.append([row["workload"], label, shown(row[key]), "", "", "", "", "", ""])
    return lines


def format_report(report: dict[str, Any]) -> str:
    headers = ["workload", "metric", "strata", "reference", "ratio", "target", "result", "peak RSS MB",
               "cpu ratio"]
    rows: list[list[str]] = []
    for r in report["results"]:
        if "error" in r:
            rows.append([r["workload"], "ERROR", r["error"][:60], "", "", "", "ERROR", "", ""])
            continue
        status = "PASS" if r["pass"] else "MISS"
        if r["workload"] in EXTENDED:
            rows.extend(_extended_lines(r, EXTENDED[r["workload"]], status))
            continue
        cpu = f"{r['cpu_ratio']:.2f}" if r.get("cpu_ratio") is not None else ""
        if r["workload"] == "MINIO_COMMIT":
            rows.append([r["workload"], "commit p50 ms", f"{r['p50_ms']:,.1f}", f"{r['reference_p50_ms']:,.1f}",
                         f"{r['ratio']:.2f}", r["target"], status, f"{r['peak_rss_mb']:,.0f}", ""])
            rows.append([r["workload"], "commit p99 ms", f"{r['p99_ms']:,.1f}", f"{r['reference_p99_ms']:,.1f}",
                         "", "", "", "", ""])
            continue
        if r["workload"] == "W4":
            rows.append([r["workload"], "latency ms", f"{r['latency_ms']:,.1f}",
                         f"{r['reference_latency_ms']:,.1f}", f"{r['ratio']:.2f}", r["target"], status,
                         f"{r['peak_rss_mb']:,.0f}", cpu])
        else:
            rows.append([r["workload"], f"rows/s ({r['rows']:,} rows)", f"{r['rows_per_s']:,.0f}",
                         f"{r['reference_rows_per_s']:,.0f}", f"{r['ratio']:.2f}", r["target"], status,
                         f"{r['peak_rss_mb']:,.0f}", cpu])
        if r["workload"] == "W2":
            rss_status = "PASS" if r["peak_rss_pass"] else "MISS"
            rows.append(["W2", "peak RSS MB", f"{r['peak_rss_mb']:,.0f}", "", "",
                         f"< {r['peak_rss_target_mb']:g}", rss_status, "", ""])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    left = {0, 1, 5, 6}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(widths[i]) if i in left else c.rjust(widths[i])
                         for i, c in enumerate(cells)).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
    machine = report.get("machine", {})
    out.append("")
    out.append(f"scale {report.get('scale')}; {machine.get('cpu_count')} CPUs; Python {machine.get('python')}; "
               f"pyarrow {machine.get('pyarrow')}; load average {machine.get('load_average_start')} at start, "
               f"{machine.get('load_average_end')} at end")
    out.append("ratio: wall-clock throughput (W4: latency) against the reference, what the targets "
               "apply to; cpu ratio: the same with CPU seconds, insensitive to other load")
    for skip in report.get("skipped", []):
        out.append(f"skipped {skip['workload']}: {skip['reason']}")
    unverified = [r["workload"] for r in report["results"] if r.get("verified") is False]
    if unverified:
        out.append(f"WARNING: Strata's results differ from the reference in {', '.join(unverified)}")
    return "\n".join(out)
