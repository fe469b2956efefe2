"""Helpers of the maintenance tests: reads and a look at a table's stored files, through the table's
FileIO so that they work on every storage kind."""

from __future__ import annotations

import importlib
import json
import time
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

import strata
from strata.manifest.manifest_entry import FileKind, merge_entries
from strata.operation.expire import TableFiles
from strata.snapshot.snapshot import Snapshot


def rows(table: strata.Table, **at: object) -> list[tuple]:
    data = table.to_arrow(**at)  # type: ignore[arg-type]
    return sorted(zip(*(data.column(c).to_pylist() for c in data.column_names), strict=True))


def live_paths(table: strata.Table, snapshot: Snapshot, changelog: bool = True) -> set[str]:
    """Every file the snapshot needs: manifest lists, manifests, data files and (unless a tag,
    whose changelog dies with its snapshot, as in Paimon) changelog files."""
    files = TableFiles(table)
    paths = {files.store.path(n) for n in files.metadata_names(snapshot)}
    entries = merge_entries(files.entries(snapshot.base_manifest_list) + files.entries(snapshot.delta_manifest_list))
    for e in entries:
        if e.kind == FileKind.ADD:
            paths.update(files.data_paths(e))
    if changelog and snapshot.changelog_manifest_list:
        paths.add(files.store.path(snapshot.changelog_manifest_list))
        for m in files.manifest_list(snapshot.changelog_manifest_list):
            paths.add(files.store.path(m.file_name))
        for e in files.changelog_files(snapshot):
            paths.update(files.data_paths(e))
    return paths


def files_on_disk(table: strata.Table) -> set[str]:
    """Data, changelog and manifest files under the table directory."""
    out: set[str] = set()
    pending = [s for s in table.file_io.list_status(table.path)
               if s.path.rsplit("/", 1)[-1] not in ("snapshot", "schema", "tag", "consumer")]
    while pending:
        status = pending.pop()
        if status.is_dir:
            pending.extend(table.file_io.list_status(status.path))
        elif not status.path.rsplit("/", 1)[-1].startswith("."):
            out.add(status.path)
    return out


def exists(table: strata.Table, path: str) -> bool:
    return table.file_io.exists(path)


def advance_clock(monkeypatch: Any, seconds: float) -> None:
    """Make everything stored so far look `seconds` old to orphan removal and consumer expiry, by
    moving their clock forward (object stores set modification times themselves)."""
    ahead = SimpleNamespace(time=lambda: time.time() + seconds)
    for module in ("strata.operation.orphan", "strata.snapshot.consumers"):
        monkeypatch.setattr(importlib.import_module(module), "time", ahead)


PK_SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.int64())])


def pk_batch(dt: str, ids: list[int], v: int) -> pa.Table:
    return pa.table({"dt": [dt] * len(ids), "id": pa.array(ids, pa.int32()), "v": pa.array([v] * len(ids), pa.int64())},
                    schema=PK_SCHEMA)


def read_text(table: strata.Table, path: str) -> str:
    return table.file_io.read_bytes(path).decode()


def read_json(table: strata.Table, path: str) -> Any:
    return json.loads(read_text(table, path))


def write_json(table: strata.Table, path: str, obj: Any) -> None:
    table.file_io.write_bytes(path, json.dumps(obj).encode())
