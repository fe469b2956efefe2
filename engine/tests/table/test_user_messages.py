"""What a new user sees when a call goes wrong: the message names what was asked for, as written."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.cli import main
from strata.errors import DatabaseNotFoundError, OptionError, SnapshotNotFoundError, TableNotFoundError

pytestmark = pytest.mark.local_storage_only(reason="messages do not depend on the storage")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("amount", pa.float64())])


def _table(catalog: strata.Catalog, commits: int) -> strata.Table:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    for i in range(commits):
        table.write(pa.table({"id": [i], "amount": [float(i)]}, schema=SCHEMA))
    return table


def test_not_found_errors_print_their_message_without_quotes(catalog: strata.Catalog) -> None:
    table = _table(catalog, 1)
    for call, kind, message in [
        (lambda: catalog.get_table("db.order"), TableNotFoundError, "table db.order does not exist"),
        (lambda: catalog.list_tables("nope"), DatabaseNotFoundError, "database 'nope' does not exist"),
        (lambda: table.snapshot_manager.snapshot(9), SnapshotNotFoundError, "snapshot 9 does not exist"),
    ]:
        with pytest.raises(kind) as raised:
            call()
        assert str(raised.value).startswith(message), str(raised.value)
        assert isinstance(raised.value, KeyError)  # still catchable as one
    assert str(TableNotFoundError("a", "b")) == "('a', 'b')"  # several arguments: the tuple, as Exception


def test_an_unknown_option_suggests_the_nearest_known_one(catalog: strata.Catalog) -> None:
    with pytest.raises(OptionError, match=r"unknown option 'buckets' for .*; did you mean 'bucket'\?$"):
        catalog.create_table("db.a", SCHEMA, options={"buckets": "4"})
    with pytest.raises(OptionError, match="did you mean 'merge-engine'"):
        catalog.create_table("db.a", SCHEMA, primary_keys=["id"], options={"merge_engine": "first-row"})
    with pytest.raises(OptionError) as far_off:
        catalog.create_table("db.a", SCHEMA, options={"colour": "blue"})
    assert "did you mean" not in str(far_off.value)


def test_read_incremental_names_the_end_snapshot_that_was_asked_for(catalog: strata.Catalog) -> None:
    table = _table(catalog, 3)
    assert table.read_incremental(1, 3).num_rows == 2
    with pytest.raises(SnapshotNotFoundError) as raised:
        table.read_incremental(1, 99)
    assert str(raised.value) == "read_incremental(1, 99) of table db.t: snapshot 99 does not exist; the latest is 3"


def test_read_incremental_refuses_a_start_after_its_end(catalog: strata.Catalog) -> None:
    table = _table(catalog, 5)
    assert table.read_incremental(3, 3).num_rows == 0  # an empty range is a valid question
    with pytest.raises(ValueError) as raised:
        table.read_incremental(5, 3)
    assert str(raised.value) == ("read_incremental(5, 3) of table db.t: the start snapshot 5 is after the end "
                                 "snapshot 3 (the range is start exclusive, end inclusive)")
    with pytest.raises(ValueError, match="start snapshot 4 is after the end snapshot 2"):
        table.system_table("audit_log", incremental_between=(4, 2))


def test_reset_consumer_refuses_a_snapshot_past_the_next_one(catalog: strata.Catalog) -> None:
    table = _table(catalog, 4)
    table.reset_consumer("etl", 5)  # latest + 1: everything read
    assert table.consumers.consumers() == {"etl": 5}
    with pytest.raises(SnapshotNotFoundError) as raised:
        table.reset_consumer("etl", 42)
    assert str(raised.value) == ("consumer 'etl' of table db.t cannot move to snapshot 42: the latest is 4, "
                                 "so the next snapshot is at most 5")
    assert table.consumers.consumers() == {"etl": 5}
    empty = catalog.create_table("db.empty", SCHEMA)
    with pytest.raises(SnapshotNotFoundError, match="the latest is none"):
        empty.reset_consumer("etl", 2)


def test_cli_write_of_floats_into_a_decimal_stores_exact_values_and_refuses_the_rest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    warehouse = str(tmp_path / "wh")
    assert main(["--warehouse", warehouse, "create-database", "shop"]) == 0
    assert main(["--warehouse", warehouse, "create-table", "shop.items", "--schema",
                 "id BIGINT NOT NULL, price DECIMAL(10,2)", "--primary-key", "id", "--option", "bucket=1"]) == 0
    exact, inexact = tmp_path / "exact.parquet", tmp_path / "inexact.parquet"
    pq.write_table(pa.table({"id": [1, 2, 3], "price": [2.5, 0.1, 19.99]}), exact)
    pq.write_table(pa.table({"id": [4, 5], "price": [3.0, 1.005]}), inexact)
    capsys.readouterr()

    assert main(["--warehouse", warehouse, "write", "shop.items", "--input", str(exact)]) == 0
    # 1.005 is the double 1.00499999999999989...: DECIMAL(10,2) cannot hold it, so nothing is written
    assert main(["--warehouse", warehouse, "write", "shop.items", "--input", str(inexact)]) == 2
    err = capsys.readouterr().err
    assert "column 'price' of table shop.items: cannot store double values as decimal128(10, 2)" in err
    assert "row 1: 1.005 would become 1.00; round them to the column's scale first" in err
    table = strata.load_catalog(warehouse).get_table("shop.items")
    assert table.to_arrow().sort_by("id").column("price").to_pylist() == [
        Decimal("2.50"), Decimal("0.10"), Decimal("19.99")]
    assert len(table.snapshots()) == 1


def test_missing_s3_credentials_say_where_they_come_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    lake = strata.load_catalog("s3://warehouse/lake", **{"s3.endpoint": "http://127.0.0.1:9"})  # never reached
    with pytest.raises(OSError) as raised:
        lake.create_database("shop")
    assert "Unable to locate credentials: pass the catalog options s3.access-key and s3.secret-key" \
        in str(raised.value)
    assert 'eval "$(.venv/bin/strata-services env minio)"' in str(raised.value)


def test_a_failed_spark_commit_reports_its_cause_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """As Spark's commit worker does (pyspark.sql.worker.utils.worker_run): the text after
    'Failed to commit or abort Python data source write: ' starts with the cause."""
    pytest.importorskip("pyspark")
    import io

    from pyspark.util import handle_worker_exception

    from strata.spark.writer import cause_first

    class Writer:
        @cause_first
        def commit(self, messages: list[object]) -> None:
            raise ValueError("overwrite of partition {'dt': '2024-01-01'} got rows of partition {'dt': '2024-01-02'}")

    monkeypatch.delenv("SPARK_HIDE_TRACEBACK", raising=False)  # restored after the test
    monkeypatch.setenv("SPARK_SIMPLIFIED_TRACEBACK", "1")  # Spark's default
    worker_output = io.BytesIO()
    try:
        Writer().commit([])
    except ValueError as exc:
        handle_worker_exception(exc, worker_output)
    reported = worker_output.getvalue()[8:].decode()  # after the exception marker and the length
    assert reported == ("ValueError: overwrite of partition {'dt': '2024-01-01'} got rows of partition "
                        "{'dt': '2024-01-02'}\n")
