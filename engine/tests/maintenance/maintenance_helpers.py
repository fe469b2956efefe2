"""Helpers of the maintenance tests: reads and a look at a table's files on disk."""

from __future__ import annotations

import os
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
    out = set()
    for root, _dirs, names in os.walk(table.path):
        rel = os.path.relpath(root, table.path)
        if rel.split(os.sep)[0] in ("snapshot", "schema", "tag", "consumer"):
            continue
        out.update(os.path.join(root, n) for n in names if not n.startswith("."))
    return out


def age(path: str, seconds: float) -> None:
    """Make a file look `seconds` old."""
    st = os.stat(path)
    os.utime(path, (st.st_atime - seconds, st.st_mtime - seconds))


PK_SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.int64())])


def pk_batch(dt: str, ids: list[int], v: int) -> pa.Table:
    return pa.table({"dt": [dt] * len(ids), "id": pa.array(ids, pa.int32()), "v": pa.array([v] * len(ids), pa.int64())},
                    schema=PK_SCHEMA)


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_json(path: str) -> Any:
    import json

    with open(path) as f:
        return json.load(f)
