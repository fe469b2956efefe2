"""The benchmark runs end to end at a tiny scale and writes well-formed JSON (no timing checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.bench import main
from strata.bench.data import SCHEMA, final_rows, w2_data, w2_max_id

NUMBER = (int, float)


def _check_throughput(row: dict) -> None:
    for key in ("rows", "seconds", "rows_per_s", "reference_rows_per_s", "ratio", "peak_rss_mb"):
        assert isinstance(row[key], NUMBER), key
    assert row["rows"] > 0 and row["seconds"] > 0 and row["rows_per_s"] > 0
    assert row["reference_rows_per_s"] > 0 and row["peak_rss_mb"] > 0
    assert row["ratio"] == pytest.approx(row["rows_per_s"] / row["reference_rows_per_s"], rel=1e-2)
    assert isinstance(row["pass"], bool)


def test_bench_tiny_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "bench.json"
    code = main(["--out", str(out), "--only", "W1,W2,W3,W4", "--scale", "0.005", "--work-dir", str(tmp_path / "work"),
                 "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in report["results"]]

    assert set(report) >= {"results", "machine"}
    machine = report["machine"]
    assert machine["cpu_count"] >= 1 and machine["python"] and machine["pyarrow"]

    rows = {r["workload"]: r for r in report["results"]}
    assert list(rows)[:4] == ["W1", "W2", "W3", "W4"]  # then the extensions' workloads (strata.bench.EXTENSIONS)
    for name in ("W1", "W2", "W3"):
        _check_throughput(rows[name])
    assert rows["W1"]["rows"] == 10_000  # 2,000,000 * 0.005
    assert rows["W2"]["rows"] == 5_000  # 10 commits of 100,000 * 0.005
    assert rows["W3"]["rows"] == rows["W3"]["reference_rows"]
    assert rows["W3"]["verified"] is True
    assert isinstance(rows["W2"]["peak_rss_pass"], bool)

    w4 = rows["W4"]
    for key in ("latency_ms", "reference_latency_ms", "ratio", "peak_rss_mb"):
        assert isinstance(w4[key], NUMBER) and w4[key] > 0, key
    assert w4["ratio"] == pytest.approx(w4["latency_ms"] / w4["reference_latency_ms"], rel=1e-2)
    assert len(w4["runs_ms"]) == 7 and w4["verified"] is True

    printed = capsys.readouterr().out
    for name in ("W1", "W2", "W3", "W4"):
        assert name in printed
    assert "PASS" in printed or "MISS" in printed
    assert not (tmp_path / "work").exists()  # temporary warehouses are removed


def test_bench_subset_builds_what_it_needs(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code = main(["--out", str(out), "--only", "w4", "--scale", "0.002", "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in report["results"]]
    assert [r["workload"] for r in report["results"]] == ["W4"]
    assert report["results"][0]["details"]["built_table"] is True


def test_bench_rejects_unknown_workload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--out", str(tmp_path / "x.json"), "--only", "W9"]) == 2
    assert "W9" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_generated_data_is_deterministic() -> None:
    a, b = w2_data(0.002), w2_data(0.002)
    assert a.base.equals(b.base) and all(x.equals(y) for x, y in zip(a.commits, b.commits, strict=True))
    assert a.base.schema == SCHEMA
    assert a.max_id == w2_max_id(0.002)
    final = final_rows(a)
    ids = final["id"].to_numpy()
    assert len(set(ids.tolist())) == final.num_rows == w2_max_id(0.002) + 1
    first = a.commits[0]
    assert first["v2"][0].as_py().isalpha() and len(first["v2"][0].as_py()) == 16
    assert set(first["dt"].unique().to_pylist()) <= {"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"}
