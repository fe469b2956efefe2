"""pyiceberg (Apache Iceberg's Python implementation) as an independent reader of the Iceberg
metadata Strata publishes. It lives in ``build/pyiceberg-venv`` (its own pins) and is driven
through a subprocess; answers come back as Arrow IPC files, so types survive the trip."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pyarrow as pa
from pyarrow import ipc
from pypaimon_oracle import REPO_ROOT, venv_with

PYICEBERG_VERSION = "0.12.0"
VENV = Path(os.environ.get("STRATA_PYICEBERG_VENV", REPO_ROOT / "build" / "pyiceberg-venv"))
STAMP = VENV / f".pyiceberg-{PYICEBERG_VERSION}"

_READ = """
import json, sys
import pyarrow as pa, pyarrow.ipc as ipc
from pyiceberg.table import StaticTable
from pyiceberg.catalog.rest import RestCatalog
request = json.loads(sys.argv[1])
props = request["properties"]
if request.get("rest"):
    catalog = RestCatalog("strata", **{"uri": request["rest"], **props})
    table = catalog.load_table(request["identifier"])
else:
    table = StaticTable.from_metadata(request["metadata"], properties=props)
scan = table.scan(row_filter=request.get("filter") or "True", snapshot_id=request.get("snapshot_id"))
out = scan.to_arrow()
with ipc.new_file(request["out"], out.schema) as writer:
    writer.write_table(out)
files = table.inspect.files() if request.get("files") else None
tasks = list(scan.plan_files())
def by_id(values):
    return {str(k): v for k, v in (values or {}).items()}
layouts = {t.file.file_path: {"column_sizes": by_id(t.file.column_sizes), "value_counts": by_id(t.file.value_counts),
                              "split_offsets": t.file.split_offsets} for t in tasks}
print(json.dumps({"snapshots": [s.snapshot_id for s in table.snapshots()],
                  "current": table.current_snapshot().snapshot_id if table.current_snapshot() else None,
                  "planned": len(tasks),
                  "files": files.num_rows if files is not None else None,
                  "layouts": layouts}))
"""


def s3_properties(options: dict[str, str]) -> dict[str, str]:
    """pyiceberg's FileIO properties for a Strata warehouse's S3 options (empty for local disk)."""
    if "s3.endpoint" not in options:
        return {}
    return {"s3.endpoint": options["s3.endpoint"], "s3.access-key-id": options["s3.access-key"],
            "s3.secret-access-key": options["s3.secret-key"], "s3.region": options.get("s3.region", "us-east-1"),
            "s3.force-virtual-addressing": "false"}


def read_iceberg(metadata: str | None, options: dict[str, str], snapshot_id: int | None = None,
                 row_filter: str | None = None, rest: str | None = None,
                 identifier: str | None = None) -> tuple[pa.Table, dict[str, object]]:
    """The rows pyiceberg reads (from a metadata file, or through a REST catalog) and facts of the
    table it saw (its snapshot ids, current snapshot, planned file tasks)."""
    python = venv_with(VENV, [f"pyiceberg[pyarrow,snappy]=={PYICEBERG_VERSION}"], STAMP)
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/rows.arrow"
        request = {"metadata": metadata, "properties": s3_properties(options), "snapshot_id": snapshot_id,
                   "filter": row_filter, "rest": rest, "identifier": identifier, "out": out}
        proc = subprocess.run([str(python), "-c", textwrap.dedent(_READ), json.dumps(request)],
                              check=False, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise AssertionError(f"pyiceberg failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        with ipc.open_file(out) as reader:
            rows = reader.read_all()
    return rows, json.loads(proc.stdout.strip().splitlines()[-1])
