"""The log-store benchmarks (LOG_LATENCY_*, LOG_PRODUCE) end to end at a tiny scale against the
real broker: the JSON fields they report, never timings."""

from __future__ import annotations

import json
import os

import pytest

from strata.bench import main
from strata.bench.log_store import COMMIT_INTERVAL_S, RATE_ROWS_PER_S, unavailable

pytestmark = pytest.mark.kafka
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
NUMBER = (int, float)


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    why = unavailable()
    if why:
        if IN_CI:
            pytest.fail(f"Kafka is needed under CI: {why}")
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("bench-log")
    out = tmp / "bench.json"
    code = main(["--out", str(out), "--only", "LOG_LATENCY_EVENTUAL,LOG_LATENCY_TRANSACTIONAL,LOG_PRODUCE",
                 "--scale", "0.005", "--work-dir", str(tmp / "work"), "--quiet"])
    result = json.loads(out.read_text())
    assert code == 0, [r.get("error") for r in result["results"]]
    return {r["workload"]: r for r in result["results"]}


@pytest.mark.parametrize("name", ["LOG_LATENCY_EVENTUAL", "LOG_LATENCY_TRANSACTIONAL"])
def test_latency_rows(rows: dict[str, dict], name: str) -> None:
    row = rows[name]
    assert row["seen"] == row["rows"] > 0  # every written row reached the consumer
    assert row["rows"] % int(RATE_ROWS_PER_S * 0.1) == 0 and row["commits"] >= 1
    for key in ("p50_ms", "p99_ms", "max_ms", "seconds", "cpu_seconds"):
        assert isinstance(row[key], NUMBER) and row[key] >= 0, key
    assert row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert row["commit_interval_ms"] == int(COMMIT_INTERVAL_S * 1000)
    assert isinstance(row["pass"], bool)
    limit = 1000 if name == "LOG_LATENCY_EVENTUAL" else COMMIT_INTERVAL_S * 1000 + 1000
    assert row["target"] == f"p99_ms <= {limit:g}"


def test_produce_row(rows: dict[str, dict]) -> None:
    row = rows["LOG_PRODUCE"]
    for key in ("rows", "seconds", "cpu_seconds", "rows_per_s", "reference_rows_per_s", "rows_per_cpu_s",
                "reference_rows_per_cpu_s", "ratio"):
        assert isinstance(row[key], NUMBER) and row[key] > 0, key
    assert row["value"] == row["rows_per_s"] and row["reference"] == row["reference_rows_per_s"]
    # every row went into the log: one record per row plus one commit marker per partition and commit
    assert row["log_offsets_total"] >= row["rows"]
    assert isinstance(row["pass"], bool)
