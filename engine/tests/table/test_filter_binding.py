"""Filters as users write them (issue 27): literals bound to the column types, FilterError for an
unknown column or a literal that does not convert, and no CorruptDataError for a filter's fault."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal

import pyarrow as pa
import pytest

import strata
from strata import col
from strata.errors import CorruptDataError, FilterError, SchemaMismatchError
from strata.expressions import BoundLeaf, Leaf, Predicate
from strata.expressions.literals import bind
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.schema.table_schema import schema_from_arrow

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("amount", pa.decimal128(10, 2)), ("big", pa.decimal128(38, 10)),
    ("ts", pa.timestamp("us")), ("lts", pa.timestamp("ms", tz="UTC")), ("day", pa.date32()),
    ("f", pa.float32()), ("name", pa.string()), ("i8", pa.int8()),
])
ROWS = pa.table({
    "id": [1, 2, 3, 4],
    "amount": [Decimal("-1.00"), Decimal("0.00"), Decimal("0.01"), None],
    "big": [Decimal(-1), Decimal(0), Decimal(5), None],
    "ts": [dt.datetime(2018, 1, 1), dt.datetime(2019, 1, 1), dt.datetime(2019, 1, 1, 0, 0, 1), None],
    "lts": [dt.datetime(2020, 1, 1, tzinfo=dt.UTC), None, dt.datetime(2020, 1, 1, 12, tzinfo=dt.UTC),
            dt.datetime(2019, 12, 31, 23, tzinfo=dt.UTC)],
    "day": [dt.date(2020, 1, 1), dt.date(2020, 1, 2), None, dt.date(2019, 12, 31)],
    "f": [0.5, 1.5, 2.5, None],
    "name": ["apple", "banana", None, "apricot"],
    "i8": [1, -128, 127, None],
}, schema=SCHEMA)
PLUS_2 = dt.timezone(dt.timedelta(hours=2))


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, strata.Table]:
    catalog = strata.load_catalog(str(tmp_path_factory.mktemp("wh")))
    catalog.create_database("db")
    pk = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "1", "write-only": "true"})
    append = catalog.create_table("db.log", SCHEMA, partition_keys=["day"],
                                  options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    for table in (pk, append):
        table.write(ROWS.slice(0, 2))
        table.write(ROWS.slice(2))
    return {"pk": pk, "append": append}


def ids(table: strata.Table, predicate: Predicate) -> list[int]:
    return sorted(table.to_arrow(["id"], filter=predicate).column("id").to_pylist())


@pytest.mark.parametrize("kind", ["pk", "append"])
@pytest.mark.parametrize(("predicate", "expected"), [
    # the table: each raised before
    (col("amount") < 0, [1]),
    (col("amount") < 100, [1, 2, 3]),
    (col("big") < 0, [1]),  # DECIMAL(38,10): no precision left for an int literal's cast
    (col("ts") > "2019-01-01", [3]),
    (col("day") == "2020-01-01", [1]),
    # exact comparisons with literals off the column's grid
    (col("amount") < 0.005, [1, 2]),
    (col("amount") <= Decimal("0.005"), [1, 2]),
    (col("amount") >= 0.005, [3]),
    (col("amount") == 0.005, []),
    (col("amount") != 0.005, [1, 2, 3]),  # NULL stays NULL
    (col("amount").isin([0, 0.001, Decimal("0.010")]), [2, 3]),
    (col("ts") < dt.datetime(2019, 1, 1, 0, 0, 0, 500_000), [1, 2]),
    (col("day") < dt.datetime(2020, 1, 1, 12), [1, 4]),  # the date as its midnight, as SQL casts it
    (col("day") > dt.datetime(2020, 1, 1, 12), [2]),
    # out of the column's range: always false or always true, no overflow
    (col("i8") > 1000, []),
    (col("i8") < 1000, [1, 2, 3]),
    (~(col("i8") == 1000), [1, 2, 3]),
    (col("i8") >= -(2**70), [1, 2, 3]),
    (col("i8") < float("inf"), [1, 2, 3]),
    (col("amount") > 10**12, []),
    # int to float; ISO strings, dates and aware datetimes to timestamps
    (col("f") > 1, [2, 3]),
    (col("f") == Decimal("1.5"), [2]),
    (col("ts").between(dt.date(2018, 6, 1), "2019-01-01T00:00:00.5"), [2]),
    (col("ts") > dt.datetime(2018, 12, 31, 23, tzinfo=dt.timezone(dt.timedelta(hours=-1))), [3]),
    (col("lts") >= "2020-01-01 13:00+02:00", [3]),
    (col("lts") < dt.datetime(2020, 1, 1), [4]),  # naive: UTC
    (col("day") >= dt.datetime(2020, 1, 1, 1, tzinfo=PLUS_2), [1, 2]),  # 2019-12-31 23:00 UTC
    # NULL literals compare as SQL's NULL; IN with a NULL never makes NOT IN true
    (col("name") == None, []),  # noqa: E711
    (col("day").isin(["2020-01-01", None]), [1]),
    (~col("day").isin(["2020-01-01", None]), []),
    (col("name").startswith("ap") & col("i8").is_null(), [4]),
    (col("name").startswith("ap") | (col("f") >= 2), [1, 3, 4]),
])
def test_literals_bind_to_the_column_type(tables, kind, predicate, expected) -> None:
    assert ids(tables[kind], predicate) == expected


@pytest.mark.parametrize(("predicate", "names"), [
    (col("name") > 1, ["'name'", "STRING", "1", "int"]),
    (col("i8") == "1", ["'i8'", "TINYINT", "'1'", "str"]),
    (col("day") == "yesterday", ["'day'", "DATE", "'yesterday'", "ISO"]),
    (col("ts") < 5, ["'ts'", "TIMESTAMP(6)", "5", "int"]),
    (col("amount") < math.nan, ["'amount'", "DECIMAL(10, 2)", "nan", "float"]),  # noqa: PLW0177
    (col("f").startswith("a"), ["'f'", "FLOAT", "string column"]),
    (col("i8") == True, ["'i8'", "bool"]),  # noqa: E712
])
def test_a_literal_that_does_not_convert_is_named(tables, predicate, names) -> None:
    for table in tables.values():
        with pytest.raises(FilterError) as failure:
            table.to_arrow(filter=predicate)
        for name in names:
            assert name in str(failure.value)


def test_an_unknown_column_lists_the_table_columns_only(tables) -> None:
    for table in tables.values():
        for call in (lambda t: t.to_arrow(filter=col("nope") > 1), lambda t: t.delete_where(col("nope") > 1),
                     lambda t: t.scan(filter=(col("id") > 1) & ~(col("nope") == 1))):
            with pytest.raises(FilterError, match="'nope'") as failure:
                call(table)
            assert str(SCHEMA.names) in str(failure.value)
            assert "_KEY_" not in str(failure.value) and "_VALUE_KIND" not in str(failure.value)


def test_pruning_and_rows_agree_on_bound_literals(tables) -> None:
    """The append table is partitioned by day: a string literal prunes partitions as it filters rows."""
    table = tables["append"]
    scan = table.new_scan(filter=col("day") == "2020-01-02")
    plan = scan.plan()
    assert [s.partition_values for s in plan.splits] == [(dt.date(2020, 1, 2),)]
    assert plan.stats.files_skipped >= 2
    read = table.new_read(["id"], filter=col("day") == "2020-01-02")
    assert read.to_arrow(plan.splits).column("id").to_pylist() == [2]


def test_binding_is_idempotent_and_keeps_bound_leaves() -> None:
    schema = schema_from_arrow(SCHEMA)
    bound = bind(col("amount") < 0.005, schema)
    assert isinstance(bound, BoundLeaf) and bound.op == "le" and bound.literals == (Decimal("0.00"),)
    assert bind(bound, schema) is bound
    assert bind(None, schema) is None


def test_delete_where_binds_like_reads(tmp_path) -> None:
    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(ROWS)
    assert table.delete_where(col("amount") < 0.005).deleted_rows == 2
    assert ids(table, col("id") > 0) == [3, 4]
    with pytest.raises(FilterError, match="'day'"):
        table.delete_where(col("day") == 20200101)


def test_delete_by_key_columns_alone(tmp_path) -> None:
    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string(), nullable=False),
                        pa.field("qty", pa.int32(), nullable=False), ("note", pa.string())])
    table = catalog.create_table("db.orders", schema, primary_keys=["region", "id"], partition_keys=["region"],
                                 options={"bucket": "1"})
    table.write(pa.table({"id": [1, 2, 1], "region": ["eu", "eu", "us"], "qty": [5, 6, 7], "note": ["a", "b", "c"]},
                         schema=schema))
    table.delete(pa.table({"id": [1], "region": ["eu"]}))
    assert sorted(table.to_arrow().select(["region", "id"]).to_pylist(), key=str) == \
        [{"region": "eu", "id": 2}, {"region": "us", "id": 1}]
    with pytest.raises(SchemaMismatchError, match=r"\['region'\]"):
        table.delete(pa.table({"id": [2]}))


def test_a_filter_fault_in_the_file_reader_is_not_corrupt_data(tmp_path) -> None:
    """An unbound predicate the kernels cannot evaluate fails as a FilterError; the file is fine."""
    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.log", SCHEMA)
    table.write(ROWS)
    split = table.scan()[0]
    path = f"{split.bucket_path}/{split.files[0].file_name}"
    mapping = ColumnMapping(table.schema, table.schema, ["id", "name"])
    with pytest.raises(FilterError, match="name") as failure:
        list(read_file(table.file_io, path, mapping, row_filter=Leaf("name", "gt", (1,))))
    assert not isinstance(failure.value, CorruptDataError)
    with open(path, "r+b") as broken:  # a real fault is still reported as one
        broken.truncate(40)
    with pytest.raises(CorruptDataError, match="unreadable"):
        list(read_file(table.file_io, path, mapping))


def test_a_store_that_does_not_answer_is_not_corrupt_data(tmp_path) -> None:
    """A read the object store failed to answer stays an OSError naming the file (a retry may read
    it); only a damaged file is CorruptDataError."""
    from strata.fs.s3 import S3FileIO

    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.log", SCHEMA)
    mapping = ColumnMapping(table.schema, table.schema, ["id", "name"])
    closed = S3FileIO({"s3.endpoint": "http://127.0.0.1:9", "s3.access-key": "k", "s3.secret-key": "s",
                       "s3.region": "us-east-1", "s3.max-attempts": "1"})
    path = "s3://nobucket/db.db/log/bucket-0/data-0.parquet"
    with pytest.raises(OSError, match=r"data-0\.parquet") as failure:
        list(read_file(closed, path, mapping))
    assert not isinstance(failure.value, CorruptDataError)
