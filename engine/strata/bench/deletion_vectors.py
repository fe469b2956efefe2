"""Deletion-vector (merge-on-write) benchmarks, an extension of ``strata.bench`` (see strata.bench.spec).

Table layout: the W2s table's (partitioned by dt, primary key (dt, id), one bucket per partition,
zstd level 1, compaction on) with ``deletion-vectors.enabled=true``: every commit moves its level-0
files up and marks the rows they supersede in the bucket's deletion vectors, so reads take each
file as it is (no merge) and drop the marked rows.

W2dv   sustained upserts: a base of 1,000,000 rows, then W2S_COMMITS timed commits of 100,000 rows
       (half updates) through one long-lived writer, as W2s does; every commit waits for its
       level-0 compaction (Paimon's lookup-wait), and that time is Strata's.
       reference: pyarrow.parquet.write_table of the same upsert chunks.
       W2DV_ROUNDS rounds of both sides, alternating, each in its own process; the fastest round
       of each side counts (on a shared 2-core machine one run of either side varied by 1.8x).
W3dv   full read of the W2dv table (raw files minus their deleted rows).
       reference: pyarrow.parquet.read_table of its final (live) rows as plain Parquet files.
W4dv   ``k2 BETWEEN x AND x + 1000`` (k2 is a non-key value column, uniform in [0, 1M): about 0.1%
       of the rows), median latency over 7 values of x on the W2dv table.
       reference: pyarrow.dataset over the plain files of the live rows with the same filter.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import strata
from strata.bench import data as gen
from strata.bench.compaction import (
    _RSS_LINE,
    _W2S_DETAILS,
    RSS_LIMIT_MB,
    W2S_COMMITS,
    _round,
    _sustained_upserts,
    _throughput,
    committed_sorted_runs,
)
from strata.bench.spec import PartResult, Target, Workload, alternating, rounds_of
from strata.bench.workloads import (
    COMPRESSION,
    COMPRESSION_LEVEL,
    PK_BUCKETS,
    READ_RUNS,
    W4_RUNS,
    _final_files,
    _fresh,
    _latencies,
    _median_time,
    _parquet_files,
    _warm_up,
    _write_reference,
)
from strata.table.table import Table

_W2DV_READY = "w2dv-ready.json"
W2DV_ROUNDS = 3
K2_RANGE = 1000  # k2 is uniform in [0, 1,000,000): a range of 1,000 selects ~0.1% of the rows
K2_MAX = 1_000_000


def _w2dv_table(catalog: strata.Catalog) -> Table:
    catalog.create_database("bench", ignore_if_exists=True)
    return catalog.create_table("bench.w2dv", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                options={"bucket": str(PK_BUCKETS), "file.compression": COMPRESSION,
                                         "file.compression.zstd-level": str(COMPRESSION_LEVEL),
                                         "deletion-vectors.enabled": "true"})


def _w2dv_build(work_dir: str, scale: float, upserts: gen.UpsertData) -> tuple[Table, dict[str, Any]]:
    ready = f"{work_dir}/{_W2DV_READY}"
    if os.path.exists(ready):
        os.remove(ready)
    table = _w2dv_table(strata.load_catalog(_fresh(f"{work_dir}/w2dv")))
    table.write(upserts.base)  # moved up by its own commit's compaction, not timed
    result = _sustained_upserts(table, upserts.commits)
    with open(ready, "w") as f:
        json.dump({"scale": scale}, f)
    return table, result


def w2dv_table(work_dir: str, scale: float) -> tuple[Table, bool]:
    """The W2dv table of this run (built by W2dv), or build it now; True if built here."""
    ready = f"{work_dir}/{_W2DV_READY}"
    if os.path.exists(ready):
        with open(ready) as f:
            if json.load(f).get("scale") == scale:
                return strata.load_catalog(f"{work_dir}/w2dv").get_table("bench.w2dv"), False
    table, _ = _w2dv_build(work_dir, scale, gen.w2_data(scale, W2S_COMMITS))
    return table, True


def _deletion_stats(table: Table) -> dict[str, Any]:
    """Files, deletion-vector files and deleted rows of the latest snapshot."""
    splits = table.new_scan().plan().splits
    vectors = [d for s in splits for d in (s.deletion_files or {}).values()]
    return {"files": sum(len(s.files) for s in splits), "files_with_deletions": len(vectors),
            "deleted_rows": sum(d.cardinality or 0 for d in vectors),
            "levels": sorted({f.level for s in splits for f in s.files})}


# -- W2dv ------------------------------------------------------------------------------------------


def w2dv_strata(work_dir: str, scale: float) -> PartResult:
    upserts = gen.w2_data(scale, W2S_COMMITS)
    _warm_up(work_dir)
    table, result = _w2dv_build(work_dir, scale, upserts)
    committed = committed_sorted_runs(table)
    return {**result, "rows": sum(c.num_rows for c in upserts.commits), "commits": len(upserts.commits),
            "base_rows": upserts.base.num_rows, "stop_trigger": table.core.stop_trigger,
            "compaction_trigger": table.core.compaction_trigger, "buckets": len(committed),
            "committed_max_sorted_runs": max(committed.values()), **_deletion_stats(table)}


def w2dv_reference(work_dir: str, scale: float) -> PartResult:
    upserts = gen.w2_data(scale, W2S_COMMITS)
    _warm_up(work_dir)
    return _write_reference(upserts.commits, f"{work_dir}/w2dv-ref")


# -- W3dv ------------------------------------------------------------------------------------------


def w3dv_strata(work_dir: str, scale: float) -> PartResult:
    table, built = w2dv_table(work_dir, scale)
    _warm_up(work_dir)
    timing, result = _median_time(table.to_arrow, READ_RUNS)
    return {**timing, **_deletion_stats(table), "digest": gen.digest(result), "built_table": built}


def w3dv_reference(work_dir: str, scale: float) -> PartResult:
    directory, _ = _final_files(work_dir, scale, W2S_COMMITS)
    _warm_up(work_dir)
    files = _parquet_files(directory)
    timing, result = _median_time(lambda: pq.read_table(files), READ_RUNS)
    return {**timing, "digest": gen.digest(result)}


# -- W4dv ------------------------------------------------------------------------------------------


def k2_ranges(runs: int) -> list[int]:
    """Lower bounds x of the W4dv queries `k2 BETWEEN x AND x + K2_RANGE`."""
    rng = np.random.default_rng(gen.SEED + 40)
    return [int(x) for x in rng.integers(0, K2_MAX - K2_RANGE, runs)]


def w4dv_strata(work_dir: str, scale: float) -> PartResult:
    table, built = w2dv_table(work_dir, scale)
    _warm_up(work_dir)

    def query(x: int) -> pa.Table:
        return table.to_arrow(filter=strata.col("k2").between(x, x + K2_RANGE))

    query(0)  # the first read of a fresh process pays for the allocator's growth, as in W3
    return {**_latencies(query, k2_ranges(W4_RUNS)), "built_table": built}


def w4dv_reference(work_dir: str, scale: float) -> PartResult:
    directory, _ = _final_files(work_dir, scale, W2S_COMMITS)
    _warm_up(work_dir)
    files = _parquet_files(directory)

    def query(x: int) -> pa.Table:
        dataset = ds.dataset(files, format="parquet")
        return dataset.to_table(filter=(ds.field("k2") >= x) & (ds.field("k2") <= x + K2_RANGE))

    query(0)
    return _latencies(query, k2_ranges(W4_RUNS))


# -- report rows -------------------------------------------------------------------------------------


_DV_DETAILS = ("files", "files_with_deletions", "deleted_rows", "levels")


def _w2dv_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    """The ratio of the fastest round of each side (the rounds' times and the ratio of their
    medians are reported beside it, with no target)."""
    mine_rounds, ref_rounds = rounds_of(parts, "strata"), rounds_of(parts, "reference")
    mine = min(mine_rounds, key=lambda p: p["seconds"])
    row = _throughput({"strata": mine, "reference": min(ref_rounds, key=lambda p: p["seconds"])})
    mine_seconds, ref_seconds = [p["seconds"] for p in mine_rounds], [p["seconds"] for p in ref_rounds]
    row["median_ratio"] = _round(statistics.median(ref_seconds) / statistics.median(mine_seconds))
    row["max_sorted_runs"] = max(mine["sorted_runs_after_commit"])
    row["details"] = {k: mine[k] for k in (*_W2S_DETAILS, *_DV_DETAILS)} | {
        "rounds": len(mine_rounds), "seconds_by_round": [round(t, 4) for t in mine_seconds],
        "reference_seconds_by_round": [round(t, 4) for t in ref_seconds]}
    return row


def _w3dv_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine = parts["strata"]
    row = _throughput(parts)
    row["details"] = {k: mine[k] for k in (*_DV_DETAILS, "built_table", "runs_seconds")}
    return row


def _w4dv_summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine, ref = parts["strata"], parts["reference"]
    ratio = mine["latency_ms"] / ref["latency_ms"] if ref["latency_ms"] > 0 else float("inf")
    return {
        "latency_ms": round(mine["latency_ms"], 3), "reference_latency_ms": round(ref["latency_ms"], 3),
        "value": round(mine["latency_ms"], 3), "reference": round(ref["latency_ms"], 3), "ratio": _round(ratio),
        "cpu_ms": round(mine["cpu_ms"], 3), "reference_cpu_ms": round(ref["cpu_ms"], 3),
        "cpu_ratio": _round(mine["cpu_ms"] / ref["cpu_ms"]) if ref["cpu_ms"] > 0 else None,
        "runs_ms": [round(t, 3) for t in mine["runs_ms"]], "reference_runs_ms": [round(t, 3) for t in ref["runs_ms"]],
        "rows_per_query": mine["rows_per_query"], "verified": mine["rows_per_query"] == ref["rows_per_query"],
        "strata_peak_rss_mb": mine["peak_rss_mb"], "reference_peak_rss_mb": ref["peak_rss_mb"],
        "peak_rss_target_mb": RSS_LIMIT_MB, "peak_rss_pass": mine["peak_rss_mb"] < RSS_LIMIT_MB,
        "details": {"built_table": mine["built_table"]},
    }


WORKLOADS = {
    "W2dv": Workload(
        f"PK table (W2 layout), deletion vectors on: {W2S_COMMITS} upsert commits through one writer on a base, "
        f"against pyarrow.parquet.write_table of the same chunks; fastest of {W2DV_ROUNDS} alternating rounds each",
        Target(">=", 0.3), "ratio", "rows/s, ratio to raw pyarrow",
        alternating(w2dv_strata, w2dv_reference, W2DV_ROUNDS), _w2dv_summary,
        extra_lines=(("ratio of the median rounds", "median_ratio"), ("max sorted runs/bucket", "max_sorted_runs"),
                     _RSS_LINE)),
    "W3dv": Workload(
        "full read of the W2dv table (raw files minus deleted rows)", Target(">=", 0.85), "ratio",
        "rows/s, ratio to raw pyarrow", {"strata": w3dv_strata, "reference": w3dv_reference}, _w3dv_summary,
        extra_lines=(_RSS_LINE,)),
    "W4dv": Workload(
        f"k2 BETWEEN x AND x+{K2_RANGE} (non-key column, ~0.1% of rows) on the W2dv table (median of {W4_RUNS})",
        Target("<=", 1.5), "ratio", "latency ms, ratio to raw pyarrow",
        {"strata": w4dv_strata, "reference": w4dv_reference}, _w4dv_summary,
        extra_lines=(_RSS_LINE,)),
}
