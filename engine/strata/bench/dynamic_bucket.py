"""Dynamic bucket mode (bucket = -1) against fixed buckets on the same upserts.

W2dyn  the W2 data (a base, then COMMITS upsert commits, half updates) through one writer with
       automatic compaction, into a table without a 'bucket' option (dynamic buckets, keys placed
       through the hash index; the default dynamic-bucket.target-row-num keeps a W2 partition in
       one bucket, as W2's one fixed bucket per partition). reference: the same run on the W2
       table layout (bucket = 1), compaction on. The ratio is dynamic / fixed rows per second,
       of the fastest of W2DYN_ROUNDS alternating rounds of each side, each in its own process:
       a run takes about a second, and when its background compactions run varies it by a fifth.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import strata
from strata.bench import data as gen
from strata.bench.compaction import _RSS_LINE, _sustained_upserts, _throughput
from strata.bench.spec import PartResult, Target, Workload, alternating, rounds_of
from strata.bench.workloads import COMPRESSION, COMPRESSION_LEVEL, PK_BUCKETS, _fresh, _warm_up

W2DYN_ROUNDS = 3
_OPTIONS = {"file.compression": COMPRESSION, "file.compression.zstd-level": str(COMPRESSION_LEVEL)}


def _run(work_dir: str, scale: float, name: str, options: dict[str, str]) -> PartResult:
    upserts = gen.w2_data(scale)
    _warm_up(work_dir)
    catalog = strata.load_catalog(_fresh(f"{work_dir}/{name}"))
    catalog.create_database("bench", ignore_if_exists=True)
    table = catalog.create_table(f"bench.{name}", gen.SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                 options={**_OPTIONS, **options})
    table.write(upserts.base)  # not timed
    result = _sustained_upserts(table, upserts.commits)
    table = catalog.get_table(f"bench.{name}")
    data = table.to_arrow(columns=["dt", "id"])
    assert data.num_rows == data.group_by(["dt", "id"]).aggregate([]).num_rows, f"{name}: a key is read twice"
    buckets = {(s.partition, s.bucket) for s in table.new_scan().plan().splits}
    return {**result, "rows": sum(c.num_rows for c in upserts.commits), "commits": len(upserts.commits),
            "base_rows": upserts.base.num_rows, "buckets": len(buckets), "final_rows": data.num_rows}


def w2dyn_strata(work_dir: str, scale: float) -> PartResult:
    return _run(work_dir, scale, "w2dyn", {})


def w2dyn_reference(work_dir: str, scale: float) -> PartResult:
    return _run(work_dir, scale, "w2fixed", {"bucket": str(PK_BUCKETS)})


def _summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine_rounds, ref_rounds = rounds_of(parts, "strata"), rounds_of(parts, "reference")
    finals = {p["final_rows"] for p in (*mine_rounds, *ref_rounds)}
    assert len(finals) == 1, f"dynamic and fixed buckets hold different rows: {sorted(finals)}"
    mine = min(mine_rounds, key=lambda p: p["seconds"])
    ref = min(ref_rounds, key=lambda p: p["seconds"])
    row = _throughput({"strata": mine, "reference": ref})
    mine_seconds, ref_seconds = [p["seconds"] for p in mine_rounds], [p["seconds"] for p in ref_rounds]
    row["median_ratio"] = round(statistics.median(ref_seconds) / statistics.median(mine_seconds), 3)
    row["details"] = {k: (mine[k], ref[k]) for k in ("buckets", "commit_seconds_median", "commits_with_compaction")} | {
        "rounds": len(mine_rounds), "seconds_by_round": [round(t, 4) for t in mine_seconds],
        "reference_seconds_by_round": [round(t, 4) for t in ref_seconds]}
    return row


WORKLOADS = {
    "W2dyn": Workload(
        f"W2 upserts ({gen.COMMITS} commits, compaction on) into a dynamic-bucket table vs fixed buckets; "
        f"fastest of {W2DYN_ROUNDS} alternating rounds each",
        Target(">=", 0.8), "ratio", "rows/s, ratio to fixed buckets",
        alternating(w2dyn_strata, w2dyn_reference, W2DYN_ROUNDS), _summary,
        extra_lines=(("ratio of the median rounds", "median_ratio"), _RSS_LINE,
                     ("peak RSS MB (fixed)", "reference_peak_rss_mb"))),
}
