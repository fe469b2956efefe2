"""W2dyn (dynamic against fixed buckets) runs end to end at a tiny scale: the rounds and what the
row reports, never timings."""

from __future__ import annotations

import json

from bench_helpers import assert_fastest_of_rounds

from strata.bench import main
from strata.bench.dynamic_bucket import W2DYN_ROUNDS


def test_the_fastest_of_alternating_rounds_counts(tmp_path) -> None:
    out = tmp_path / "bench.json"
    code = main(["--out", str(out), "--only", "W2dyn", "--scale", "0.002", "--work-dir", str(tmp_path / "work"),
                 "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in report["results"]]
    [row] = report["results"]
    assert row["workload"] == "W2dyn" and report["targets"]["W2dyn"] == "ratio >= 0.8"
    assert W2DYN_ROUNDS == 3
    assert_fastest_of_rounds(row, W2DYN_ROUNDS)
    dynamic, fixed = row["details"]["buckets"]
    assert dynamic == fixed == 4  # the default target row count keeps a partition in one bucket
