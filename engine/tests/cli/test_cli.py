"""The `strata` command line, driven through main([...]) on temporary warehouses."""

from __future__ import annotations

import datetime as dt
import io
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

import strata
from strata.cli import build_table_schema, main, parse_where
from strata.expressions import ColumnStats

SCHEMA = "id BIGINT NOT NULL, name STRING, dt STRING, price DECIMAL(10,2)"


def _input_table() -> pa.Table:
    return pa.table({
        "id": pa.array([1, 2, 3, 4, 5, 6], pa.int64()),
        "name": ["apple", "pear, ripe", None, 'quo"te', "fig", "kiwi"],
        "dt": ["2024-01-01", "2024-01-01", "2024-01-02", "2024-01-02", "2024-01-03", "2024-01-03"],
        "price": pa.array([Decimal("1.50"), Decimal("2.25"), None, Decimal("10.00"), Decimal("0.99"),
                           Decimal("3.10")], pa.decimal128(10, 2)),
    })


def run(capsys: pytest.CaptureFixture[str], warehouse: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--warehouse", str(warehouse), *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def populated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A warehouse with db.t (PK id,dt, partitioned by dt, 4 buckets) holding _input_table()."""
    wh = tmp_path / "wh"
    assert run(capsys, wh, "create-database", "db")[0] == 0
    code, out, err = run(capsys, wh, "create-table", "db.t", "--schema", SCHEMA, "--primary-key", "id,dt",
                         "--partition", "dt", "--option", "bucket=4", "--option", "file.compression=zstd")
    assert code == 0, err
    assert "created table db.t" in out
    source = tmp_path / "input.parquet"
    pq.write_table(_input_table(), source)
    code, out, err = run(capsys, wh, "write", "db.t", "--input", str(source))
    assert code == 0, err
    assert "wrote 6 rows to db.t" in out
    return wh


def _sorted(table: pa.Table) -> pa.Table:
    return table.sort_by("id")


def test_create_write_read_csv_roundtrip(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, populated, "read", "db.t", "--format", "csv")
    assert code == 0, err
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("dt", pa.string()),
                        ("price", pa.decimal128(10, 2))])
    got = pcsv.read_csv(io.BytesIO(out.encode()), convert_options=pcsv.ConvertOptions(
        column_types=schema, strings_can_be_null=True))
    expected = _input_table()
    assert _sorted(got).to_pylist() == _sorted(expected).to_pylist()


def test_table_schema_from_cli(populated: Path) -> None:
    table = strata.load_catalog(str(populated)).get_table("db.t")
    assert table.schema.primary_keys == ["id", "dt"]
    assert table.schema.partition_keys == ["dt"]
    assert table.schema.options == {"bucket": "4", "file.compression": "zstd"}
    types = {f.name: f.type.to_json() for f in table.schema.fields}
    assert types == {"id": "BIGINT NOT NULL", "name": "STRING", "dt": "STRING NOT NULL",
                     "price": "DECIMAL(10, 2)"}


def test_read_output_file_and_formats(populated: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "out.parquet"
    code, _, err = run(capsys, populated, "read", "db.t", "--format", "parquet", "--output", str(target))
    assert code == 0, err
    assert _sorted(pq.read_table(target)).to_pylist() == _sorted(_input_table()).to_pylist()

    code, out, _ = run(capsys, populated, "read", "db.t", "--format", "json", "--columns", "id,price",
                       "--where", "id BETWEEN 2 AND 4 AND price IS NOT NULL")
    assert code == 0
    rows = sorted(json.loads(out), key=lambda r: r["id"])
    assert rows == [{"id": 2, "price": "2.25"}, {"id": 4, "price": "10.00"}]

    csv_file = tmp_path / "out.csv"
    code, out, _ = run(capsys, populated, "read", "db.t", "--format", "csv", "--output", str(csv_file))
    assert code == 0 and out == ""
    assert csv_file.read_text().splitlines()[0] == '"id","name","dt","price"'


def test_read_table_format_limit_snapshot(populated: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, populated, "read", "db.t", "--where", "dt = '2024-01-02'")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "name", "dt", "price"]
    assert set(lines[1]) <= {"-", " "}
    assert "quo\"te" in out and "NULL" in out and "(2 rows)" in out

    code, out, _ = run(capsys, populated, "read", "db.t", "--limit", "2", "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 3

    update = tmp_path / "update.parquet"
    pq.write_table(_input_table().slice(0, 1).set_column(1, "name", pa.array(["APPLE"])), update)
    assert run(capsys, populated, "write", "db.t", "--input", str(update))[0] == 0
    _, now, _ = run(capsys, populated, "read", "db.t", "--where", "id = 1", "--format", "json")
    _, before, _ = run(capsys, populated, "read", "db.t", "--where", "id = 1", "--format", "json",
                       "--snapshot", "1")
    assert json.loads(now)[0]["name"] == "APPLE"
    assert json.loads(before)[0]["name"] == "apple"


def test_describe(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, populated, "describe", "db.t")
    assert code == 0
    assert "db.t" in out
    assert "BIGINT NOT NULL" in out and "DECIMAL(10, 2)" in out
    assert "Primary key:    id, dt" in out
    assert "Partition keys: dt" in out
    assert "bucket = 4" in out
    assert "Latest snapshot: 1 (APPEND" in out and "1 snapshot(s) retained" in out
    assert "in 3 partition(s)" in out
    assert "6 rows" in out


def test_snapshots(populated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "again.parquet"
    pq.write_table(_input_table().slice(0, 2), source)
    assert run(capsys, populated, "write", "db.t", "--input", str(source), "--mode", "overwrite")[0] == 0
    code, out, _ = run(capsys, populated, "snapshots", "db.t")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["id", "kind", "commit_user", "identifier", "time", "total_records",
                                "delta_records"]
    first, second = lines[2].split(), lines[3].split()
    assert first[0] == "1" and first[1] == "APPEND" and first[-2:] == ["6", "6"]
    assert second[0] == "2" and second[1] == "OVERWRITE"
    snaps = strata.load_catalog(str(populated)).get_table("db.t").snapshots()
    assert snaps[0].commit_user in out and str(snaps[1].total_record_count) == second[-2]


def test_files(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, populated, "files", "db.t")
    assert code == 0
    table = strata.load_catalog(str(populated)).get_table("db.t")
    files = [f for s in table.new_scan().plan().splits for f in s.files]
    assert out.splitlines()[0] == f"snapshot 1: {len(files)} file(s)"
    assert "dt=2024-01-01" in out and "dt=2024-01-03" in out
    for f in files:
        assert f.file_name in out
    assert sum(int(line.split()[4]) for line in out.splitlines()[3:]) == 6
    code, out, _ = run(capsys, populated, "files", "db.t", "--snapshot", "1")
    assert code == 0 and "snapshot 1" in out


def test_list_tables_and_databases(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, populated, "create-table", "db.other", "--schema", "a INT")[0] == 0
    assert run(capsys, populated, "list-tables", "db")[1].split() == ["other", "t"]
    assert run(capsys, populated, "list-tables")[1].split() == ["db.other", "db.t"]
    assert run(capsys, populated, "list-databases")[1].split() == ["db"]


def test_write_csv_and_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wh = tmp_path / "wh"
    run(capsys, wh, "create-database", "db")
    assert run(capsys, wh, "create-table", "db.a", "--schema", "id INT, ts TIMESTAMP(6), v DOUBLE")[0] == 0
    source = tmp_path / "in.csv"
    source.write_text("id,ts,v\n1,2024-05-01 10:00:00.5,1.5\n2,,\n")
    code, _, err = run(capsys, wh, "write", "db.a", "--input", str(source))
    assert code == 0, err
    code, _, err = run(capsys, wh, "write", "db.a", "--input", str(source), "--mode", "overwrite")
    assert code == 0, err
    data = strata.load_catalog(str(wh)).get_table("db.a").to_arrow().sort_by("id")
    assert data.to_pylist() == [{"id": 1, "ts": dt.datetime(2024, 5, 1, 10, 0, 0, 500000), "v": 1.5},
                                {"id": 2, "ts": None, "v": None}]


def test_warehouse_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STRATA_WAREHOUSE", str(tmp_path / "envwh"))
    assert main(["create-database", "x"]) == 0
    assert (tmp_path / "envwh" / "x.db").is_dir()
    monkeypatch.delenv("STRATA_WAREHOUSE")
    monkeypatch.chdir(tmp_path)
    assert main(["create-database", "y"]) == 0
    assert (tmp_path / "warehouse" / "y.db").is_dir()
    capsys.readouterr()


@pytest.mark.parametrize(("args", "needle"), [
    (["read", "db.missing"], "db.missing"),
    (["describe", "nodb.t"], "nodb.t"),
    (["list-tables", "nodb"], "nodb"),
    (["files", "db.t", "--snapshot", "99"], "snapshot 99"),
    (["read", "db.t", "--snapshot", "99"], "snapshot 99"),
    (["write", "db.t", "--input", "/no/such/file.parquet"], "/no/such/file.parquet"),
    (["write", "db.t", "--input", "INPUT.txt"], "INPUT.txt"),
    (["create-table", "db.x", "--schema", "id BIGINTEGER"], "BIGINTEGER"),
    (["create-table", "db.x", "--schema", "id INT", "--option", "no-such-option=1"], "no-such-option"),
    (["create-table", "db.x", "--schema", "id INT", "--option", "bucket=zero"], "bucket"),
    (["create-table", "db.x", "--schema", "id INT", "--option", "novalue"], "novalue"),
    (["create-table", "db.x", "--schema", "id INT", "--primary-key", "nope"], "nope"),
    (["create-table", "db.x", "--schema", "id INT", "--primary-key", "id", "--option", "bucket=-2"], "postpone"),
    (["create-table", "db.t", "--schema", "id INT"], "db.t"),
    (["create-table", "notatable", "--schema", "id INT"], "notatable"),
    (["read", "db.t", "--columns", "id,nope"], "nope"),
    (["read", "db.t", "--where", "nope = 1"], "nope"),
    (["read", "db.t", "--where", "id = 'abc'"], "id"),
    (["read", "db.t", "--where", "id >"], "--where"),
    (["read", "db.t", "--format", "parquet"], "--output"),
    (["create-database", "db"], "db"),
])
def test_errors_exit_2_with_one_line(populated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     args: list[str], needle: str) -> None:
    args = [str(tmp_path / a) if a == "INPUT.txt" else a for a in args]
    if any(a.endswith("INPUT.txt") for a in args):
        (tmp_path / "INPUT.txt").write_text("x")
    code, _, err = run(capsys, populated, *args)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("strata: error: ")
    assert needle in lines[0]
    assert "Traceback" not in err


def test_write_schema_mismatch_is_a_clear_error(populated: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": [1], "other": ["x"]}), bad)
    code, _, err = run(capsys, populated, "write", "db.t", "--input", str(bad))
    assert code == 2 and "db.t" in err and err.count("\n") == 1


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--warehouse", str(tmp_path), "no-such-command"]) == 2
    assert main(["--warehouse", str(tmp_path), "create-table", "db.t"]) == 2  # --schema missing
    capsys.readouterr()


def test_parse_helpers() -> None:
    schema = build_table_schema("id BIGINT, name VARCHAR(20) COMMENT 'the, name', d DECIMAL(12, 3) NOT NULL",
                                [], ["id"], {"bucket": "1"})
    assert [f.type.to_json() for f in schema.fields] == ["BIGINT NOT NULL", "VARCHAR(20)",
                                                         "DECIMAL(12, 3) NOT NULL"]
    assert schema.fields[1].description == "the, name"
    pred = parse_where("id IN (1, 2) AND name LIKE 'ab%' AND d >= 1.5 AND id NOT BETWEEN 5 AND 6", schema)
    assert pred.fields() == {"id", "name", "d"}
    assert not pred.may_match(lambda name: ColumnStats(3, 4, 0, 1)
                              if name == "id" else None)


def test_compact_command_merges_level_zero_runs(tmp_path, capsys) -> None:
    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("p", pa.string(), nullable=False)])
    table = catalog.create_table("db.c", schema, partition_keys=["p"], primary_keys=["p", "id"],
                                 options={"bucket": "1", "write-only": "true"})
    for i in range(3):
        table.write(pa.table({"id": [i, i + 10], "p": ["x", "y"]}, schema=schema))
    assert main(["--warehouse", warehouse, "compact", "db.c", "--full", "--partition", "p=x"]) == 0
    levels = {(s.partition_values[0], f.level) for s in table.scan() for f in s.files}
    assert ("x", 0) not in levels and ("y", 0) in levels  # only partition x was compacted
    assert main(["--warehouse", warehouse, "compact", "db", "--database", "--full"]) == 0
    assert all(f.level > 0 for s in table.scan() for f in s.files)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "db.c: compacted 3 data files into 1 (snapshot 4)"  # partition x's runs
    assert out[1] == "db.c: compacted 3 data files into 1 (snapshot 5)"  # y's runs; x is done
    assert main(["--warehouse", warehouse, "compact", "db.c", "--full"]) == 0
    assert capsys.readouterr().out == "db.c: nothing to compact, no snapshot\n"
