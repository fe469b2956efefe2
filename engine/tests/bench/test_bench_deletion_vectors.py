"""The deletion-vector benchmarks (W2dv, W3dv, W4dv) run end to end at a tiny scale: the JSON fields
and what they verify, never timings."""

from __future__ import annotations

import json

import pytest
from bench_helpers import assert_fastest_of_rounds

from strata.bench import WORKLOADS, format_report, main
from strata.bench.compaction import W2S_COMMITS
from strata.bench.deletion_vectors import K2_RANGE, W2DV_ROUNDS

NUMBER = (int, float)
SCALE = 0.002  # a base of 2,000 rows, commits of 200


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("bench-dv")
    out = tmp / "bench.json"
    code = main(["--out", str(out), "--only", "W2dv,W3dv,W4dv", "--scale", str(SCALE),
                 "--work-dir", str(tmp / "work"), "--quiet"])
    result = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in result["results"]]
    return result


def _rows(report: dict) -> dict[str, dict]:
    return {r["workload"]: r for r in report["results"]}


def test_workloads_are_registered_in_order(report: dict) -> None:
    assert {"W2dv", "W3dv", "W4dv"} <= set(WORKLOADS)
    assert [r["workload"] for r in report["results"]] == ["W2dv", "W3dv", "W4dv"]
    assert report["targets"]["W2dv"] == "ratio >= 0.3"
    assert report["targets"]["W3dv"] == "ratio >= 0.85"
    assert report["targets"]["W4dv"] == "ratio <= 1.5"


def test_upserts_mark_rows_in_deletion_vectors(report: dict) -> None:
    w2dv = _rows(report)["W2dv"]
    for key in ("rows_per_s", "reference_rows_per_s", "ratio", "cpu_ratio", "peak_rss_mb", "strata_peak_rss_mb"):
        assert isinstance(w2dv[key], NUMBER) and w2dv[key] > 0, key
    assert w2dv["rows"] == w2dv["reference_rows"] == W2S_COMMITS * 200
    assert isinstance(w2dv["peak_rss_pass"], bool)
    details = w2dv["details"]
    assert details["commits"] == W2S_COMMITS and details["buckets"] == 4
    # half of every commit updates existing keys: their old rows are marked, never merged on read
    assert details["deleted_rows"] > 0 and details["files_with_deletions"] > 0
    assert 0 not in details["levels"], "every commit moves its level-0 files up"


def test_the_fastest_of_alternating_rounds_counts(report: dict) -> None:
    assert W2DV_ROUNDS == 3
    assert_fastest_of_rounds(_rows(report)["W2dv"], W2DV_ROUNDS)


def test_full_read_returns_the_live_rows(report: dict) -> None:
    w3dv = _rows(report)["W3dv"]
    assert w3dv["verified"] is True
    assert w3dv["rows"] == w3dv["reference_rows"] == 2_000 + W2S_COMMITS * 100
    assert w3dv["details"]["built_table"] is False  # W2dv built it in this run


def test_value_filter_matches_the_reference(report: dict) -> None:
    w4dv = _rows(report)["W4dv"]
    assert w4dv["verified"] is True
    assert len(w4dv["runs_ms"]) == len(w4dv["rows_per_query"]) == 7
    assert w4dv["ratio"] == pytest.approx(w4dv["latency_ms"] / w4dv["reference_latency_ms"], rel=1e-2)
    assert K2_RANGE == 1000


def test_printed_table_has_the_rows(report: dict) -> None:
    printed = format_report(report)
    for text in ("W2dv", "W3dv", "W4dv", "latency ms, ratio to raw pyarrow", "peak RSS MB (strata)",
                 "ratio of the median rounds"):
        assert text in printed
