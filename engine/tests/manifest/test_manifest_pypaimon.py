"""pypaimon 2.1.0 as the oracle: we read what it writes, and it reads what we write."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from pypaimon_oracle import run_pypaimon

from strata.manifest import (
    DeletionVectorMeta,
    FileKind,
    FileSource,
    GlobalIndexMeta,
    ManifestFileMeta,
    decode_index_manifest,
    decode_manifest,
    decode_manifest_list,
    encode_index_manifest,
    encode_manifest,
    encode_manifest_list,
    live_files,
)

pytestmark = pytest.mark.pypaimon

DUMP_SCRIPT = Path(__file__).with_name("pypaimon_manifest_dump.py").read_text()
DECODERS: dict[str, Callable[..., list[Any]]] = {
    "manifest": decode_manifest, "list": decode_manifest_list, "index": decode_index_manifest}


def _plain(value: Any) -> Any:
    """Our objects in the dump's JSON shape: dataclasses as dicts, bytes as hex."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _as_dump(objects: list[Any]) -> list[Any]:
    return [_plain(asdict(o)) for o in objects]


def _dump(warehouse: Path, mode: str = "dump") -> dict[str, Any]:
    return json.loads(run_pypaimon(DUMP_SCRIPT, mode, str(warehouse)))


@pytest.fixture(scope="module")
def pypaimon_warehouse(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    warehouse = tmp_path_factory.mktemp("pypaimon") / "warehouse"
    return warehouse, _dump(warehouse, "create")


def _folder(warehouse: Path, table: str) -> Path:
    return warehouse / "db.db" / table / "manifest"


def test_we_decode_every_file_pypaimon_wrote(pypaimon_warehouse: tuple[Path, dict]) -> None:
    warehouse, report = pypaimon_warehouse
    seen: set[str] = set()
    for table, files in report["files"].items():
        folder = _folder(warehouse, table)
        assert sorted(p.name for p in folder.iterdir()) == sorted(files)
        for name, (kind, expected) in files.items():
            data = (folder / name).read_bytes()
            ours = DECODERS[kind](data, source=name)
            assert _as_dump(ours) == expected, f"{table}/{name}"
            if kind == "manifest":  # polars itself reads what pypaimon wrote, not via the fallback
                assert decode_manifest(data, source=name, decoder="polars") == ours, f"{table}/{name}"
            seen |= {kind} | {f"kind{e.kind}" for e in ours if kind != "list"}
            seen |= {e.index_type for e in ours if kind == "index"}
    # the tables exercised what they were built for
    assert {"manifest", "list", "index", "kind0", "kind1", "HASH", "DELETION_VECTORS"} <= seen


def _snapshot_entries(warehouse: Path, table: str) -> list:
    root = warehouse / "db.db" / table
    latest = (root / "snapshot" / "LATEST").read_text().strip()
    snapshot = json.loads((root / "snapshot" / f"snapshot-{latest}").read_text())
    entries = []
    for key in ("baseManifestList", "deltaManifestList"):
        data = (root / "manifest" / snapshot[key]).read_bytes()
        assert len(data) == snapshot[f"{key}Size"]
        for meta in decode_manifest_list(data, source=snapshot[key]):
            manifest = (root / "manifest" / meta.file_name).read_bytes()
            assert len(manifest) == meta.file_size
            entries += decode_manifest(manifest, source=meta.file_name,
                                       expected_count=meta.num_added_files + meta.num_deleted_files)
    return entries


def test_live_files_agree_with_pypaimons_scan(pypaimon_warehouse: tuple[Path, dict]) -> None:
    warehouse, report = pypaimon_warehouse
    for table, expected in report["live"].items():
        live = live_files(_snapshot_entries(warehouse, table))
        assert sorted(e.file.file_name for e in live) == expected, table


def _first(warehouse: Path, table: str, prefix: str, decode: Callable[..., list[Any]]) -> list:
    """The decoded content of the first non-empty file of that kind pypaimon wrote."""
    for path in sorted(_folder(warehouse, table).iterdir()):
        if path.name.startswith(prefix) and (items := decode(path.read_bytes())):
            return items
    raise AssertionError(f"no {prefix} file in table {table}")


def _manifest_variants(warehouse: Path) -> list:
    """Real entries of table t (their rows fit its schema), varied over every optional field."""
    base = _first(warehouse, "t", "manifest-", decode_manifest)[0]
    full = replace(
        base.file, level=5, extra_files=["x.index"], creation_time=1_700_000_000_123,
        delete_row_count=1, embedded_index=b"\x00\x01\xfe", file_source=FileSource.COMPACT,
        value_stats_cols=["id", "v"], external_path="file:/tmp/elsewhere/data.parquet",
        first_row_id=100, write_cols=["id", "dt", "v"], write_cols_sequences=[7, 8, 9])
    bare = replace(base.file, file_name="data-bare.parquet", creation_time=None,
                   delete_row_count=None, file_source=None, value_stats_cols=None)
    return [base, replace(base, kind=FileKind.DELETE, file=full), replace(base, bucket=1, file=bare)]


def _list_variants(warehouse: Path) -> list[ManifestFileMeta]:
    base = _first(warehouse, "t", "manifest-list-", decode_manifest_list)[0]
    return [base, replace(base, file_name="manifest-x-0", min_bucket=0, max_bucket=1, min_level=0,
                          max_level=5, min_row_id=10, max_row_id=20),
            replace(base, file_name="manifest-y-0", min_bucket=None, max_bucket=None,
                    min_level=None, max_level=None)]


def _index_variants(warehouse: Path) -> dict[str, list]:
    hash_entry = _first(warehouse, "d", "index-manifest-", decode_index_manifest)[0]
    dv_entry = _first(warehouse, "e", "index-manifest-", decode_index_manifest)[0]
    dvs = [DeletionVectorMeta("data-a.parquet", 1, 26, 3), DeletionVectorMeta("data-b.parquet", 27, 9)]
    return {
        "d": [hash_entry, replace(hash_entry, kind=FileKind.DELETE, external_path="file:/x/idx")],
        "e": [dv_entry, replace(dv_entry, file_name="index-2", dv_ranges=dvs),
              replace(dv_entry, index_type="btree", file_name="index-3", dv_ranges=None,
                      global_index=GlobalIndexMeta(0, 9, 1, [2, 3], b"m", None)),
              replace(dv_entry, index_type="btree", file_name="index-4", dv_ranges=None,
                      global_index=GlobalIndexMeta(10, 19, 1))],
    }


def test_pypaimon_decodes_what_we_encode(pypaimon_warehouse: tuple[Path, dict],
                                         tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    shutil.copytree(pypaimon_warehouse[0], warehouse)
    expected: dict[tuple[str, str], tuple[str, list]] = {}

    def put(table: str, name: str, kind: str, data: bytes, objects: list) -> None:
        (_folder(warehouse, table) / name).write_bytes(data)
        expected[(table, name)] = (kind, _as_dump(objects))

    entries, metas = _manifest_variants(warehouse), _list_variants(warehouse)
    put("t", "manifest-strata-0", "manifest", encode_manifest(entries), entries)
    put("t", "manifest-strata-1", "manifest", encode_manifest(entries, "deflate"), entries)
    put("t", "manifest-list-strata-0", "list", encode_manifest_list(metas), metas)
    for table, index_entries in _index_variants(warehouse).items():
        put(table, "index-manifest-strata-0", "index", encode_index_manifest(index_entries),
            index_entries)
    report = _dump(warehouse)["files"]
    for (table, name), want in expected.items():
        assert report[table][name] == list(want), f"{table}/{name}"
