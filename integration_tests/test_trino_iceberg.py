"""Trino reads Strata tables: its ``strata`` catalog is the Iceberg connector on Strata's own Iceberg
REST catalog (the ``iceberg_rest`` service), the data files on MinIO.

The tables are written by the engine on MinIO, in the warehouse the REST catalog serves, with
``metadata.iceberg.storage=rest-catalog`` (Iceberg metadata published after each commit), and
Trino's rows are compared with ``table.to_arrow()``: a partitioned append table, and a primary-key
table with 64-bit deletion vectors. A table with hand-written metadata (no snapshot) is read too.

The compatibility suite (``SHAPES``): table shapes declared as data (append tables unpartitioned,
partitioned by one and two keys, bucketed; primary-key tables with deletion vectors for each merge
engine that takes them, 1 and 4 buckets, 64-bit bitmaps, deletes, schema evolution; primary-key
tables without vectors after a full compaction; every exported type with nulls), each written once
and checked against Strata's reader: SELECT *, a filter on a non-key column, count/sum/min/max, time
travel by snapshot id and by commit time, ``$snapshots`` and ``$files`` against Paimon's snapshots
and the files Strata exposes, and partition pruning as Trino's own split counts show it. pyiceberg,
through the REST catalog, reads two of the shapes too.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, localcontext
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata_platform.services.base import Service

pytestmark = [pytest.mark.trino, pytest.mark.minio, pytest.mark.e2e]


def query(trino: Service, sql: str) -> list[list[Any]]:
    rows: list[list[Any]] = trino.query(sql)  # type: ignore[attr-defined]
    return rows


def strata_rows(table: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    data = table.to_arrow(**kwargs)
    return sorted(tuple(row.values()) for row in data.to_pylist())


def trino_rows(trino: Service, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in query(trino, sql))


# -- the catalog ------------------------------------------------------------------------------------------
def test_strata_catalog_lists_the_databases(trino: Service, iceberg_rest: Service, rest_database: str) -> None:
    assert "strata" in {row[0] for row in query(trino, "SHOW CATALOGS")}
    schemas = {row[0] for row in query(trino, "SHOW SCHEMAS FROM strata")}
    assert rest_database in schemas
    assert query(trino, f"SHOW TABLES FROM strata.{rest_database}") == []


def test_hand_written_metadata_of_an_empty_table(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    table = rest_catalog.create_table(f"{rest_database}.empty", pa.schema([("id", pa.int64()), ("name", pa.string())]))
    metadata = {
        "format-version": 2, "table-uuid": str(uuid.uuid4()), "location": table.path, "last-sequence-number": 0,
        "last-updated-ms": int(time.time() * 1000), "last-column-id": 2,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": False, "type": "long"},
            {"id": 2, "name": "name", "required": False, "type": "string"}]}],
        "current-schema-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}], "default-spec-id": 0,
        "last-partition-id": 999, "sort-orders": [{"order-id": 0, "fields": []}], "default-sort-order-id": 0,
        "properties": {}, "current-snapshot-id": -1, "snapshots": [], "snapshot-log": [], "metadata-log": [],
        "refs": {},
    }
    table.file_io.write_bytes(f"{table.path}/metadata/v1.metadata.json", json.dumps(metadata).encode())
    table.file_io.write_bytes(f"{table.path}/metadata/version-hint.text", b"1")
    assert ["empty"] in query(trino, f"SHOW TABLES FROM strata.{rest_database}")
    assert query(trino, f"SELECT * FROM strata.{rest_database}.empty") == []
    assert [row[:2] for row in query(trino, f"DESCRIBE strata.{rest_database}.empty")] == [
        ["id", "bigint"], ["name", "varchar"]]


def test_a_table_without_iceberg_metadata_is_not_there(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    rest_catalog.create_table(f"{rest_database}.paimon_only", pa.schema([("id", pa.int64())]))
    assert ["paimon_only"] not in query(trino, f"SHOW TABLES FROM strata.{rest_database}")
    with pytest.raises(Exception, match="does not exist"):
        query(trino, f"SELECT * FROM strata.{rest_database}.paimon_only")


# -- tables the engine writes ---------------------------------------------------------------------------------
ORDERS = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("day", pa.string()),
    ("qty", pa.int32()),
    ("amount", pa.float64()),
    ("price", pa.decimal128(10, 2)),
    ("paid", pa.bool_()),
    ("shipped", pa.date32()),
    ("created", pa.timestamp("us")),
])


def orders(ids: range, day: str) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": list(ids),
        "day": [day] * n,
        "qty": pa.array([i % 7 for i in ids], pa.int32()),
        "amount": [i * 1.5 for i in ids],
        "price": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
        "paid": [i % 2 == 0 for i in ids],
        "shipped": pa.array([dt.date(2025, 1, 1) + dt.timedelta(days=i % 30) for i in ids], pa.date32()),
        "created": pa.array([dt.datetime(2025, 1, 1, 12) + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
    }, schema=ORDERS)


def test_partitioned_append_table(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    table = rest_catalog.create_table(f"{rest_database}.orders", ORDERS, partition_keys=["day"],
                                 options={"metadata.iceberg.storage": "rest-catalog"})
    name = f"strata.{rest_database}.orders"
    table.write(orders(range(0, 300), "2025-01-01"))
    first = table.latest_snapshot().id
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    # each commit is visible at the next query: no restart, no cache to refresh
    table.write(pa.concat_tables([orders(range(300, 500), "2025-01-02"), orders(range(500, 550), "2025-01-03")]))
    table.write(orders(range(550, 600), "2025-01-01"))
    table = rest_catalog.get_table(f"{rest_database}.orders")
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    assert query(trino, f"SELECT count(*), sum(qty), sum(price) FROM {name}") == [
        [600, sum(i % 7 for i in range(600)), sum(Decimal(i) / 4 for i in range(600))]]
    # the partition column filters, and the partitions are Iceberg partitions
    assert trino_rows(trino, f"SELECT id FROM {name} WHERE day = '2025-01-01'") == sorted(
        (i,) for i in [*range(300), *range(550, 600)])
    partitions = query(trino, f'SELECT partition.day, record_count FROM strata.{rest_database}."orders$partitions"')
    assert sorted(partitions) == [["2025-01-01", 350], ["2025-01-02", 200], ["2025-01-03", 50]]
    # time travel: Iceberg snapshot ids are Strata's
    assert trino_rows(trino, f"SELECT * FROM {name} FOR VERSION AS OF BIGINT '{first}'") == strata_rows(
        table, snapshot_id=first)


def test_primary_key_table_with_deletion_vectors(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("score", pa.int32())])
    table = rest_catalog.create_table(f"{rest_database}.users", schema, primary_keys=["id"], options={
        "metadata.iceberg.storage": "rest-catalog", "bucket": "2",
        "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": "true",
        "compaction.delete-ratio-threshold": "1.0"})  # keep the vectors: Trino reads them as position deletes
    name = f"strata.{rest_database}.users"

    def rows(ids: list[int], suffix: str) -> pa.Table:
        return pa.table({"id": ids, "name": [f"{suffix}{i}" for i in ids],
                         "score": pa.array([i * 10 for i in ids], pa.int32())}, schema=schema)

    table.write(rows(list(range(200)), "v1-"))
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    table.write(rows(list(range(0, 200, 3)), "v2-"))  # upserts: the old rows are marked deleted
    table.delete(rows(list(range(1, 200, 10)), ""))
    table.write(rows(list(range(200, 220)), "v1-"))
    table = rest_catalog.get_table(f"{rest_database}.users")
    expected = strata_rows(table)
    assert len(expected) == 220 - len(range(1, 200, 10))
    assert trino_rows(trino, f"SELECT * FROM {name}") == expected
    assert query(trino, f"SELECT name FROM {name} WHERE id = 3") == [["v2-3"]]
    assert query(trino, f"SELECT count(*) FROM {name} WHERE id = 11") == [[0]]
    # what Trino reads: data files and position deletes published from the deletion vectors
    contents = {row[0] for row in query(trino, f'SELECT content FROM strata.{rest_database}."users$files"')}
    assert contents == {0, 1}, contents  # 1: position deletes


def test_the_catalog_is_read_only_for_trino(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    table = rest_catalog.create_table(f"{rest_database}.guarded", pa.schema([("id", pa.int64())]),
                                 options={"metadata.iceberg.storage": "rest-catalog"})
    table.write(pa.table({"id": [1, 2]}))
    for sql in (f"INSERT INTO strata.{rest_database}.guarded VALUES 3",
                f"DELETE FROM strata.{rest_database}.guarded WHERE id = 1",
                f"CREATE TABLE strata.{rest_database}.other (id bigint)",
                f"DROP TABLE strata.{rest_database}.guarded"):
        with pytest.raises(Exception, match="Access Denied"):
            query(trino, sql)
    assert trino_rows(trino, f"SELECT * FROM strata.{rest_database}.guarded") == [(1,), (2,)]


# -- the compatibility suite: table shapes Strata writes, read by Trino ------------------------------------
# Each shape is data: a schema, how the table is created, the operations that build it (writes, deletes,
# compactions, schema changes, and "mark": the snapshot time travel goes back to), a filter on a non-key
# column (SQL and Strata predicate), a numeric column to aggregate, and for partitioned shapes a partition
# filter whose query must read fewer splits. Each shape is written once, then every check runs on it.
Step = tuple[Any, ...]
DAYS = ("2025-03-01", "2025-03-02", "2025-03-03")
ICEBERG_REST = {"metadata.iceberg.storage": "rest-catalog"}
# the shapes export deletion vectors: a one-shot write would purge files past the ratio (0.2)
DV = {**ICEBERG_REST, "deletion-vectors.enabled": "true", "compaction.delete-ratio-threshold": "1.0"}
BASE = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    pa.field("day", pa.string(), nullable=False),
    ("region", pa.string()),
    ("qty", pa.int32()),
    ("amount", pa.float64()),
    ("price", pa.decimal128(10, 2)),
    ("note", pa.string()),
])
TYPES = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("flag", pa.bool_()),
    ("tiny", pa.int8()),
    ("small", pa.int16()),
    ("i32", pa.int32()),
    ("i64", pa.int64()),
    ("f32", pa.float32()),
    ("f64", pa.float64()),
    ("dec_small", pa.decimal128(9, 2)),
    ("dec_38", pa.decimal128(38, 10)),
    ("dec_38_0", pa.decimal128(38, 0)),
    ("s", pa.string()),
    ("b", pa.binary()),
    ("d", pa.date32()),
    ("ts3", pa.timestamp("ms")),
    ("ts6", pa.timestamp("us")),
    ("tz3", pa.timestamp("ms", tz="UTC")),
    ("tz6", pa.timestamp("us", tz="UTC")),
])
_T0 = dt.datetime(2025, 3, 1, 8, 30)
# the value of column `name` for key i written in round v (None: a null); the columns added by schema
# evolution have values too. Every nullable column of TYPES has nulls.
VALUES: dict[str, Any] = {
    "id": lambda i, v: i,
    "day": lambda i, v: DAYS[i % 3],
    "region": lambda i, v: ("eu", "us")[i % 2],
    "qty": lambda i, v: (i * 3 + v) % 11,
    "amount": lambda i, v: i * 1.25 + v,
    "price": lambda i, v: Decimal(i * 7 + v) / 4,
    "note": lambda i, v: None if i % 5 == 0 else f"n{i}-v{v}",
    "label": lambda i, v: f"l{i}-v{v}",
    "extra": lambda i, v: i / 8 + v,
    "flag": lambda i, v: None if i % 7 == 3 else (i + v) % 2 == 0,
    "tiny": lambda i, v: None if i % 7 == 4 else (i + v) % 256 - 128,
    "small": lambda i, v: None if i % 7 == 5 else i * 37 % 65536 - 32768,
    "i32": lambda i, v: None if i % 7 == 6 else i * 1_000_003 % 2**31 - 2**30 + v,
    "i64": lambda i, v: None if i % 7 == 0 else i * 10**15 + v,
    "f32": lambda i, v: None if i % 7 == 1 else i / 4 - 10 + v,  # exact in float32: no rounding either side
    "f64": lambda i, v: None if i % 7 == 2 else i / 3 + v,
    "dec_small": lambda i, v: None if i % 7 == 3 else Decimal(i * 101 - 5000 + v) / 100,
    "dec_38": lambda i, v: None if i % 7 == 4 else Decimal(f"{i * 12345678901234567 + v}.{i:010d}"),
    "dec_38_0": lambda i, v: None if i % 7 == 5 else Decimal(10**37 + i * 10**20 + v) * (1 if i % 2 else -1),
    "s": lambda i, v: None if i % 7 == 6 else f"s-{i}-é-{v}",
    "b": lambda i, v: None if i % 7 == 0 else bytes([i % 256, 0, (i + v) % 256]),
    "d": lambda i, v: None if i % 7 == 1 else dt.date(1969, 12, 25) + dt.timedelta(days=i * 3 + v),
    "ts3": lambda i, v: None if i % 7 == 2 else _T0 + dt.timedelta(seconds=i * 61, milliseconds=i + v),
    "ts6": lambda i, v: None if i % 7 == 3 else _T0 + dt.timedelta(seconds=i * 59, microseconds=i * 7 + v),
    "tz3": lambda i, v: None if i % 7 == 4 else (_T0 + dt.timedelta(minutes=i, milliseconds=v)).replace(tzinfo=dt.UTC),
    "tz6": lambda i, v: None if i % 7 == 5 else (_T0 + dt.timedelta(hours=i, microseconds=v)).replace(tzinfo=dt.UTC),
}


def make_rows(schema: pa.Schema, ids: range, version: int, only: tuple[str, ...] | None = None) -> pa.Table:
    """Rows of keys `ids` in round `version` for the table's current schema; with `only`, the other
    columns are null (a partial update)."""
    columns = {}
    for f in schema:
        keep = only is None or f.name in only or not f.nullable
        columns[f.name] = pa.array([VALUES[f.name](i, version) if keep else None for i in ids], f.type)
    return pa.table(columns, schema=schema)


@dataclass(frozen=True)
class Shape:
    name: str
    steps: tuple[Step, ...]
    filter_sql: str
    filter: Callable[[], Any]  # the same filter as a Strata predicate
    measure: str  # a numeric column: count(*), sum, min, max
    schema: pa.Schema = BASE
    partition_keys: tuple[str, ...] = ()
    primary_keys: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=lambda: ICEBERG_REST)
    # SQL and Strata predicate on partition columns: Trino must read fewer splits with it
    partition_filter: tuple[str, Callable[[], Any]] | None = None

    @property
    def deletion_vectors(self) -> bool:
        return self.options.get("deletion-vectors.enabled") == "true"


def _upserts(*, mark_after: int = 2) -> tuple[Step, ...]:
    """Rows 0..119, then two rounds of upserts and new keys; `mark` after the `mark_after`-th write."""
    writes: list[Step] = [("write", range(0, 120), 0), ("write", range(0, 120, 3), 1),
                          ("write", range(100, 160, 2), 2)]
    return (*writes[:mark_after], ("mark",), *writes[mark_after:])


def on_day(day: str) -> tuple[str, Callable[[], Any]]:
    return f"day = '{day}'", lambda: strata.col("day") == day


SHAPES = (
    Shape("append_plain", (("write", range(0, 80), 0), ("mark",), ("write", range(80, 150), 1),
                           ("write", range(150, 170), 2)),
          "qty > 5", lambda: strata.col("qty") > 5, "qty"),
    Shape("append_by_day", (("write", range(0, 90), 0), ("mark",), ("write", range(90, 200), 1)),
          "amount < 100", lambda: strata.col("amount") < 100, "price", partition_keys=("day",),
          partition_filter=on_day("2025-03-02")),
    Shape("append_by_region_day", (("write", range(0, 120), 0), ("mark",), ("write", range(120, 240), 1)),
          "note IS NULL", lambda: strata.col("note").is_null(), "qty", partition_keys=("region", "day"),
          partition_filter=("region = 'us' AND day = '2025-03-01'",
                            lambda: (strata.col("region") == "us") & (strata.col("day") == "2025-03-01"))),
    Shape("append_buckets", (("write", range(0, 100), 0), ("mark",), ("write", range(100, 180), 1)),
          "price >= 100", lambda: strata.col("price") >= Decimal(100), "amount",
          options={**ICEBERG_REST, "bucket": "4", "bucket-key": "id"}),
    Shape("pk_dv_deduplicate", (*_upserts(), ("delete", range(5, 100, 9))),
          "qty BETWEEN 2 AND 6", lambda: strata.col("qty").between(2, 6), "qty", partition_keys=("day",),
          primary_keys=("day", "id"), options={**DV, "bucket": "2"}, partition_filter=on_day("2025-03-03")),
    Shape("pk_dv_partial_update", (("write", range(0, 100), 0, ("id", "day", "qty", "amount")), ("mark",),
                                   ("write", range(0, 100, 2), 1, ("id", "day", "note", "price")),
                                   ("write", range(50, 130), 2, ("id", "day", "region", "qty"))),
          "note IS NOT NULL", lambda: strata.col("note").is_not_null(), "qty", primary_keys=("id",),
          options={**DV, "bucket": "2", "merge-engine": "partial-update"}),
    Shape("pk_dv_aggregation", _upserts(), "qty > 8", lambda: strata.col("qty") > 8, "qty", primary_keys=("id",),
          options={**DV, "bucket": "2", "merge-engine": "aggregation", "fields.qty.aggregate-function": "sum",
                   "fields.price.aggregate-function": "sum", "fields.amount.aggregate-function": "max"}),
    Shape("pk_dv_1_bucket", _upserts(), "region = 'eu'", lambda: strata.col("region") == "eu", "price",
          primary_keys=("id",), options={**DV, "bucket": "1"}),
    Shape("pk_dv_4_buckets", _upserts(mark_after=1), "amount > 50", lambda: strata.col("amount") > 50, "qty",
          primary_keys=("id",), options={**DV, "bucket": "4"}),
    Shape("pk_dv_bitmap64", (*_upserts(), ("delete", range(0, 160, 13))), "note LIKE 'n1%'",
          lambda: strata.col("note").startswith("n1"), "qty", primary_keys=("id",),
          options={**DV, "bucket": "2", "deletion-vectors.bitmap64": "true"}),
    Shape("pk_dv_deletes", (("write", range(0, 150), 0), ("delete", range(0, 150, 4)), ("mark",),
                            ("delete", range(1, 150, 5)), ("write", range(0, 20), 1), ("delete", range(140, 150))),
          "qty < 4", lambda: strata.col("qty") < 4, "price", primary_keys=("id",), options={**DV, "bucket": "2"}),
    Shape("pk_full_compaction", (("write", range(0, 100), 0), ("write", range(0, 100, 2), 1), ("compact",),
                                 ("mark",), ("write", range(50, 150), 2), ("delete", range(0, 30, 3)), ("compact",)),
          "qty >= 7", lambda: strata.col("qty") >= 7, "qty", partition_keys=("day",), primary_keys=("day", "id"),
          options={**ICEBERG_REST, "bucket": "2"}, partition_filter=on_day("2025-03-01")),
    Shape("pk_first_row_full_compaction", (("write", range(0, 80), 0), ("write", range(40, 120), 1), ("compact",),
                                           ("mark",), ("write", range(100, 140), 2), ("compact",)),
          "note IS NULL", lambda: strata.col("note").is_null(), "amount", primary_keys=("id",),
          options={**ICEBERG_REST, "bucket": "1", "merge-engine": "first-row"}),
    Shape("append_schema_evolution", (("write", range(0, 50), 0), ("add_column", "extra", pa.float64()),
                                      ("write", range(50, 100), 1), ("mark",), ("rename_column", "note", "label"),
                                      ("write", range(100, 150), 2)),
          "extra > 10", lambda: strata.col("extra") > 10, "qty"),
    Shape("pk_dv_schema_evolution", (("write", range(0, 60), 0), ("mark",), ("add_column", "extra", pa.float64()),
                                     ("write", range(30, 90), 1), ("rename_column", "note", "label"),
                                     ("write", range(0, 90, 4), 2)),
          "qty <> 3", lambda: strata.col("qty") != 3, "price", primary_keys=("id",), options={**DV, "bucket": "2"}),
    Shape("append_every_type", (("write", range(0, 70), 0), ("mark",), ("write", range(70, 140), 1)),
          "dec_38 > 500000000000000000.0", lambda: strata.col("dec_38") > Decimal("500000000000000000.0"), "dec_38",
          schema=TYPES, partition_keys=(), options={**ICEBERG_REST, "bucket": "2", "bucket-key": "id"}),
    Shape("pk_dv_every_type", (("write", range(0, 70), 0), ("mark",), ("write", range(35, 105), 1),
                               ("delete", range(0, 105, 10))),
          "tz6 < TIMESTAMP '2025-03-02 20:00:00 UTC'",
          lambda: strata.col("tz6") < dt.datetime(2025, 3, 2, 20, tzinfo=dt.UTC), "i64", schema=TYPES,
          primary_keys=("id",), options={**DV, "bucket": "2"}),
)


@dataclass
class Written:
    table: Any
    name: str  # strata.<database>.<table>
    marked: int  # the snapshot time travel goes back to


@pytest.fixture(scope="module")
def written(rest_catalog: Any, rest_database: str) -> dict[str, Written]:
    """The shapes written so far (each once; the tests that need one write it)."""
    return {}


def write_shape(shape: Shape, catalog: Any, database: str, cache: dict[str, Written]) -> Written:
    if shape.name in cache:
        return cache[shape.name]
    identifier = f"{database}.{shape.name}"
    table = catalog.create_table(identifier, shape.schema, partition_keys=list(shape.partition_keys),
                                 primary_keys=list(shape.primary_keys), options=dict(shape.options))
    marked = None
    for op, *args in shape.steps:
        schema = table.schema.arrow_schema()
        if op == "write":
            ids, version, *only = args
            table.write(make_rows(schema, ids, version, only[0] if only else None))
        elif op == "delete":
            table.delete(make_rows(schema, args[0], 0))
        elif op == "compact":
            table.compact(full=True)
        elif op == "add_column":
            table = table.add_column(*args)
        elif op == "rename_column":
            table = table.rename_column(*args)
        elif op == "mark":
            marked = table.latest_snapshot().id
            time.sleep(0.01)  # the next snapshot's commit time is later: FOR TIMESTAMP AS OF finds this one
        else:
            raise AssertionError(f"unknown step {op!r}")
    assert marked is not None, f"shape {shape.name} marks no snapshot"
    cache[shape.name] = Written(catalog.get_table(identifier), f"strata.{identifier}", marked)
    return cache[shape.name]


def canonical(value: Any) -> Any:
    """One form for equal values whatever side they come from (tz-aware instants in UTC, decimals
    without trailing zeros, so that rows sort alike)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    if isinstance(value, Decimal):
        with localcontext() as ctx:
            ctx.prec = 80
            return value.normalize()
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def canonical_rows(rows: Iterable[Iterable[Any]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(canonical(v) for v in row) for row in rows), key=repr)


def arrow_rows(data: pa.Table) -> list[tuple[Any, ...]]:
    return canonical_rows(zip(*(c.to_pylist() for c in data.columns), strict=True))


def trino_query(trino: Service, sql: str) -> tuple[list[list[Any]], dict[str, Any], list[str]]:
    """Rows, Trino's statistics of the query (splits, rows and bytes read) and the column names."""
    cursor = trino.connect().cursor()  # type: ignore[attr-defined]
    try:
        cursor.execute(sql)
        rows: list[list[Any]] = cursor.fetchall()
        return rows, dict(cursor.stats), [d[0] for d in cursor.description]
    finally:
        cursor.close()


def aggregate(data: pa.Table, column: str) -> list[Any]:
    values = [v for v in data.column(column).to_pylist() if v is not None]
    with localcontext() as ctx:
        ctx.prec = 80
        total = sum(values) if values else None
    return [data.num_rows, total, min(values, default=None), max(values, default=None)]


def assert_aggregates_equal(got: list[Any], expected: list[Any]) -> None:
    assert got[0] == expected[0]
    for g, e in zip(got[1:], expected[1:], strict=True):
        if isinstance(e, float):
            assert g == pytest.approx(e, rel=1e-12)
        else:
            assert canonical(g) == canonical(e)


def exposed_files(table: Any) -> tuple[int, int]:
    """(data files, position-delete files) an Iceberg reader of the latest snapshot must see, from
    Strata's own plan: an append table's every file, a deletion-vector table's files above level 0 and
    one delete file per data file with a vector, a primary-key table's top level."""
    splits = table.scan()
    files = [f for split in splits for f in split.files]
    if not table.schema.primary_keys:
        return len(files), 0
    if not table.core.get("deletion-vectors.enabled"):
        return sum(f.level == table.core.num_levels - 1 for f in files), 0
    with_vectors = sum(len(split.deletion_files or {}) for split in splits)
    return sum(f.level > 0 for f in files), with_vectors


def utc_literal(millis: int) -> str:
    instant = dt.datetime.fromtimestamp(millis / 1000, dt.UTC)
    return f"TIMESTAMP '{instant:%Y-%m-%d %H:%M:%S}.{millis % 1000:03d} UTC'"


@pytest.mark.parametrize("shape", SHAPES, ids=[s.name for s in SHAPES])
def test_trino_reads_the_shape_as_strata_does(shape: Shape, trino: Service, rest_catalog: Any, rest_database: str,
                                             written: dict[str, Written]) -> None:
    w = write_shape(shape, rest_catalog, rest_database, written)
    table, name = w.table, w.name
    latest = table.to_arrow()
    assert latest.num_rows > 0
    # SELECT *: the same rows (and columns)
    rows, everything, columns = trino_query(trino, f"SELECT * FROM {name}")
    assert columns == latest.column_names
    assert canonical_rows(rows) == arrow_rows(latest)
    # a filter on a non-key column
    filtered = table.to_arrow(filter=shape.filter())
    assert 0 < filtered.num_rows < latest.num_rows, "the filter must select some rows, not all"
    assert canonical_rows(query(trino, f"SELECT * FROM {name} WHERE {shape.filter_sql}")) == arrow_rows(filtered)
    # count, sum, min, max of a numeric column
    m = shape.measure
    got = query(trino, f"SELECT count(*), sum({m}), min({m}), max({m}) FROM {name}")[0]
    assert_aggregates_equal(got, aggregate(latest, m))
    # time travel to the marked snapshot, by id and by its commit time
    schema_name, table_name = name.rsplit(".", 1)
    snapshots = dict(query(trino, f'SELECT snapshot_id, committed_at FROM {schema_name}."{table_name}$snapshots"'))
    # Trino and Strata (as Paimon) read a snapshot with the schema it was written with
    marked = table.snapshot_manager.snapshot(w.marked)
    then_columns = [f.name for f in table.schema_at(marked.schema_id).fields]
    travelled = table.to_arrow(snapshot_id=w.marked)
    assert travelled.column_names == then_columns
    then = arrow_rows(travelled)
    assert then != arrow_rows(latest), "the marked snapshot must differ from the latest"
    assert w.marked in snapshots, f"no Iceberg snapshot for the marked snapshot {w.marked}: {sorted(snapshots)}"
    for travel in (f"FOR VERSION AS OF BIGINT '{w.marked}'", f"FOR TIMESTAMP AS OF {utc_literal(marked.time_millis)}"):
        rows, _, columns = trino_query(trino, f"SELECT * FROM {name} {travel}")
        assert (columns, canonical_rows(rows)) == (then_columns, then), travel
    assert snapshots[w.marked] == dt.datetime.fromtimestamp(marked.time_millis / 1000, dt.UTC)  # Paimon's time
    # Iceberg's snapshots are live Paimon snapshots, the latest among them
    paimon_ids = {s.id for s in table.snapshots()}
    assert set(snapshots) <= paimon_ids
    assert table.latest_snapshot().id in snapshots
    # the files Trino plans are those Strata exposes
    contents = query(trino, f'SELECT content, count(*) FROM {schema_name}."{table_name}$files" GROUP BY content')
    counts = {content: n for content, n in contents}
    assert (counts.get(0, 0), counts.get(1, 0)) == exposed_files(table)
    # position deletes exactly where deletion vectors are (every vector shape replaces or deletes rows)
    assert (counts.get(1, 0) > 0) == shape.deletion_vectors, counts
    if shape.partition_filter:
        # partition pruning, as Trino reports it: fewer splits and fewer rows read under the filter
        sql, predicate = shape.partition_filter
        pruned_rows, pruned, _ = trino_query(trino, f"SELECT * FROM {name} WHERE {sql}")
        assert canonical_rows(pruned_rows) == arrow_rows(table.to_arrow(filter=predicate()))
        assert 0 < len(pruned_rows) < latest.num_rows
        assert pruned["totalSplits"] < everything["totalSplits"], (pruned, everything)
        assert pruned["processedRows"] < everything["processedRows"], (pruned, everything)


@pytest.mark.pyiceberg
@pytest.mark.parametrize("shape_name", ["append_by_region_day", "pk_dv_deduplicate"])
def test_pyiceberg_reads_shapes_through_the_rest_catalog(shape_name: str, iceberg_rest: Service, rest_catalog: Any,
                                                        rest_database: str, written: dict[str, Written]) -> None:
    """pyiceberg, an independent Iceberg reader, loads the table from the REST catalog (not from a
    metadata file) and reads the same rows as Strata, and as Trino (the same shapes)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "tests"))
    from pyiceberg_oracle import read_iceberg

    shape = next(s for s in SHAPES if s.name == shape_name)
    w = write_shape(shape, rest_catalog, rest_database, written)
    options = iceberg_rest.catalog_options()  # type: ignore[attr-defined]
    got, facts = read_iceberg(None, options, rest=iceberg_rest.url,  # type: ignore[attr-defined]
                              identifier=f"{rest_database}.{shape.name}")
    expected = w.table.to_arrow()
    assert got.column_names == expected.column_names
    assert arrow_rows(got) == arrow_rows(expected)
    assert facts["current"] == w.table.latest_snapshot().id
    then, _ = read_iceberg(None, options, rest=iceberg_rest.url,  # type: ignore[attr-defined]
                           identifier=f"{rest_database}.{shape.name}", snapshot_id=w.marked)
    assert arrow_rows(then) == arrow_rows(w.table.to_arrow(snapshot_id=w.marked))


# -- the bench's Trino workloads and the SQL prompt ---------------------------------------------------------
@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch, trino: Service, iceberg_rest: Service, minio: Service) -> None:
    """The environment `strata-services run minio iceberg_rest trino -- ...` gives a command."""
    for service in (minio, iceberg_rest, trino):
        for key, value in service.client_env().items():
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("STRATA_ICEBERG_REST_WAREHOUSE", iceberg_rest.warehouse)  # type: ignore[attr-defined]


def test_bench_trino_workloads_at_a_tiny_scale(service_env: None, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    from strata.bench import trino as bench

    assert bench.unavailable() is None
    monkeypatch.setattr(bench, "SCAN_RUNS", 2)
    monkeypatch.setattr(bench, "VISIBILITY_COMMITS", 3)
    monkeypatch.setattr(bench, "WARMUP_COMMITS", 1)
    scan = bench.WORKLOADS["TRINO_SCAN"]
    row = scan.summarize({"trino": bench.scan_part(str(tmp_path), 0.004),
                          bench._SMALL_PART: bench.small_scan_part(str(tmp_path), 0.02)})
    assert row["verified"] is True and row["ratio"] > 0 and row["small_ratio"] > 0
    assert row["details"]["dv_data_files"] > 0 and row["details"]["live_rows"] > 0
    assert row["details"]["small"]["live_rows"] == row["details"]["live_rows"]  # both 0.004 of W2's rows
    visibility = bench.WORKLOADS["TRINO_VISIBILITY"]
    row = visibility.summarize({"trino": bench.visibility_part(str(tmp_path), 1.0)})
    assert row["verified"] is True and len(row["details"]["visible_ms"]) == 3
    assert row["p99_ms"] >= row["p50_ms"] > 0
    monkeypatch.delenv("STRATA_TRINO_URL")
    assert "STRATA_TRINO_URL" in (bench.unavailable() or "")


def test_trino_shell(service_env: None, capsys: pytest.CaptureFixture[str]) -> None:
    from strata_platform.trino_shell import main, split_statements

    assert split_statements("SELECT ';' AS a; -- no; end\nSELECT 2;\nSELECT") == (
        ["SELECT ';' AS a", "SELECT 2"], "\nSELECT")
    assert main(["-e", "SHOW CATALOGS; SELECT 1 AS n, 'x' AS s, NULL AS z, X'ff' AS b"]) == 0
    out = capsys.readouterr().out
    assert "\nstrata\n" in out  # SHOW CATALOGS as a table
    assert "NULL" in out and "X'ff'" in out and "(1 row)" in out
    assert main(["-e", "SELECT * FROM strata.no_such_schema.t"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("ERROR: ") and "Traceback" not in out
