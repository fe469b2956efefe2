"""The CLI's --where binds its literals as the Python API does (strata.expressions.literals.bind)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.cli import main

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("amount", pa.decimal128(10, 2)),
                    ("day", pa.date32()), ("ts", pa.timestamp("ms")), ("i8", pa.int8())])


@pytest.fixture
def warehouse(tmp_path: Path) -> Path:
    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({
        "id": [1, 2, 3], "amount": [Decimal("-1.00"), Decimal("0.00"), Decimal("0.01")],
        "day": [dt.date(2020, 1, 1), dt.date(2020, 1, 2), None],
        "ts": [dt.datetime(2019, 1, 1), dt.datetime(2019, 1, 1, 0, 0, 1), None], "i8": [1, -128, 127],
    }, schema=SCHEMA))
    return tmp_path


def ids(capsys: pytest.CaptureFixture[str], warehouse: Path, where: str) -> list[int]:
    assert main(["--warehouse", str(warehouse), "read", "db.t", "--where", where, "--columns", "id",
                 "--format", "json"]) == 0
    return sorted(row["id"] for row in json.loads(capsys.readouterr().out))


@pytest.mark.parametrize(("where", "expected"), [
    ("amount < 0.005", [1, 2]),
    ("amount = 0.005", []),
    ("amount >= 5e-3", [3]),
    ("day = '2020-01-01'", [1]),
    ("ts > '2019-01-01' AND i8 < 1000", [2]),
    ("i8 > 1000", []),
    ("i8 NOT IN (1, 1.5)", [2, 3]),
    ("ts BETWEEN '2018-12-31 23:00' AND '2019-01-01 00:00:00.5'", [1]),
])
def test_where_literals_bind_like_the_api(capsys, warehouse, where, expected) -> None:
    assert ids(capsys, warehouse, where) == expected


@pytest.mark.parametrize(("where", "names"), [
    ("nope = 1", ["'nope'", "['id', 'amount', 'day', 'ts', 'i8']"]),
    ("day = 'soon'", ["'day'", "DATE", "'soon'", "str"]),
    ("amount > 'x'", ["'amount'", "DECIMAL(10, 2)", "'x'", "str"]),
])
def test_where_errors_name_column_and_literal(capsys, warehouse, where, names) -> None:
    assert main(["--warehouse", str(warehouse), "read", "db.t", "--where", where]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in names), err
    assert "_KEY_" not in err


def test_delete_where_binds_too(capsys, warehouse) -> None:
    assert main(["--warehouse", str(warehouse), "delete", "db.t", "--where", "amount < 0.005"]) == 0
    capsys.readouterr()
    assert ids(capsys, warehouse, "id > 0") == [3]
