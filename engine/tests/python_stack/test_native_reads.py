"""Polars' scan and DuckDB's view of a local append table hand the planned files to the engine's
own Parquet reader (``strata.arrow_stream.native_files``): the rows and types are those Strata's
read gives, for every type an append table holds, NULLs included. Anything else (a file of an
older schema, a primary key, a deletion vector, an object store) is read by Strata, with the
same answer."""

from __future__ import annotations

import datetime as dt
import decimal

import duckdb
import polars as pl
import pyarrow as pa
import pytest

import strata
import strata.polars
from strata.schema.evolution import SchemaChange

pytestmark = pytest.mark.local_storage_only(reason="Polars reads the files itself on local disk only")

SCHEMA = pa.schema([
    pa.field("id", pa.int64(), nullable=False), ("tiny", pa.int8()), ("small", pa.int16()), ("i", pa.int32()),
    ("f", pa.float32()), ("d", pa.float64()), ("price", pa.decimal128(10, 2)), ("s", pa.string()),
    ("b", pa.binary()), ("flag", pa.bool_()), ("day", pa.date32()), ("ms", pa.timestamp("ms")),
    ("us", pa.timestamp("us")), ("utc", pa.timestamp("us", tz="UTC")), ("tags", pa.list_(pa.int32())),
    ("point", pa.struct([("x", pa.int32()), ("label", pa.string())])),
])


def rows(ids: range) -> pa.Table:
    def nulls(values: list[object]) -> list[object]:
        return [None if i % 5 == 0 else v for i, v in zip(ids, values, strict=True)]

    return pa.table({
        "id": list(ids), "tiny": nulls([i % 100 for i in ids]), "small": nulls([i * 3 for i in ids]),
        "i": nulls(list(ids)), "f": nulls([i / 4 for i in ids]), "d": nulls([i / 3 for i in ids]),
        "price": nulls([decimal.Decimal(i) / 100 for i in ids]), "s": nulls([f"s{i}" for i in ids]),
        "b": nulls([bytes([i % 256]) for i in ids]), "flag": nulls([i % 2 == 0 for i in ids]),
        "day": nulls([dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in ids]),
        "ms": nulls([dt.datetime(2024, 1, 1) + dt.timedelta(milliseconds=i) for i in ids]),
        "us": nulls([dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=i) for i in ids]),
        "utc": nulls([dt.datetime(2024, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids]),
        "tags": nulls([[i, i + 1] for i in ids]), "point": nulls([{"x": i, "label": f"p{i}"} for i in ids]),
    }, schema=SCHEMA)


def strata_read(table: strata.Table) -> pl.DataFrame:
    frame = pl.from_arrow(table.to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame.sort("id")


def test_every_type_reads_as_strata_reads_it(catalog: strata.Catalog,
                                             native_reads: list[tuple[list[str], object]]) -> None:
    table = catalog.create_table("db.typed", SCHEMA, options={"bucket": "-1"})
    table.write(rows(range(0, 40)))
    table.write(rows(range(40, 90)))
    got = strata.polars.scan(table).collect().sort("id")
    assert [paths for paths, _ in native_reads] == [[s.file_path(f) for s in table.new_scan().plan().splits
                                                     for f in s.files]]
    assert got.schema == strata_read(table).schema and got.equals(strata_read(table))
    filtered = strata.polars.scan(table).filter((pl.col("i") >= 30) & (pl.col("d") < 20.0)).select("id", "utc")
    expected = strata_read(table).filter((pl.col("i") >= 30) & (pl.col("d") < 20.0)).select("id", "utc")
    assert filtered.collect().sort("id").equals(expected) and expected.height > 0
    assert strata.polars.scan(table).head(3).collect().height == 3
    assert len(native_reads[-1][0]) == 1  # a row limit without a predicate hands over the files it needs


def test_files_of_an_older_schema_are_read_by_strata(catalog: strata.Catalog,
                                                     native_reads: list[tuple[list[str], object]]) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.evolved", schema, options={"bucket": "-1"})
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    table = table.alter(SchemaChange.rename_column("v", "w"), SchemaChange.add_column("n", "INT"))
    table.write(pa.table({"id": [3], "w": ["c"], "n": pa.array([7], pa.int32())}))
    got = strata.polars.scan(table).collect().sort("id")
    assert not native_reads  # the first file names its column v: Strata maps it by field id
    assert got.equals(strata_read(table)) and got["w"].to_list() == ["a", "b", "c"]


def test_primary_key_tables_are_read_by_strata(catalog: strata.Catalog,
                                               native_reads: list[tuple[list[str], object]]) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.keyed", schema, primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    table.write(pa.table({"id": [2], "v": ["B"]}, schema=schema))
    assert strata.polars.scan(table).collect().sort("id")["v"].to_list() == ["a", "B"]
    assert not native_reads


def test_duckdb_reads_every_type_as_through_strata(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.typed", SCHEMA, options={"bucket": "-1"})
    table.write(rows(range(0, 40)))
    table.write(rows(range(40, 90)))
    con = duckdb.connect()
    table.to_duckdb(con, "native")
    table.to_duckdb(con, "read", native=False)
    views = dict(con.sql("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
    assert "read_parquet" in views["native"] and "read_parquet" not in views.get("read", "")
    for query in ("SELECT * FROM {t} ORDER BY id", "SELECT id, utc FROM {t} WHERE i >= 30 AND d < 20 ORDER BY id",
                  "SELECT count(*), sum(price), max(us) FROM {t} WHERE s IS NOT NULL", "SELECT * FROM {t} LIMIT 0"):
        native, read = (con.sql(query.format(t=t)).to_arrow_table() for t in ("native", "read"))
        assert native.schema == read.schema and native.equals(read), query
    table.write(rows(range(90, 95)))  # registered views are pinned to their snapshot
    table.to_duckdb(con, "native")
    assert con.sql("SELECT count(*) FROM native").fetchall() == [(95,)]
