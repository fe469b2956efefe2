"""The compaction benchmarks (W2s, W3c, FULL_COMPACTION) run end to end at a tiny scale: the JSON
fields and the LSM invariants they report, never timings."""

from __future__ import annotations

import json

import pytest

from strata.bench import WORKLOADS, format_report, main
from strata.bench.compaction import W2S_COMMITS

NUMBER = (int, float)
SCALE = 0.002  # a base of 2,000 rows, commits of 200


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("bench-compaction")
    out = tmp / "bench.json"
    code = main(["--out", str(out), "--only", "W2s,W3c,FULL_COMPACTION", "--scale", str(SCALE),
                 "--work-dir", str(tmp / "work"), "--quiet"])
    result = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in result["results"]]
    return result


def _rows(report: dict) -> dict[str, dict]:
    return {r["workload"]: r for r in report["results"]}


def _check_throughput(row: dict) -> None:
    for key in ("rows", "seconds", "rows_per_s", "reference_rows_per_s", "ratio", "cpu_seconds", "cpu_ratio",
                "peak_rss_mb", "strata_peak_rss_mb"):
        assert isinstance(row[key], NUMBER) and row[key] > 0, key
    assert row["ratio"] == pytest.approx(row["rows_per_s"] / row["reference_rows_per_s"], rel=1e-2)
    assert isinstance(row["pass"], bool) and isinstance(row["peak_rss_pass"], bool)
    assert row["peak_rss_mb"] >= row["strata_peak_rss_mb"]


def test_workloads_are_registered() -> None:
    assert {"W2s", "W3c", "FULL_COMPACTION"} <= set(WORKLOADS)


def test_report_rows_in_order(report: dict) -> None:
    assert [r["workload"] for r in report["results"]] == ["W2s", "W3c", "FULL_COMPACTION"]
    assert set(report["targets"]) >= {"W2s", "W3c", "FULL_COMPACTION"}
    assert report["targets"]["FULL_COMPACTION"] == "rows_per_s >= 1.5e+06"


def test_sustained_upserts_stay_under_the_stop_trigger(report: dict) -> None:
    w2s = _rows(report)["W2s"]
    _check_throughput(w2s)
    assert w2s["rows"] == w2s["reference_rows"] == W2S_COMMITS * 200
    details = w2s["details"]
    runs = details["sorted_runs_after_commit"]
    assert len(runs) == details["commits"] == W2S_COMMITS
    assert w2s["stop_trigger"] == details["compaction_trigger"] + 3 == 8  # the defaults
    assert w2s["max_sorted_runs"] == max(runs) <= w2s["stop_trigger"]
    assert w2s["sorted_runs_pass"] is True
    # compaction did run: without it every commit adds a run and 30 commits would reach 31
    assert details["commits_with_compaction"] > 0 and max(runs) < W2S_COMMITS
    assert details["committed_max_sorted_runs"] == runs[-1]
    assert details["buckets"] == 4


def test_merged_read_after_sustained_run_matches_the_final_rows(report: dict) -> None:
    w3c = _rows(report)["W3c"]
    _check_throughput(w3c)
    assert w3c["verified"] is True
    assert w3c["rows"] == w3c["reference_rows"] == 2_000 + W2S_COMMITS * 100  # base + the new keys
    assert w3c["details"]["built_table"] is False  # W2s built it in this run
    assert max(w3c["details"]["sorted_runs"].values()) <= _rows(report)["W2s"]["stop_trigger"]


def test_full_compaction_merges_every_record_into_one_top_level_run(report: dict) -> None:
    full = _rows(report)["FULL_COMPACTION"]
    _check_throughput(full)
    assert full["verified"] is True
    assert full["rows"] == full["reference_rows"] == 2_000 + 10 * 200  # every record is merged
    assert full["output_rows"] == 2_000 + 10 * 100
    details = full["details"]
    assert details["sorted_runs_before"] == 11 and details["sorted_runs_after"] == 1
    assert details["levels_after"] == [5]  # num-levels 6: the top level
    assert full["value"] == pytest.approx(full["rows_per_s"], abs=1)  # the printed rows/s


def test_printed_table_shows_the_extra_lines(report: dict) -> None:
    printed = format_report(report)
    for text in ("W2s", "W3c", "FULL_COMPACTION", "max sorted runs/bucket", "stop trigger", "rows merged/s"):
        assert text in printed
