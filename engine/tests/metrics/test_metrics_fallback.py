"""Without prometheus-client (the `metrics` extra) the engine works and every metric is a no-op.

The absence is real, not patched: a fresh interpreter whose import system refuses
`prometheus_client` runs a write, a compaction and a read."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent("""
    import sys

    class NoPrometheus:  # an interpreter where the extra is not installed
        def find_spec(self, name, path=None, target=None):
            if name == "prometheus_client" or name.startswith("prometheus_client."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoPrometheus())

    import pyarrow as pa
    import strata
    from strata import metrics

    assert not metrics.ENABLED
    assert "prometheus_client" not in sys.modules
    catalog = strata.load_catalog(sys.argv[1])
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table("db.t", schema, primary_keys=["id"],
                                 options={"bucket": "1", "write-buffer-size": "4 kb"})
    for i in range(4):
        table.write(pa.table({"id": pa.array(range(i * 100, i * 100 + 300), pa.int64()),
                              "v": pa.array([i] * 300, pa.int64())}))
    table.compact(full=True)
    assert table.to_arrow().num_rows == 600
    metrics.log_produced("db.t", 1, 0.01)      # the helpers other components call are no-ops
    metrics.spark_sink_batch("db.t", 10, 0.5)
    try:
        metrics.serve_metrics(0)
    except metrics.MetricsUnavailableError as exc:
        assert "strata[metrics]" in str(exc)
    else:
        raise AssertionError("serve_metrics without prometheus-client")
    assert len(metrics.DEFINITIONS) > 50   # names and docs are there all the same
    print("ok")
""")


def test_engine_runs_without_prometheus_client(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "wh")], check=False, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"
