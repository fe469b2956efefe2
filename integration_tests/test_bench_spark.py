"""SPARK_INGEST and SPARK_VISIBILITY run at a tiny scale and report well-formed rows (no timing checks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata.bench import main
from strata_platform.services.base import Service

pytestmark = pytest.mark.spark
NUMBER = (int, float)


def test_spark_bench_rows(spark: Service, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code = main(["--out", str(out), "--only", "SPARK_INGEST,SPARK_VISIBILITY", "--scale", "0.01",
                 "--work-dir", str(tmp_path / "work"), "--quiet"])
    report = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in report["results"]]
    assert report["skipped"] == []
    rows = {r["workload"]: r for r in report["results"]}
    assert list(rows) == ["SPARK_INGEST", "SPARK_VISIBILITY"]

    ingest = rows["SPARK_INGEST"]
    assert ingest["rows"] == 8 * 5_000 and ingest["batches"] == 8  # measured batches, warm-up excluded
    assert ingest["seconds"] > 0 and len(ingest["batch_ms"]) == 8
    assert ingest["rows_per_s"] == pytest.approx(ingest["rows"] / ingest["seconds"], rel=1e-2)
    assert ingest["table_rows"] == 10_000  # the key space: every key was written
    assert set(ingest["files_per_level"]) <= {str(level) for level in range(6)}
    assert isinstance(ingest["pass"], bool) and ingest["target"] == "rows_per_s >= 200000"

    visibility = rows["SPARK_VISIBILITY"]
    for key in ("p50_ms", "p99_ms", "max_ms"):
        assert isinstance(visibility[key], NUMBER) and visibility[key] > 0, key
    assert visibility["p50_ms"] <= visibility["p99_ms"] <= visibility["max_ms"]
    assert visibility["batches"] >= 3 and visibility["trigger"] == "1 second"
    assert isinstance(visibility["pass"], bool) and visibility["target"] == "p99_ms <= 2000"
