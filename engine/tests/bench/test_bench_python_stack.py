"""POLARS_SCAN, DUCKDB_SCAN and RAY_READ run end to end at a tiny scale (no timing checks): each
side answers the reference's query alike, and the ratios pair the sides round by round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.bench import main, python_stack
from strata.bench.data import final_rows, w2_data
from strata.bench.python_stack import WORKLOADS, _rounds

SCALE = 0.002


def _run(tmp_path: Path, only: str) -> dict[str, dict]:
    out = tmp_path / "bench.json"
    code = main(["--out", str(out), "--only", only, "--scale", str(SCALE), "--work-dir", str(tmp_path / "work"),
                 "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in report["results"]]
    assert not report["skipped"], report["skipped"]
    return {r["workload"]: r for r in report["results"]}


def _check(row: dict) -> None:
    assert row["verified"] is True  # both tables answered as the plain files did
    assert row["rows"] == final_rows(w2_data(SCALE)).num_rows
    assert row["files"] == "4 / 4 / 4"  # one file per partition on every side
    for key in ("value", "reference", "pk_ms", "ratio", "pk_ratio"):
        assert isinstance(row[key], float) and row[key] > 0, key
    assert row["rounds"] > 1 and isinstance(row["pass"], bool)


def test_polars_and_duckdb_entries_at_tiny_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("polars")
    pytest.importorskip("duckdb")
    rows = _run(tmp_path, "POLARS_SCAN,DUCKDB_SCAN")
    assert list(rows) == ["POLARS_SCAN", "DUCKDB_SCAN"]
    for row in rows.values():
        _check(row)
    assert rows["POLARS_SCAN"]["target"] == "ratio <= 1.3" and rows["DUCKDB_SCAN"]["target"] == "ratio <= 1.5"
    printed = capsys.readouterr().out
    assert "ratio to Polars scan_parquet" in printed and "ratio to DuckDB read_parquet" in printed


def test_ray_entry_at_tiny_scale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    # every Ray read starts tasks in worker processes: two rounds show the entry works end to end
    monkeypatch.setattr(python_stack, "RAY_ROUNDS", 2)
    monkeypatch.setattr(python_stack, "RAY_WARM_UP", 0)
    row = _run(tmp_path, "RAY_READ")["RAY_READ"]
    _check(row)
    assert row["target"] == "ratio <= 1.3"


def test_a_side_answering_otherwise_is_not_verified() -> None:
    answers = {"reference": [("2024-01-01", 3, 1.5)], "append": [("2024-01-01", 3, 1.5 + 1e-12)],
               "pk": [("2024-01-01", 4, 1.5)]}
    result = _rounds({side: (lambda a=answer: a) for side, answer in answers.items()}, rounds=2, warm_up=1)
    assert result["verified"] is False  # the PK side's count differs; a float sum's rounding does not count
    answers["pk"] = answers["reference"]
    assert _rounds({side: (lambda a=answer: a) for side, answer in answers.items()}, 2, 1)["verified"] is True


def test_ratio_is_the_median_of_each_rounds_ratio() -> None:
    walls = {"reference": [1.0, 2.0, 4.0], "append": [1.5, 2.0, 1.0], "pk": [3.0, 4.0, 8.0]}
    part = {"walls": walls, "cpus": walls, "verified": True, "rows": 10, "files": {s: 4 for s in walls}}
    row = WORKLOADS["POLARS_SCAN"].summarize({"rounds": part})
    # rounds' ratios 1.5, 1.0 and 0.25: median 1.0 (the ratio of the medians would be 0.75)
    assert row["ratio"] == 1.0 and row["pk_ratio"] == 2.0
    assert row["value"] == 1500.0 and row["reference"] == 2000.0 and row["pk_ms"] == 4000.0
