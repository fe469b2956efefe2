"""Trino reads Strata tables: its ``strata`` catalog is the Iceberg connector on Strata's own Iceberg
REST catalog (the ``iceberg_rest`` service), the data files on MinIO.

The tables are written by the engine on MinIO, in the warehouse the REST catalog serves, with
``metadata.iceberg.storage=rest-catalog`` (Iceberg metadata published after each commit), and
Trino's rows are compared with ``table.to_arrow()``: a partitioned append table, and a primary-key
table with 64-bit deletion vectors. A table with hand-written metadata (no snapshot) is read too.
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from strata_platform.services.base import Service
from strata_platform.services.testing import provide

pytestmark = [pytest.mark.trino, pytest.mark.minio, pytest.mark.e2e]


@pytest.fixture(scope="module")
def iceberg_rest(minio: Service) -> Iterator[Service]:
    yield from provide("iceberg_rest")


@pytest.fixture(scope="module")
def catalog(iceberg_rest: Service) -> Any:
    return iceberg_rest.catalog()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def database(catalog: Any) -> Iterator[str]:
    name = f"trino_{uuid.uuid4().hex[:8]}"
    catalog.create_database(name)
    yield name
    catalog.drop_database(name, cascade=True)


def query(trino: Service, sql: str) -> list[list[Any]]:
    rows: list[list[Any]] = trino.query(sql)  # type: ignore[attr-defined]
    return rows


def strata_rows(table: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
    data = table.to_arrow(**kwargs)
    return sorted(tuple(row.values()) for row in data.to_pylist())


def trino_rows(trino: Service, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row) for row in query(trino, sql))


# -- the catalog ------------------------------------------------------------------------------------------
def test_strata_catalog_lists_the_databases(trino: Service, iceberg_rest: Service, database: str) -> None:
    assert "strata" in {row[0] for row in query(trino, "SHOW CATALOGS")}
    schemas = {row[0] for row in query(trino, "SHOW SCHEMAS FROM strata")}
    assert database in schemas
    assert query(trino, f"SHOW TABLES FROM strata.{database}") == []


def test_hand_written_metadata_of_an_empty_table(trino: Service, catalog: Any, database: str) -> None:
    table = catalog.create_table(f"{database}.empty", pa.schema([("id", pa.int64()), ("name", pa.string())]))
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
    assert ["empty"] in query(trino, f"SHOW TABLES FROM strata.{database}")
    assert query(trino, f"SELECT * FROM strata.{database}.empty") == []
    assert [row[:2] for row in query(trino, f"DESCRIBE strata.{database}.empty")] == [
        ["id", "bigint"], ["name", "varchar"]]


def test_a_table_without_iceberg_metadata_is_not_there(trino: Service, catalog: Any, database: str) -> None:
    catalog.create_table(f"{database}.paimon_only", pa.schema([("id", pa.int64())]))
    assert ["paimon_only"] not in query(trino, f"SHOW TABLES FROM strata.{database}")
    with pytest.raises(Exception, match="does not exist"):
        query(trino, f"SELECT * FROM strata.{database}.paimon_only")


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


def test_partitioned_append_table(trino: Service, catalog: Any, database: str) -> None:
    table = catalog.create_table(f"{database}.orders", ORDERS, partition_keys=["day"],
                                 options={"metadata.iceberg.storage": "rest-catalog"})
    name = f"strata.{database}.orders"
    table.write(orders(range(0, 300), "2025-01-01"))
    first = table.latest_snapshot().id
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    # each commit is visible at the next query: no restart, no cache to refresh
    table.write(pa.concat_tables([orders(range(300, 500), "2025-01-02"), orders(range(500, 550), "2025-01-03")]))
    table.write(orders(range(550, 600), "2025-01-01"))
    table = catalog.get_table(f"{database}.orders")
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    assert query(trino, f"SELECT count(*), sum(qty), sum(price) FROM {name}") == [
        [600, sum(i % 7 for i in range(600)), sum(Decimal(i) / 4 for i in range(600))]]
    # the partition column filters, and the partitions are Iceberg partitions
    assert trino_rows(trino, f"SELECT id FROM {name} WHERE day = '2025-01-01'") == sorted(
        (i,) for i in [*range(300), *range(550, 600)])
    partitions = query(trino, f'SELECT partition.day, record_count FROM strata.{database}."orders$partitions"')
    assert sorted(partitions) == [["2025-01-01", 350], ["2025-01-02", 200], ["2025-01-03", 50]]
    # time travel: Iceberg snapshot ids are Strata's
    assert trino_rows(trino, f"SELECT * FROM {name} FOR VERSION AS OF BIGINT '{first}'") == strata_rows(
        table, snapshot_id=first)


def test_primary_key_table_with_deletion_vectors(trino: Service, catalog: Any, database: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("score", pa.int32())])
    table = catalog.create_table(f"{database}.users", schema, primary_keys=["id"], options={
        "metadata.iceberg.storage": "rest-catalog", "bucket": "2",
        "deletion-vectors.enabled": "true", "deletion-vectors.bitmap64": "true"})
    name = f"strata.{database}.users"

    def rows(ids: list[int], suffix: str) -> pa.Table:
        return pa.table({"id": ids, "name": [f"{suffix}{i}" for i in ids],
                         "score": pa.array([i * 10 for i in ids], pa.int32())}, schema=schema)

    table.write(rows(list(range(200)), "v1-"))
    assert trino_rows(trino, f"SELECT * FROM {name}") == strata_rows(table)
    table.write(rows(list(range(0, 200, 3)), "v2-"))  # upserts: the old rows are marked deleted
    table.delete(rows(list(range(1, 200, 10)), ""))
    table.write(rows(list(range(200, 220)), "v1-"))
    table = catalog.get_table(f"{database}.users")
    expected = strata_rows(table)
    assert len(expected) == 220 - len(range(1, 200, 10))
    assert trino_rows(trino, f"SELECT * FROM {name}") == expected
    assert query(trino, f"SELECT name FROM {name} WHERE id = 3") == [["v2-3"]]
    assert query(trino, f"SELECT count(*) FROM {name} WHERE id = 11") == [[0]]
    # what Trino reads: data files and position deletes published from the deletion vectors
    contents = {row[0] for row in query(trino, f'SELECT content FROM strata.{database}."users$files"')}
    assert contents == {0, 1}, contents  # 1: position deletes


def test_the_catalog_is_read_only_for_trino(trino: Service, catalog: Any, database: str) -> None:
    table = catalog.create_table(f"{database}.guarded", pa.schema([("id", pa.int64())]),
                                 options={"metadata.iceberg.storage": "rest-catalog"})
    table.write(pa.table({"id": [1, 2]}))
    for sql in (f"INSERT INTO strata.{database}.guarded VALUES 3",
                f"DELETE FROM strata.{database}.guarded WHERE id = 1",
                f"CREATE TABLE strata.{database}.other (id bigint)",
                f"DROP TABLE strata.{database}.guarded"):
        with pytest.raises(Exception, match="Access Denied"):
            query(trino, sql)
    assert trino_rows(trino, f"SELECT * FROM strata.{database}.guarded") == [(1,), (2,)]
