"""W2dyn (dynamic against fixed buckets) runs end to end at a tiny scale: the rounds and what the
row reports, never timings."""

from __future__ import annotations

import json

import pytest

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
    details = row["details"]
    assert details["rounds"] == W2DYN_ROUNDS == 3
    mine, ref = details["seconds_by_round"], details["reference_seconds_by_round"]
    assert len(mine) == len(ref) == W2DYN_ROUNDS and min(mine) > 0 and min(ref) > 0
    assert row["seconds"] == pytest.approx(min(mine), abs=1e-3)
    assert row["reference_seconds"] == pytest.approx(min(ref), abs=1e-3)
    assert row["ratio"] == pytest.approx(min(ref) / min(mine), rel=1e-2)
    assert row["median_ratio"] == pytest.approx(sorted(ref)[1] / sorted(mine)[1], rel=1e-2)
    dynamic, fixed = details["buckets"]
    assert dynamic == fixed == 4  # the default target row count keeps a partition in one bucket
