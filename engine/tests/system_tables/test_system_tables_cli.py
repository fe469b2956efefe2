"""`strata read 'db.t$<system table>'` from the command line."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.cli import main


def run(capsys: pytest.CaptureFixture[str], warehouse: str, *args: str) -> tuple[int, str, str]:
    code = main(["--warehouse", warehouse, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _csv(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.fixture
def table(catalog: strata.Catalog) -> strata.Table:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1"})
    t.write(pa.table({"id": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    t.write(pa.table({"id": pa.array([2, 3], pa.int64()), "v": ["bb", "c"]}))
    t.delete(pa.table({"id": pa.array([1], pa.int64()), "v": ["a"]}))
    return t


def test_cli_reads_system_tables(capsys: pytest.CaptureFixture[str], warehouse: str, table: strata.Table) -> None:
    code, out, err = run(capsys, warehouse, "read", "db.t$snapshots", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["snapshot_id"] for r in rows] == [1, 2, 3]
    assert [r["commit_kind"] for r in rows] == ["APPEND"] * 3

    code, out, err = run(capsys, warehouse, "read", "db.t$snapshots", "--columns", "snapshot_id,delta_record_count",
                         "--where", "snapshot_id >= 2", "--format", "csv")
    assert code == 0, err
    assert _csv(out) == [["snapshot_id", "delta_record_count"], ["2", "2"], ["3", "1"]]

    code, out, err = run(capsys, warehouse, "read", "db.t$files", "--limit", "1", "--format", "csv",
                         "--columns", "bucket,file_format")
    assert code == 0, err
    assert _csv(out) == [["bucket", "file_format"], ["0", "parquet"]]

    code, out, err = run(capsys, warehouse, "read", "db.t$audit_log", "--format", "csv", "--where", "id = 1")
    assert code == 0, err
    assert _csv(out) == [["rowkind", "id", "v"], ["-D", "1", "a"]]

    code, out, err = run(capsys, warehouse, "read", "db.t$options")
    assert code == 0, err
    assert "bucket" in out

    for name in ("schemas", "manifests", "partitions", "buckets", "tags", "consumers", "ro"):
        code, out, err = run(capsys, warehouse, "read", f"db.t${name}", "--format", "json")
        assert code == 0, (name, err)


def test_cli_system_table_errors(capsys: pytest.CaptureFixture[str], warehouse: str, table: strata.Table,
                                 tmp_path: Path) -> None:
    code, _, err = run(capsys, warehouse, "read", "db.t$nope")
    assert code == 2 and "no system table 'nope'" in err
    code, _, err = run(capsys, warehouse, "read", "db.t$snapshots", "--columns", "nope")
    assert code == 2 and "nope" in err
    out_file = tmp_path / "snap.parquet"
    code, _, err = run(capsys, warehouse, "read", "db.t$snapshots", "--format", "parquet", "--output", str(out_file))
    assert code == 0, err
    import pyarrow.parquet as pq

    assert pq.read_table(out_file).column("snapshot_id").to_pylist() == [1, 2, 3]
