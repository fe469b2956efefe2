"""Readers of a simulated table other than Strata's own, compared with the model.

* ``check_iceberg``, in process and cheap: the Iceberg metadata a reader would pick (the version
  hint's, with its ``.stats`` variant, and the newest Iceberg's Hadoop reader finds past the hint)
  names data and delete files that exist, exactly the Paimon files its mirror promises to show
  (every file of an append table; the files above level 0 of a deletion-vector table; the top
  level of another primary-key table), and its current snapshot and tag refs yield the model's
  rows. After a step that committed without faults the mirror must show the latest snapshot (a
  commit under faults may leave it behind: ARCHITECTURE decision 9, it catches up later).
* ``check_pyiceberg`` and ``check_pypaimon``, slower (each in its own venv, through a
  subprocess): pyiceberg reads the current Iceberg metadata, pypaimon the latest snapshot.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import ipc

from strata.iceberg.location import enabled, metadata_dir
from strata.scan.planner import TableScan
from strata.testing.simulation.iceberg import MetadataVersion, SnapshotRows, metadata_files, read_snapshot
from strata.testing.simulation.model import Column, Row, TableModel, Version, row_tuple, sorted_rows
from strata.testing.simulation.readers import Mismatch, compare, expected_rows

PYICEBERG = ("pyiceberg[pyarrow,snappy]", "0.12.0")
PYPAIMON = ("pypaimon", "2.1.0")


class MirrorBroken(AssertionError):
    """The Iceberg mirror contradicts the table or the model (the message names the version and how)."""


# -- in process: the Iceberg metadata -----------------------------------------------------------------
def check_iceberg(table: Any, model: TableModel, must_be_current: bool) -> str:
    """Check the versions readers pick; returns a label for the counters."""
    store = table.store
    if not enabled(store):
        return "off"
    file_io = store.file_io
    latest = table.latest_snapshot()
    versions = metadata_files(file_io, metadata_dir(store))
    if not versions:
        if latest is not None:
            raise MirrorBroken(f"table has snapshot {latest.id}, but no Iceberg metadata version")
        return "none"
    labels = {_check_version(table, model, file_io, v, latest, must_be_current) for v in versions}
    return "+".join(sorted(labels))


def _check_version(table: Any, model: TableModel, file_io: Any, version: MetadataVersion, latest: Any,
                   must_be_current: bool) -> str:
    where = f"Iceberg metadata {version.location.rsplit('/', 1)[-1]} (as the {version.reader} reader picks it)"
    sid = version.current_snapshot_id
    live = _live(table, version, sid)
    if must_be_current and latest is not None and (sid != latest.id or not live):
        raise MirrorBroken(f"{where} shows snapshot {sid}, the table's latest is {latest.id} (a commit without "
                           "faults must leave the mirror current)")
    if sid is None or not live:
        return "behind"
    _check_snapshot(table, model, file_io, version, sid, model.history.get(sid), where)
    for name, tag_sid in sorted(version.tag_refs().items()):
        tagged = model.tags.get(name)
        if tagged is not None and tagged[0] == tag_sid and version.snapshot(tag_sid) is not None \
                and _paimon_time(table, tag_sid) == version.snapshot(tag_sid)["timestamp-ms"]:  # type: ignore[index]
            _check_snapshot(table, model, file_io, version, tag_sid, tagged[1], f"{where}, tag {name!r}")
    return "current" if latest is not None and sid == latest.id else "behind"


def _live(table: Any, version: MetadataVersion, sid: int | None) -> bool:
    """The version's current snapshot is a retained Paimon snapshot (not a rolled-back one of the same id)."""
    if sid is None:
        return False
    shown = version.snapshot(sid)
    return shown is not None and _paimon_time(table, sid) == shown["timestamp-ms"]


def _paimon_time(table: Any, sid: int) -> int | None:
    manager = table.store.snapshot_manager
    return manager.snapshot(sid).time_millis if manager.exists(sid) else None


def _check_snapshot(table: Any, model: TableModel, file_io: Any, version: MetadataVersion, sid: int,
                    expected: Version | None, where: str) -> None:
    rows = read_snapshot(file_io, version, sid)
    shown, complete = _mirrored_files(table, sid)
    named = sorted(p.rsplit("/", 1)[-1] for p in rows.data_files)
    if named != sorted(shown):
        raise MirrorBroken(f"{where}: snapshot {sid} names data files {named}, the mirror must show {sorted(shown)}")
    if expected is None or expected.rows is None or not complete:
        return  # what the model does not know, or a primary-key table with files below the top level
    _compare_rows(where + f", snapshot {sid}", rows, expected)


def _mirrored_files(table: Any, sid: int) -> tuple[list[str], bool]:
    """The data files of Paimon snapshot `sid` the mirror shows, and whether they hold every row."""
    store = table.store
    entries = TableScan(store, snapshot_id=sid).plan_entries()
    if not store.schema.primary_keys:
        return [e.file.file_name for e in entries], True
    if store.core.get("deletion-vectors.enabled"):
        return [e.file.file_name for e in entries if e.file.level > 0], True
    top = store.core.num_levels - 1
    shown = [e.file.file_name for e in entries if e.file.level == top]
    return shown, len(shown) == len(entries)


def _compare_rows(where: str, rows: SnapshotRows, expected: Version, null_is_empty: bool = False) -> None:
    """`null_is_empty`: a null list or map of ROWs compares equal to an empty one (pyiceberg
    reads the first as the second, a documented limitation of that reader)."""
    missing = [c.name for c in expected.columns if c.field_id not in rows.columns]
    if missing:
        raise MirrorBroken(f"{where}: the Iceberg schema lacks columns {missing} "
                           f"(it has {sorted(rows.names.values())})")
    ids = [c.field_id for c in expected.columns]
    got = sorted_rows(row_tuple(dict(zip(ids, values, strict=True)), ids)
                      for values in zip(*(rows.columns[i] for i in ids), strict=True))
    want = expected_rows(expected.rows or [], expected.columns, None)
    if null_is_empty:
        positions = [i for i, c in enumerate(expected.columns) if _collection_of_rows(c.type)]
        got, want = (sorted_rows(_nulls_as_empty(r, positions) for r in side) for side in (got, want))
    if got != want:
        extra = [r for r in got if r not in want]
        lost = [r for r in want if r not in got]
        raise MirrorBroken(f"{where}: Iceberg yields {len(got)} rows, the model has {len(want)}; missing {lost[:3]}, "
                           f"unexpected {extra[:3]}")


def _collection_of_rows(data_type: Any) -> bool:
    inner = data_type.element if data_type.root in ("ARRAY", "MULTISET") else \
        data_type.value if data_type.root == "MAP" else None
    return inner is not None and inner.root == "ROW"


def _nulls_as_empty(row: tuple[Any, ...], positions: list[int]) -> tuple[Any, ...]:
    return tuple(() if i in positions and not value else value for i, value in enumerate(row))


# -- subprocess oracles: pyiceberg and pypaimon ---------------------------------------------------------
_PYICEBERG_READ = """
import json, sys
import pyarrow.ipc as ipc
from pyiceberg.table import StaticTable
request = json.loads(sys.argv[1])
table = StaticTable.from_metadata(request["metadata"])
out = table.scan().to_arrow()
with ipc.new_file(request["out"], out.schema) as writer:
    writer.write_table(out)
print(json.dumps({"current": table.current_snapshot().snapshot_id if table.current_snapshot() else None}))
"""

_PYPAIMON_READ = """
import json, sys
import pyarrow.ipc as ipc
from pypaimon import CatalogFactory
request = json.loads(sys.argv[1])
table = CatalogFactory.create({"warehouse": request["warehouse"]}).get_table(request["table"])
builder = table.new_read_builder()
out = builder.new_read().to_arrow(builder.new_scan().plan().splits())
with ipc.new_file(request["out"], out.schema) as writer:
    writer.write_table(out)
print(json.dumps({"rows": out.num_rows}))
"""


def check_pyiceberg(table: Any, model: TableModel) -> str:
    """pyiceberg reads the metadata the version hint names; its current snapshot's rows are the model's."""
    store = table.store
    if not enabled(store):
        return "off"
    picked = metadata_files(store.file_io, metadata_dir(store))
    latest = table.latest_snapshot()
    if not picked or latest is None or picked[0].current_snapshot_id != latest.id:
        return "behind"
    out, answer = _run_oracle("pyiceberg", PYICEBERG, _PYICEBERG_READ, {"metadata": picked[0].location})
    if answer.get("current") != latest.id:
        raise MirrorBroken(f"pyiceberg reads snapshot {answer.get('current')} of {picked[0].location}, "
                           f"the table's latest is {latest.id}")
    version = model.history.get(latest.id)
    _, complete = _mirrored_files(table, latest.id)
    if complete and version is not None and version.rows is not None:
        # pyiceberg reads with the metadata's current schema: the table's latest when the metadata was
        # written (a rollback keeps it, as Paimon does), a schema change since shows at the next commit
        # (a column added, the snapshot rolled back, the column dropped: the metadata still has it).
        # Its fields are those of the Paimon schema of the same id; the rows are compared by field id
        schema = next(x for x in picked[0].metadata["schemas"]
                      if x["schema-id"] == picked[0].metadata["current-schema-id"])
        ids = {f["name"]: f["id"] for f in schema["fields"]}
        paimon = {f.name: f.id for f in store.schema_at(schema["schema-id"]).fields}
        if ids != paimon:
            raise MirrorBroken(f"pyiceberg's current schema {schema['schema-id']} has fields {ids}, the table's "
                               f"schema of that id {paimon}")
        rows = SnapshotRows({ids[n]: out.column(n).to_pylist() for n in out.column_names},
                            {i: n for n, i in ids.items()})
        common = Version(tuple(c for c in version.columns if c.field_id in rows.columns), version.rows)
        _compare_rows("pyiceberg's read of the current Iceberg snapshot", rows, common, null_is_empty=True)
    return "read"


def check_pypaimon(table: Any, model: TableModel, warehouse: str, identifier: str) -> str:
    """pypaimon reads the latest snapshot; its rows are the model's. A read pypaimon refuses (a
    feature it lacks) is counted, not failed: the label names the error."""
    try:
        out, _ = _run_oracle("pypaimon", PYPAIMON, _PYPAIMON_READ, {"warehouse": warehouse, "table": identifier})
    except OracleRefused as exc:
        return f"refused:{exc.kind}"
    _compare_named("pypaimon's read of the latest snapshot", out, model.columns, model.rows())
    return "read"


def _compare_named(what: str, out: pa.Table, columns: Sequence[Column], rows: list[Row]) -> None:
    names = [c.name for c in columns]
    if sorted(out.column_names) != sorted(names):
        raise Mismatch(f"{what}: columns {out.column_names}, the model has {names}")
    compare(what, out.select(names), names, expected_rows(rows, columns, None))


class OracleRefused(Exception):
    """The oracle failed to read (its traceback's last line is the message; `kind` its exception class)."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def _run_oracle(name: str, package: tuple[str, str], script: str, request: dict[str, Any]
                ) -> tuple[pa.Table, dict[str, Any]]:
    python = oracle_python(name, *package)
    with tempfile.TemporaryDirectory() as tmp:
        out = f"{tmp}/rows.arrow"
        proc = subprocess.run([str(python), "-c", textwrap.dedent(script), json.dumps({**request, "out": out})],
                              check=False, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise OracleRefused(last.split(":", 1)[0].rsplit(".", 1)[-1], f"{name} failed: {last}")
        with ipc.open_file(out) as reader:
            rows = reader.read_all()
    return rows, json.loads(proc.stdout.strip().splitlines()[-1])


def oracle_python(name: str, requirement: str, version: str) -> Path:
    """The interpreter of the oracle's own venv (``build/<name>-venv``, or $STRATA_<NAME>_VENV),
    created once; concurrent runs queue on a lock file beside it."""
    venv = Path(os.environ.get(f"STRATA_{name.upper()}_VENV", _repo_root() / "build" / f"{name}-venv"))
    python = venv / "bin" / "python"
    stamp = venv / f".{name}-{version}"
    if stamp.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"{requirement}=={version}"], check=True)
            stamp.touch()
    return python


def _repo_root() -> Path:
    """The checkout this package lives in (engine/strata/testing/simulation), else the working directory."""
    root = Path(__file__).resolve().parents[4]
    return root if (root / "engine").is_dir() else Path.cwd()
