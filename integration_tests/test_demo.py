"""`make demo` at a small size: the Spark pipeline runs to the end, verifies itself and exits cleanly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from strata_platform.services.base import Service

pytestmark = [pytest.mark.spark, pytest.mark.sqlite, pytest.mark.e2e]


def processes_with_marker(marker: str) -> list[int]:
    """Live processes whose environment carries `marker` (the demo's JVM and Python workers inherit it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def test_demo_streams_orders_verifies_the_table_and_exits_cleanly(spark: Service, tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex
    marker = f"STRATA_DEMO_TEST_RUN={run_id}"
    env = {**os.environ, **spark.client_env(), "STRATA_DEMO_TEST_RUN": run_id}
    warehouse = tmp_path / "warehouse"
    proc = subprocess.run([sys.executable, "-m", "strata_platform.demo", "--warehouse", str(warehouse),
                           "--batches", "3", "--rows-per-batch", "3000", "--progress-seconds", "2"],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]

    assert "written 9,000/9,000 events" in out  # progress lines, up to the last batch
    assert re.search(r"table shop\.orders: 4,500 orders \(model of the 9,000 generated events: 4,500\) -> MATCH", out)
    for status in ("paid", "placed", "shipped"):
        assert re.search(rf"^\s*{status}\s+\d+", out, re.MULTILINE), status
    snapshots = re.search(r"snapshots: (\d+) \(APPEND (\d+), COMPACT (\d+)\)", out)
    assert snapshots is not None and int(snapshots.group(2)) == 3  # one APPEND per micro-batch
    assert re.search(r"data files per level: .*L5: \d+", out)  # the tasks compacted into the top level
    assert re.search(r"throughput: 9,000 events in 3 micro-batches", out)
    changelog = re.search(r"\+I ([\d,]+), -U ([\d,]+), \+U ([\d,]+), -D ([\d,]+) -> \+I - -D = 4,500 = rows", out)
    assert changelog is not None, out
    minus_u, plus_u = (int(changelog.group(i).replace(",", "")) for i in (2, 3))
    assert minus_u == plus_u > 0 and int(changelog.group(4).replace(",", "")) > 0  # updates and deletes
    assert (warehouse / "catalog.sqlite").exists()  # the SQLite catalog
    deadline = time.monotonic() + 60  # the JVM exits once its driver process has gone
    while processes_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert processes_with_marker(marker) == []  # no JVM or Python worker is left behind


def test_the_model_of_the_order_stream_is_what_the_table_merges_to(tmp_path: Path) -> None:
    """Without Spark: the demo's events, written in shuffled order in three commits into the demo's
    table (sequence.field = event_id, lookup changelog), merge to `expected_orders`."""
    import numpy as np
    import pyarrow as pa

    from strata_platform.demo import create_table
    from strata_platform.demo_orders import events, expected_orders

    table = create_table(str(tmp_path / "warehouse"))
    kinds = {"insert": "+I", "update": "+U", "delete": "-D"}
    rng = np.random.default_rng(3)
    for batch in range(3):
        data = events(batch * 1_000, (batch + 1) * 1_000)
        data = data.take(pa.array(rng.permutation(data.num_rows)))  # arrival order within a batch is arbitrary
        row_kind = [kinds[op] for op in data.column("op").to_pylist()]
        table.write(data.drop_columns(["op"]), row_kind=row_kind)
    expected = expected_orders(3_000)
    assert expected.num_rows == 1_500
    assert set(expected.column("status").to_pylist()) == {"placed", "paid", "shipped"}
    assert table.to_arrow().sort_by("order_id").select(expected.column_names).equals(expected)
    changes = table.read_incremental(0, table.snapshot_manager.latest_id() or 0)
    counts = {k: changes.filter(pa.compute.equal(changes.column("_ROW_KIND"), k)).num_rows
              for k in ("+I", "-U", "+U", "-D")}
    assert counts["+I"] - counts["-D"] == expected.num_rows and counts["-U"] == counts["+U"] > 0
