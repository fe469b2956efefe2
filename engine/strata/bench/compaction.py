"""LSM compaction benchmarks, an extension of ``strata.bench`` (see strata.bench.spec).

Table layout: the W2 table's (partitioned by dt, primary key (dt, id), one bucket per partition,
so four buckets of ~250k base rows; zstd level 1), with the default compaction options
(num-sorted-run.compaction-trigger 5, stop-trigger 8, num-levels 6).

W2s              sustained upserts: a base of 1,000,000 rows, then W2S_COMMITS timed commits of
                 100,000 rows (half updates) through one long-lived writer with automatic,
                 asynchronous compaction on, as a streaming job writes. After every commit the
                 most sorted runs of any bucket is recorded. The last commit waits for the
                 compaction its flush started (end of input, as Paimon's sink does), and that
                 time is included.
                 reference: pyarrow.parquet.write_table of the same upsert chunks.
W3c              full merged read of the W2s table after the sustained run.
                 reference: pyarrow.parquet.read_table of its final rows as plain Parquet files.
FULL_COMPACTION  table.compact(full=True) of (a copy of) the W2 table: base + 10 level-0 runs per
                 bucket merged into one top-level run. rows_per_s counts the records merged
                 (every input record, updates included).
                 reference: pyarrow read of the same records as plain files, sort by (dt, id), write.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import strata
from strata.bench import data as gen
from strata.bench.spec import PartResult, Target, Workload
from strata.bench.workloads import (
    COMPRESSION,
    COMPRESSION_LEVEL,
    PK_BUCKETS,
    READ_RUNS,
    Timer,
    _final_files,
    _fresh,
    _median_time,
    _parquet_files,
    _warm_up,
    _write_reference,
    w2_table,
)
from strata.mergetree.writer import KeyValueBucketWriter
from strata.table.table import Table
from strata.table.write import TableWrite

W2S_COMMITS = 30
RSS_LIMIT_MB = 1500.0
_W2S_READY = "w2s-ready.json"


# -- W2s: sustained upserts with automatic compaction ----------------------------------------------


def _w2s_table(catalog: strata.Catalog) -> Table:
    """The W2 layout, compaction on (the default: not write-only)."""
    catalog.create_database("bench", ignore_if_exists=True)
    return catalog.create_table("bench.w2s", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                options={"bucket": str(PK_BUCKETS), "file.compression": COMPRESSION,
                                         "file.compression.zstd-level": str(COMPRESSION_LEVEL)})


def max_sorted_runs(writer: TableWrite) -> int:
    """The most sorted runs in one bucket of the writer: after prepare_commit, what the commit holds."""
    return max((w.compaction.manager.levels.number_of_sorted_runs() for w in writer.writers.values()
                if isinstance(w, KeyValueBucketWriter) and w.compaction.manager is not None), default=0)


def committed_sorted_runs(table: Table) -> dict[str, int]:
    """Sorted runs per bucket of the latest snapshot: each level-0 file, plus each non-empty level."""
    runs: dict[str, int] = {}
    for split in table.new_scan().plan().splits:
        levels = [f.level for f in split.files]
        name = split.bucket_path[len(table.path.rstrip("/")) + 1:]  # e.g. dt=2024-01-01/bucket-0
        runs[name] = levels.count(0) + len({level for level in levels if level > 0})
    return runs


def _sustained_upserts(table: Table, chunks: list[pa.Table]) -> dict[str, Any]:
    """Write `chunks` as one commit each through one writer; the timing and the LSM shape."""
    runs_after_commit, commit_seconds, compactions = [], [], 0
    writer, commit = table.new_write("bench-w2s"), table.new_commit("bench-w2s")
    with Timer() as timer:
        for i, chunk in enumerate(chunks):
            started = time.perf_counter()
            writer.write_arrow(chunk)
            # the end of the input: the last commit waits for the compaction its flush started,
            # as Paimon's sink does at end of input, so the table is left as compacted as it got
            messages = writer.prepare_commit(wait_compaction=i == len(chunks) - 1)
            compactions += sum(1 for m in messages if m.compact_before or m.compact_after)
            commit.commit(messages, identifier=i)
            commit_seconds.append(time.perf_counter() - started)
            runs_after_commit.append(max_sorted_runs(writer))
        stalls = sum(w.compaction.manager.stalls for w in writer.writers.values()
                     if isinstance(w, KeyValueBucketWriter) and w.compaction.manager is not None)
        started = time.perf_counter()
        writer.close()
        close_seconds = time.perf_counter() - started
    return {"seconds": timer.wall, "cpu_seconds": timer.cpu, "sorted_runs_after_commit": runs_after_commit,
            "commit_seconds_median": statistics.median(commit_seconds), "commit_seconds_max": max(commit_seconds),
            "close_seconds": close_seconds, "stalls": stalls, "commits_with_compaction": compactions}


def _w2s_build(work_dir: str, scale: float, upserts: gen.UpsertData) -> tuple[Table, dict[str, Any]]:
    ready = f"{work_dir}/{_W2S_READY}"
    if os.path.exists(ready):
        os.remove(ready)
    table = _w2s_table(strata.load_catalog(_fresh(f"{work_dir}/w2s")))
    table.write(upserts.base)  # one level-0 run per bucket, not timed
    result = _sustained_upserts(table, upserts.commits)
    with open(ready, "w") as f:
        json.dump({"scale": scale}, f)
    return table, result


def w2s_table(work_dir: str, scale: float) -> tuple[Table, bool]:
    """The W2s table of this run (built by W2s), or build it now; True if built here."""
    ready = f"{work_dir}/{_W2S_READY}"
    if os.path.exists(ready):
        with open(ready) as f:
            if json.load(f).get("scale") == scale:
                return strata.load_catalog(f"{work_dir}/w2s").get_table("bench.w2s"), False
    table, _ = _w2s_build(work_dir, scale, gen.w2_data(scale, W2S_COMMITS))
    return table, True


def w2s_strata(work_dir: str, scale: float) -> PartResult:
    upserts = gen.w2_data(scale, W2S_COMMITS)
    _warm_up(work_dir)
    table, result = _w2s_build(work_dir, scale, upserts)
    committed = committed_sorted_runs(table)
    return {**result, "rows": sum(c.num_rows for c in upserts.commits), "commits": len(upserts.commits),
            "base_rows": upserts.base.num_rows, "stop_trigger": table.core.stop_trigger,
            "compaction_trigger": table.core.compaction_trigger, "buckets": len(committed),
            "committed_max_sorted_runs": max(committed.values())}


def w2s_reference(work_dir: str, scale: float) -> PartResult:
    upserts = gen.w2_data(scale, W2S_COMMITS)
    _warm_up(work_dir)
    return _write_reference(upserts.commits, f"{work_dir}/w2s-ref")


# -- W3c: merged read after the sustained run ------------------------------------------------------


def w3c_strata(work_dir: str, scale: float) -> PartResult:
    table, built = w2s_table(work_dir, scale)
    _warm_up(work_dir)
    timing, result = _median_time(table.to_arrow, READ_RUNS)
    files = sum(len(s.files) for s in table.new_scan().plan().splits)
    return {**timing, "files": files, "sorted_runs": committed_sorted_runs(table),
            "digest": gen.digest(result), "built_table": built}


def w3c_reference(work_dir: str, scale: float) -> PartResult:
    directory, _ = _final_files(work_dir, scale, W2S_COMMITS)
    _warm_up(work_dir)
    files = _parquet_files(directory)
    timing, result = _median_time(lambda: pq.read_table(files), READ_RUNS)
    return {**timing, "digest": gen.digest(result)}


# -- FULL_COMPACTION: full compaction of the W2 table ----------------------------------------------


def _private_copy(table: Table, work_dir: str, name: str) -> Table:
    """A copy of the table's warehouse, so that compacting it leaves the W2 table for W3 and W4."""
    warehouse = os.path.dirname(os.path.dirname(table.path.rstrip("/")))
    target = f"{work_dir}/{name}"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(warehouse, target)
    return strata.load_catalog(target).get_table(str(table.identifier))


def full_compaction_strata(work_dir: str, scale: float) -> PartResult:
    source, built = w2_table(work_dir, scale)
    table = _private_copy(source, work_dir, "w2-full-compaction")
    _warm_up(work_dir)
    before = table.latest_snapshot()
    assert before is not None
    runs_before = committed_sorted_runs(table)
    with Timer() as timer:
        table.compact(full=True)
    after = table.latest_snapshot()
    assert after is not None and after.commit_kind == "COMPACT", "FULL_COMPACTION committed no compaction"
    levels = {f.level for s in table.new_scan().plan().splits for f in s.files}
    result = table.to_arrow()
    return {"rows": before.total_record_count, "output_rows": after.total_record_count,
            "seconds": timer.wall, "cpu_seconds": timer.cpu, "sorted_runs_before": max(runs_before.values()),
            "sorted_runs_after": max(committed_sorted_runs(table).values()), "levels_after": sorted(levels),
            "digest": gen.digest(result), "built_table": built}


def full_compaction_reference(work_dir: str, scale: float) -> PartResult:
    upserts = gen.w2_data(scale)
    directory = f"{work_dir}/full-compaction-ref"
    _write_reference([upserts.base, *upserts.commits], directory)
    final_digest = gen.digest(gen.final_rows(upserts))
    del upserts
    _warm_up(work_dir)
    files = _parquet_files(directory)
    with Timer() as timer:
        records = pq.read_table(files)
        ordered = records.sort_by([("dt", "ascending"), ("id", "ascending")])
        pq.write_table(ordered, f"{directory}/sorted.out", compression=COMPRESSION,
                       compression_level=COMPRESSION_LEVEL)
    return {"rows": records.num_rows, "seconds": timer.wall, "cpu_seconds": timer.cpu, "digest": final_digest}


# -- report rows -------------------------------------------------------------------------------------


def _per_second(rows: int, seconds: float) -> float:
    return rows / seconds if seconds > 0 else float("inf")


def _round(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def _throughput(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """rows/s of both parts and their ratio (wall and CPU), as the core workloads report them."""
    mine, ref = parts["strata"], parts["reference"]
    rows_per_s, ref_rows_per_s = _per_second(mine["rows"], mine["seconds"]), _per_second(ref["rows"], ref["seconds"])
    cpu_rate, ref_cpu_rate = _per_second(mine["rows"], mine["cpu_seconds"]), \
        _per_second(ref["rows"], ref["cpu_seconds"])
    row: dict[str, Any] = {
        "rows": mine["rows"], "seconds": round(mine["seconds"], 4), "rows_per_s": round(rows_per_s, 1),
        "cpu_seconds": round(mine["cpu_seconds"], 4), "reference_rows": ref["rows"],
        "reference_seconds": round(ref["seconds"], 4), "reference_rows_per_s": round(ref_rows_per_s, 1),
        "reference_cpu_seconds": round(ref["cpu_seconds"], 4),
        "ratio": _round(rows_per_s / ref_rows_per_s), "cpu_ratio": _round(cpu_rate / ref_cpu_rate),
        "value": round(rows_per_s), "reference": round(ref_rows_per_s),
        "strata_peak_rss_mb": mine["peak_rss_mb"], "reference_peak_rss_mb": ref["peak_rss_mb"],
        "peak_rss_target_mb": RSS_LIMIT_MB, "peak_rss_pass": mine["peak_rss_mb"] < RSS_LIMIT_MB,
    }
    if "digest" in mine and "digest" in ref:
        row["verified"] = mine["digest"] == ref["digest"]
    return row


_W2S_DETAILS = ("commits", "base_rows", "buckets", "compaction_trigger", "sorted_runs_after_commit",
                "committed_max_sorted_runs", "stalls", "commits_with_compaction", "commit_seconds_median",
                "commit_seconds_max", "close_seconds")


def _w2s_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine = parts["strata"]
    row = _throughput(parts)
    row["max_sorted_runs"] = max(mine["sorted_runs_after_commit"])
    row["stop_trigger"] = mine["stop_trigger"]
    row["sorted_runs_pass"] = row["max_sorted_runs"] <= mine["stop_trigger"]
    row["details"] = {k: mine[k] for k in _W2S_DETAILS}
    return row


def _w3c_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine = parts["strata"]
    row = _throughput(parts)
    row["details"] = {"files": mine["files"], "sorted_runs": mine["sorted_runs"], "built_table": mine["built_table"],
                      "runs_seconds": mine["runs_seconds"]}
    return row


def _full_compaction_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine = parts["strata"]
    row = _throughput(parts)
    row["output_rows"] = mine["output_rows"]
    row["details"] = {k: mine[k] for k in ("sorted_runs_before", "sorted_runs_after", "levels_after", "built_table")}
    return row


_RSS_LINE = ("peak RSS MB (strata)", "strata_peak_rss_mb")
WORKLOADS = {
    "W2s": Workload(
        f"PK table (W2 layout), automatic compaction: {W2S_COMMITS} upsert commits through one writer on a base",
        Target(">=", 0.25), "ratio", "rows/s, ratio to raw pyarrow",
        {"strata": w2s_strata, "reference": w2s_reference}, _w2s_summary,
        extra_lines=(("max sorted runs/bucket", "max_sorted_runs"), ("stop trigger", "stop_trigger"), _RSS_LINE)),
    "W3c": Workload(
        "full merged read of the W2s table after its sustained run", Target(">=", 0.6), "ratio",
        "rows/s, ratio to raw pyarrow", {"strata": w3c_strata, "reference": w3c_reference}, _w3c_summary,
        extra_lines=(_RSS_LINE,)),
    "FULL_COMPACTION": Workload(
        "full compaction of the W2 table (base + 10 level-0 runs): records merged per second",
        Target(">=", 1_500_000.0), "rows_per_s", "rows merged/s",
        {"strata": full_compaction_strata, "reference": full_compaction_reference}, _full_compaction_summary,
        extra_lines=(_RSS_LINE,)),
}
