"""Cost curves as a table grows, an extension of ``strata.bench`` (see strata.bench.spec);
``--only GROWTH`` selects all three. Each run also writes an SVG chart, build/growth-<curve>.svg.

GROWTH_COMMIT  commit latency of a streaming writer (one writer, one commit user, 10-row
               commits to an append table, snapshot expiry and manifest merging at their
               defaults) over the 100 commits before snapshot 100, 1,000 and 10,000.
               Target: p50 at 10,000 <= 1.5x p50 at 100. Beside it, at each checkpoint, the
               time to find the snapshot of a time halfway through (time travel by time).
GROWTH_SCAN    scan planning time of a table with 100, 10,000 and 100,000 data files (100
               partitions; the files' metadata is real, copied from written files, so planning
               reads real manifests), whole table and a point filter on the partition, in a new
               process (cold) and again with the manifests decoded (warm). Beside it, the commit
               of a one-partition overwrite (conflict checks and Iceberg metadata included).
               Target: planning the whole 100,000-file table <= 2 s.
GROWTH_UPSERT  sustained upserts in the W2s shape (strata.bench.compaction) on a base of 1M, 10M
               and 30M rows (times --scale), fully compacted before the timed commits (no debt
               of the base's own writes billed to them): throughput, the upserts' own peak RSS
               (the base build's is reported beside it), most sorted runs of a bucket.
               Target: throughput at 30M >= 0.7x of 1M (peak RSS and sorted runs are reported
               beside it: RSS <= 1.2x of 1M, runs <= the stop trigger).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from strata.bench.spec import PartResult, Target, Workload

COMMIT_CHECKPOINTS = (100, 1_000, 10_000)
WINDOW = 100  # commits measured before each checkpoint
SCAN_FILES = (100, 10_000, 100_000)
SCAN_PARTITIONS = 100
FILES_PER_COMMIT = 10_000
UPSERT_BASES = {"1M": 1_000_000, "10M": 10_000_000, "30M": 30_000_000}
BASE_CHUNK = 1_000_000
CHART_DIR = "build"


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# -- commit latency ------------------------------------------------------------------------------
def commit_curve(work_dir: str, scale: float) -> PartResult:
    import numpy as np
    import pyarrow as pa

    import strata
    from strata.bench.workloads import _fresh

    checkpoints = sorted({max(WINDOW, int(c * scale)) for c in COMMIT_CHECKPOINTS})
    catalog = strata.load_catalog(_fresh(f"{work_dir}/growth-commit"))
    catalog.create_database("bench")
    table = catalog.create_table("bench.commits", pa.schema([("id", pa.int64()), ("v", pa.int64())]))
    writer, commit = table.new_write("growth"), table.new_commit("growth")
    latencies: list[float] = []
    by_time: dict[int, float] = {}
    for i in range(checkpoints[-1]):
        rows = pa.table({"id": np.arange(i * 10, i * 10 + 10), "v": np.full(10, i)})
        started = time.perf_counter()
        writer.write_arrow(rows)
        commit.commit(writer.prepare_commit(), identifier=i)
        latencies.append(time.perf_counter() - started)
        if i + 1 in checkpoints:
            by_time[i + 1] = _time_travel_seconds(table)
    writer.close()
    points = []
    for count in checkpoints:
        window = latencies[count - WINDOW:count]
        points.append({"snapshots": count, "p50_ms": 1000 * statistics.median(window),
                       "p99_ms": 1000 * _percentile(window, 0.99), "by_time_ms": 1000 * by_time[count]})
    return {"points": points, "live_snapshots": len(table.snapshots()),
            "manifests": len(table.manifest_store.read_manifest_list(table.latest_snapshot().base_manifest_list))}  # type: ignore[union-attr]


def _time_travel_seconds(table: Any) -> float:
    """Finding the snapshot of a time halfway through the table's life (what a time-travel read
    or a stream from a timestamp does first), median of 5."""
    manager = table.snapshot_manager
    earliest, latest = manager.earliest_id(), manager.latest_id()
    middle = manager.snapshot((earliest + latest) // 2).time_millis
    return _median_seconds(lambda: manager.latest_at_or_before(middle), runs=5)


def _commit_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    points = parts["strata"]["points"]
    first, last = points[0], points[-1]
    _chart("commit", "commit latency (ms) by snapshots", "snapshots",
           {"p50": [(p["snapshots"], p["p50_ms"]) for p in points],
            "p99": [(p["snapshots"], p["p99_ms"]) for p in points]})
    return {"value": last["p50_ms"], "reference": first["p50_ms"], "growth": last["p50_ms"] / first["p50_ms"],
            "curve": " ".join(f"{p['snapshots']}:{p['p50_ms']:.1f}/{p['p99_ms']:.1f}ms" for p in points),
            "by_time_curve": " ".join(f"{p['snapshots']}:{p['by_time_ms']:.2f}ms" for p in points),
            "live_snapshots": parts["strata"]["live_snapshots"], "base_manifests": parts["strata"]["manifests"]}


# -- scan planning ---------------------------------------------------------------------------------
def scan_curve(work_dir: str, scale: float) -> PartResult:
    import strata

    points = []
    for count in sorted({max(SCAN_PARTITIONS, int(c * scale)) for c in SCAN_FILES}):
        table = _table_with_files(work_dir, count)
        fresh = strata.load_catalog(f"{work_dir}/growth-scan-{count}").get_table("bench.files")
        cold, cold_point = _cold_plan_seconds(f"{work_dir}/growth-scan-{count}")
        whole = _median_seconds(lambda t=fresh: t.new_scan().plan())
        point = _median_seconds(lambda t=fresh: t.new_scan(filter=strata.col("p") == 42).plan())
        planned = sum(len(s.files) for s in fresh.new_scan().plan().splits)
        assert planned == count, (planned, count)
        first_overwrite, overwrite = _partition_overwrite_seconds(fresh)
        points.append({"files": count, "plan_seconds": cold, "point_plan_seconds": cold_point,
                       "warm_plan_seconds": whole, "warm_point_plan_seconds": point,
                       "first_overwrite_seconds": first_overwrite, "overwrite_seconds": overwrite})
        del table
    return {"points": points}


def _partition_overwrite_seconds(table: Any) -> tuple[float, float]:
    """Commit of an overwrite of one partition (with its Iceberg metadata): the first, then the
    median of three more of the same partition (compactions and overwrites come back to the same
    partitions). The first rewrites the Iceberg manifest that listed the partition's files among
    others; the next ones only the partition's own."""
    import pyarrow as pa

    def overwrite(p: int) -> float:
        with table.new_write("overwrite", overwrite=True) as writer:
            writer.write_arrow(pa.table({"p": pa.array([p], pa.int32()), "id": [p]}))
            messages = writer.prepare_commit()
        commit = table.new_commit("overwrite")
        started = time.perf_counter()
        commit.overwrite(messages, partition={"p": p})
        return time.perf_counter() - started

    first = overwrite(0)
    return first, statistics.median(overwrite(0) for _ in range(3))


_COLD_PLAN = """
import time, strata
table = strata.load_catalog({warehouse!r}).get_table("bench.files")
began = time.perf_counter(); table.new_scan().plan(); whole = time.perf_counter() - began
table = strata.load_catalog({warehouse!r}).get_table("bench.files")
began = time.perf_counter(); table.new_scan(filter=strata.col("p") == 42).plan()
print(whole, time.perf_counter() - began)
"""


def _cold_plan_seconds(warehouse: str) -> tuple[float, float]:
    """Planning in a new process (no decoded manifest cached): whole table, then a point filter
    (the second plan reuses the process's cache only for manifests both read)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _COLD_PLAN.format(warehouse=warehouse)], capture_output=True,
                         text=True, check=True, timeout=600)
    whole, point = out.stdout.split()
    return float(whole), float(point)


def _median_seconds(fn: Any, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _table_with_files(work_dir: str, count: int) -> Any:
    """An append table of `count` data files over SCAN_PARTITIONS partitions: one file written
    per partition, the rest are copies of its metadata under new names (planning reads only
    the manifests, so it does the work of a table of `count` real files)."""
    import numpy as np
    import pyarrow as pa

    import strata
    from strata.bench.workloads import _fresh

    catalog = strata.load_catalog(_fresh(f"{work_dir}/growth-scan-{count}"))
    catalog.create_database("bench")
    table = catalog.create_table("bench.files", pa.schema([("p", pa.int32()), ("id", pa.int64())]),
                                 partition_keys=["p"], options={"metadata.iceberg.storage": "table-location"})
    with table.new_write("seed") as writer:
        writer.write_arrow(pa.table({"p": pa.array(np.arange(SCAN_PARTITIONS), pa.int32()),
                                     "id": np.arange(SCAN_PARTITIONS)}))
        seeds = writer.prepare_commit()
    table.new_commit("seed").commit(seeds)
    per_partition = count // SCAN_PARTITIONS
    copies = [dataclasses.replace(m, new_files=[copy_file(m.new_files[0], i) for i in range(per_partition - 1)])
              for m in seeds]
    pending: list[Any] = []
    for message in copies:
        for start in range(0, len(message.new_files), FILES_PER_COMMIT):
            pending.append(dataclasses.replace(message, new_files=message.new_files[start:start + FILES_PER_COMMIT]))
            if sum(len(m.new_files) for m in pending) >= FILES_PER_COMMIT:
                table.new_commit("seed").commit(pending)
                pending = []
    if pending:
        table.new_commit("seed").commit(pending)
    return table


def copy_file(meta: Any, i: int) -> Any:
    return dataclasses.replace(meta, file_name=f"copy-{i}-{meta.file_name}")


def _scan_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    points = parts["strata"]["points"]
    _chart("scan", "scan planning (s) by data files", "files",
           {"whole table": [(p["files"], p["plan_seconds"]) for p in points],
            "point filter": [(p["files"], p["point_plan_seconds"]) for p in points]})
    last = points[-1]
    return {"value": last["plan_seconds"], "point_filter_seconds": last["point_plan_seconds"],
            "curve": " ".join(f"{p['files']}:{p['plan_seconds']:.3f}/{p['point_plan_seconds']:.3f}s" for p in points),
            "warm_curve": " ".join(f"{p['files']}:{p['warm_plan_seconds']:.3f}/{p['warm_point_plan_seconds']:.3f}s"
                                   for p in points),
            "overwrite_curve": " ".join(f"{p['files']}:{p['first_overwrite_seconds']:.3f}/{p['overwrite_seconds']:.3f}s"
                                        for p in points)}


# -- sustained upserts ---------------------------------------------------------------------------
def upsert_part(base_rows: int) -> Any:
    def part(work_dir: str, scale: float) -> PartResult:
        import numpy as np

        import strata
        from strata.bench import data as gen
        from strata.bench.compaction import W2S_COMMITS, _sustained_upserts, _w2s_table
        from strata.bench.workloads import _fresh

        rows = max(int(base_rows * scale), 10_000)
        commits = [_over_base(chunk, rows) for chunk in gen.w2_data(1.0, W2S_COMMITS).commits]  # 100k rows each
        table = _w2s_table(strata.load_catalog(_fresh(f"{work_dir}/growth-upsert")))
        rng = np.random.default_rng(11)
        for start in range(0, rows, BASE_CHUNK):  # the base in chunks: its own memory stays bounded
            table.write(gen.rows_for(np.arange(start, min(rows, start + BASE_CHUNK)), rng))
        # a table of `rows` rows, as a long-running job leaves it: no compaction debt of the
        # base's writes carried into the timed upserts (it would be billed to them)
        table.compact(full=True)
        base_peak_rss_mb = _reset_peak_rss()
        result = _sustained_upserts(table, commits)
        updated = sum(c.num_rows for c in commits)
        return {"base_rows": rows, "rows": updated, "rows_per_s": updated / result["seconds"],
                "cpu_rows_per_s": updated / result["cpu_seconds"],
                "max_sorted_runs": max(result["sorted_runs_after_commit"]),
                "stop_trigger": table.core.stop_trigger, "stalls": result["stalls"],
                "upsert_peak_rss_mb": _peak_rss_since_reset(), "base_peak_rss_mb": base_peak_rss_mb}

    return part


def _reset_peak_rss() -> float | None:
    """Reset this process's peak RSS (Linux: VmHWM, via clear_refs), returning the peak so far
    in MiB; None where the kernel does not allow it."""
    peak = _peak_rss_since_reset()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return peak


def _peak_rss_since_reset() -> float | None:
    try:
        with open("/proc/self/status") as f:
            line = next(line for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return None
    return round(int(line.split()[1]) / 1024, 1)


def _over_base(chunk: Any, base_rows: int) -> Any:
    """A W2 upsert chunk re-keyed onto a base of `base_rows`: its updates hit keys spread over the
    whole base, its inserts are new keys after it."""
    import numpy as np
    import pyarrow as pa

    from strata.bench import data as gen

    ids = chunk.column("id").to_numpy()
    updates = ids < gen.W2_BASE_ROWS
    spread = np.where(updates, (ids * 7919) % base_rows, ids - gen.W2_BASE_ROWS + base_rows)
    return chunk.set_column(chunk.schema.get_field_index("id"), "id", pa.array(spread, pa.int64()))


def _upsert_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    names = list(parts)
    first, last = parts[names[0]], parts[names[-1]]
    _chart("upsert", "sustained upserts: rows/s by base rows", "base rows",
           {"rows/s": [(p["base_rows"], p["rows_per_s"]) for p in parts.values()]})
    return {"value": last["rows_per_s"], "reference": first["rows_per_s"],
            "ratio": last["rows_per_s"] / first["rows_per_s"],
            "cpu_ratio": last["cpu_rows_per_s"] / first["cpu_rows_per_s"],
            "rss_ratio": _upsert_rss(last) / _upsert_rss(first),
            "max_sorted_runs": max(p["max_sorted_runs"] for p in parts.values()),
            "stop_trigger": first["stop_trigger"],
            "curve": " ".join(f"{n}:{p['rows_per_s']:,.0f}rows/s,{_upsert_rss(p):.0f}MB,runs{p['max_sorted_runs']}"
                              for n, p in parts.items()),
            "base_rss": " ".join(f"{n}:{p.get('base_peak_rss_mb') or p['peak_rss_mb']:.0f}MB"
                                 for n, p in parts.items())}


def _upsert_rss(part: PartResult) -> float:
    """Peak RSS of the timed upserts (the process's peak where it cannot be reset)."""
    return float(part.get("upsert_peak_rss_mb") or part["peak_rss_mb"])


def _upsert_parts() -> dict[str, Any]:
    only = os.environ.get("STRATA_GROWTH_UPSERT_SIZES")  # e.g. "1M,10M" when 30M does not fit
    chosen = [s.strip() for s in only.split(",")] if only else list(UPSERT_BASES)
    return {name: upsert_part(UPSERT_BASES[name]) for name in chosen}


# -- chart -------------------------------------------------------------------------------------------
def _chart(name: str, title: str, x_label: str, series: Mapping[str, list[tuple[float, float]]]) -> str:
    """A small log-x line chart as SVG under build/ (no plotting library needed)."""
    import math

    width, height, pad = 520, 300, 50
    xs = [x for points in series.values() for x, _ in points]
    ys = [y for points in series.values() for _, y in points]
    lo, hi = math.log10(min(xs)), math.log10(max(xs)) or 1.0
    top = max(ys) * 1.1 or 1.0

    def sx(x: float) -> float:
        return pad + (math.log10(x) - lo) / ((hi - lo) or 1.0) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - y / top * (height - 2 * pad)

    colors = ["#1f77b4", "#d62728", "#2ca02c"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="13">{title}</text>',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 12}" text-anchor="middle">{x_label} (log scale)</text>',
             f'<text x="8" y="{pad - 8}">{top:.3g}</text>']
    for i, (label, points) in enumerate(series.items()):
        color = colors[i % len(colors)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in points:
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{color}"/>'
                         f'<text x="{sx(x):.1f}" y="{sy(y) - 6:.1f}" text-anchor="middle">{y:.3g}</text>'
                         f'<text x="{sx(x):.1f}" y="{height - pad + 14}" text-anchor="middle">{x:,.0f}</text>')
        parts.append(f'<text x="{width - pad}" y="{pad + 14 * i}" text-anchor="end" fill="{color}">{label}</text>')
    parts.append("</svg>")
    os.makedirs(CHART_DIR, exist_ok=True)
    path = f"{CHART_DIR}/growth-{name}.svg"
    with open(path, "w") as f:
        f.write("\n".join(parts))
    return path


WORKLOADS = {
    "GROWTH_COMMIT": Workload(
        "commit latency p50/p99 after 100, 1,000, 10,000 snapshots (10-row commits, one writer)",
        Target("<=", 1.5), "growth", "p50 at last / p50 at 100",
        {"strata": commit_curve}, _commit_summary,
        extra_lines=(("curve snapshots:p50/p99", "curve"), ("snapshot by time, snapshots:ms", "by_time_curve"),
                     ("live snapshots", "live_snapshots"),
                     ("base manifests", "base_manifests"))),
    "GROWTH_SCAN": Workload(
        "scan planning with 100, 10,000, 100,000 data files (whole table / point filter)",
        Target("<=", 2.0), "value", "seconds to plan 100,000 files",
        {"strata": scan_curve}, _scan_summary,
        extra_lines=(("cold curve files:whole/point", "curve"), ("warm curve (cached manifests)", "warm_curve"),
                     ("point filter s", "point_filter_seconds"),
                     ("one-partition overwrite files:first/again s", "overwrite_curve"))),
    "GROWTH_UPSERT": Workload(
        "sustained upserts (W2s) on a base of 1M, 10M, 30M rows: throughput at the largest / at 1M",
        Target(">=", 0.7), "ratio", "rows/s ratio largest/1M",
        _upsert_parts(), _upsert_summary,
        extra_lines=(("curve (upserts' own peak RSS)", "curve"), ("peak RSS ratio (<= 1.2)", "rss_ratio"),
                     ("cpu rows/s ratio largest/1M", "cpu_ratio"), ("base build peak RSS", "base_rss"),
                     ("max sorted runs", "max_sorted_runs"), ("stop trigger", "stop_trigger"))),
}
