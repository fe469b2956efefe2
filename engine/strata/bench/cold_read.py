"""The first read in a fresh process, an extension of ``strata.bench`` (see strata.bench.spec).

COLD_READ  a new Python process imports strata, opens the W2 table and reads it whole once
           (``to_arrow``): the wall time from before the imports to the result, as a CLI call
           or a short job pays it. reference: a new process imports pyarrow and reads the same
           live rows as plain Parquet files (``pyarrow.parquet.read_table``). Median of
           COLD_RUNS processes each; strata is byte-compiled first, as an installed wheel is.
           Value: the reference's time / Strata's (>= 0.6).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from strata.bench.spec import PartResult, Target, Workload

COLD_RUNS = 5

_STRATA_CHILD = """
import time, resource
began = time.perf_counter(); cpu = time.process_time()
import strata
imported = time.perf_counter()
table = strata.load_catalog({warehouse!r}).get_table("bench.w2")
rows = table.to_arrow().num_rows
print(rows, time.perf_counter() - began, time.process_time() - cpu, imported - began)
"""

_REFERENCE_CHILD = """
import time
began = time.perf_counter(); cpu = time.process_time()
import pyarrow.parquet as pq
imported = time.perf_counter()
rows = pq.read_table({files!r}).num_rows
print(rows, time.perf_counter() - began, time.process_time() - cpu, imported - began)
"""


def _fresh_processes(code: str) -> dict[str, Any]:
    walls, cpus, imports, rows = [], [], [], 0
    for _ in range(COLD_RUNS):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=600)
        count, wall, cpu, imported = out.stdout.split()
        rows = int(count)
        walls.append(float(wall))
        cpus.append(float(cpu))
        imports.append(float(imported))
    return {"rows": rows, "seconds": statistics.median(walls), "cpu_seconds": statistics.median(cpus),
            "import_seconds": statistics.median(imports), "runs_seconds": walls}


def cold_strata(work_dir: str, scale: float) -> PartResult:
    import compileall
    from pathlib import Path

    import strata
    from strata.bench.workloads import w2_table

    w2_table(work_dir, scale)  # built here unless W2 built it in this run
    # byte-compiled as pip leaves an installed wheel (an editable checkout may hold none)
    compileall.compile_dir(str(Path(strata.__file__).parent), quiet=1)
    return _fresh_processes(_STRATA_CHILD.format(warehouse=f"{work_dir}/w2"))


def cold_reference(work_dir: str, scale: float) -> PartResult:
    from strata.bench.workloads import _final_files, _parquet_files

    directory, _ = _final_files(work_dir, scale)
    return _fresh_processes(_REFERENCE_CHILD.format(files=_parquet_files(directory)))


def _summary(parts: Mapping[str, PartResult]) -> dict[str, Any]:
    mine, ref = parts["strata"], parts["reference"]
    if mine["rows"] != ref["rows"]:
        raise AssertionError(f"COLD_READ: Strata read {mine['rows']} rows, the reference {ref['rows']}")
    return {"value": mine["seconds"], "reference": ref["seconds"], "ratio": ref["seconds"] / mine["seconds"],
            "cpu_ratio": ref["cpu_seconds"] / mine["cpu_seconds"], "rows": mine["rows"],
            "import_seconds": mine["import_seconds"], "reference_import_seconds": ref["import_seconds"],
            "runs": json.dumps([round(s, 3) for s in mine["runs_seconds"]])}


WORKLOADS = {
    "COLD_READ": Workload(
        "fresh process: import strata + first full read of the W2 table, vs pyarrow reading its live rows",
        Target(">=", 0.6), "ratio", "ratio to raw pyarrow",
        {"strata": cold_strata, "reference": cold_reference}, _summary,
        extra_lines=(("CPU ratio", "cpu_ratio"), ("import strata s", "import_seconds"),
                     ("import pyarrow.parquet s", "reference_import_seconds"))),
}
