"""CDC ingestion (debezium-json, canal-json) from the real broker into Strata tables, exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import strata
from strata_platform.cdc import CdcJob, parse_canal, parse_debezium
from strata_platform.services import kafka as broker

REPO = Path(__file__).resolve().parents[1]


# -- parsing (no broker) -------------------------------------------------------------------------------
def test_debezium_with_schema_and_logical_types() -> None:
    after = [{"field": "id", "type": "int32"},
             {"field": "day", "type": "int32", "name": "io.debezium.time.Date"},
             {"field": "ts", "type": "int64", "name": "io.debezium.time.Timestamp"},
             {"field": "price", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
              "parameters": {"scale": "2", "connect.decimal.precision": "8"}}]
    value = {"schema": {"type": "struct", "fields": [{"field": "before", "type": "struct", "fields": []},
                                                    {"field": "after", "type": "struct", "fields": after}]},
             "payload": {"before": None, "after": {"id": 1, "day": 19000, "ts": 1700000000000, "price": "AJY="},
                         "op": "c", "source": {"db": "shop", "table": "orders"}}}
    key = json.dumps({"schema": {}, "payload": {"id": 1}}).encode()
    event = parse_debezium(key, json.dumps(value).encode())
    assert (event.database, event.table, event.primary_keys) == ("shop", "orders", ["id"])
    assert [str(t) for t in event.fields.values()] == ["int32", "date32[day]", "timestamp[ms]", "decimal128(8, 2)"]
    assert event.changes == [(0, {"id": 1, "day": 19000, "ts": 1700000000000, "price": "1.50"})]


def test_debezium_update_and_delete_kinds() -> None:
    update = parse_debezium(None, b'{"op":"u","before":{"id":1,"v":"a"},"after":{"id":1,"v":"b"}}')
    assert [k for k, _ in update.changes] == [1, 2]
    delete = parse_debezium(None, b'{"op":"d","before":{"id":1,"v":"b"},"after":null}')
    assert delete.changes == [(3, {"id": 1, "v": "b"})]


def test_canal_update_rebuilds_the_old_row() -> None:
    event = parse_canal(json.dumps({
        "data": [{"id": "1", "v": "new", "n": "5"}], "old": [{"v": "old"}], "type": "UPDATE",
        "database": "shop", "table": "items", "pkNames": ["id"], "isDdl": False,
        "mysqlType": {"id": "int(11)", "v": "varchar(20)", "n": "bigint"}}).encode())
    assert event is not None
    assert event.changes == [(1, {"id": "1", "v": "old", "n": "5"}), (2, {"id": "1", "v": "new", "n": "5"})]
    assert [str(t) for t in event.fields.values()] == ["int32", "string", "int64"]
    assert parse_canal(b'{"isDdl": true, "sql": "ALTER TABLE x ADD y INT"}') is None


# -- against the broker ----------------------------------------------------------------------------------
@pytest.fixture
def topic(bootstrap: str) -> Iterator[str]:
    name = f"it-cdc-{uuid.uuid4().hex[:12]}"
    broker.create_topics(bootstrap, {name: 2})
    yield name
    broker.delete_topics(bootstrap, [name])


def send(bootstrap: str, topic: str, events: list[tuple[Any, Any]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "log_level": 3})
    for key, value in events:
        k = json.dumps(key).encode() if key is not None else None
        producer.produce(topic, value=json.dumps(value).encode(), key=k,
                         partition=(hash(json.dumps(key)) % 2) if key is not None else 0)
    assert producer.flush(30) == 0


class Model:
    """The expected table, and the debezium events that lead to it."""

    def __init__(self, table: str = "orders"):
        self.rows: dict[int, dict[str, Any]] = {}
        self.events: list[tuple[Any, Any]] = []
        self.source = {"db": "shop", "table": table}

    def _emit(self, op: str, before: Any, after: Any) -> None:
        key = {"id": (after or before)["id"]}
        self.events.append((key, {"before": before, "after": after, "op": op, "source": self.source}))

    def insert(self, row: dict[str, Any]) -> None:
        self.rows[row["id"]] = dict(row)
        self._emit("c", None, row)

    def update(self, i: int, **changes: Any) -> None:
        before = self.rows[i]
        after = {**before, **changes}
        self.rows[i] = after
        self._emit("u", before, after)

    def delete(self, i: int) -> None:
        self._emit("d", self.rows.pop(i), None)

    def take(self) -> list[tuple[Any, Any]]:
        out, self.events = self.events, []
        return out


def table_rows(table: strata.Table) -> dict[int, dict[str, Any]]:
    return {r["id"]: {k: v for k, v in r.items() if v is not None} for r in table.to_arrow().to_pylist()}


def expected(model: Model) -> dict[int, dict[str, Any]]:
    return {i: {k: v for k, v in r.items() if v is not None} for i, r in model.rows.items()}


@pytest.mark.kafka
def test_debezium_sync_with_schema_change_exactly_once(bootstrap: str, topic: str, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    model = Model()
    for i in range(60):
        model.insert({"id": i, "name": f"n{i}", "qty": i})
    for i in range(0, 60, 3):
        model.update(i, qty=1000 + i)
    for i in range(0, 60, 7):
        model.delete(i)
    send(bootstrap, topic, model.take())

    def job(batch_size: int = 50, **kwargs: Any) -> CdcJob:
        return CdcJob(bootstrap, [topic], warehouse, "shop", table_options={"bucket": "2"}, batch_size=batch_size,
                      **kwargs)

    first = job()
    stats = first.run(until_idle=1.5)
    first.close()
    assert stats.tables_created == ["shop.orders"]
    table = strata.load_catalog(warehouse).get_table("shop.orders")
    assert table_rows(table) == expected(model)

    # a schema change: events start carrying a new column, and updates touch it
    for i in range(60, 70):
        model.insert({"id": i, "name": f"n{i}", "qty": i, "note": f"new{i}"})
    model.update(1, note="backfilled", qty=7)
    model.delete(2)
    send(bootstrap, topic, model.take())
    # a crash mid-stream: one batch only, then a fresh job resumes from the snapshot properties
    crashed = job(batch_size=4)
    crashed.run(max_batches=1)
    crashed.close()
    resumed = job()
    stats = resumed.run(until_idle=1.5)
    resumed.close()
    assert crashed.stats.columns_added + stats.columns_added == ["shop.orders.note"]
    assert crashed.stats.batches == 1 and stats.rows_written > 0
    table = strata.load_catalog(warehouse).get_table("shop.orders")
    assert table.schema.field_names == ["id", "name", "qty", "note"]
    assert table_rows(table) == expected(model)

    # a restart with nothing new: no commit, no duplicate; a replay of the whole topic is skipped
    latest = table.latest_snapshot()
    assert latest is not None
    again = job()
    stats = again.run(until_idle=1.0)
    again.close()
    assert stats.commits == 0 and stats.rows_written == 0
    replay = job(name="cdc")
    replay._load_progress = lambda: None  # type: ignore[method-assign]  # forget the progress: read all
    stats = replay.run(until_idle=1.0)
    replay.close()
    assert stats.rows_written == 0 and stats.duplicate_commits == stats.commits > 0
    table = strata.load_catalog(warehouse).get_table("shop.orders")
    assert table.snapshot_manager.latest_id() == latest.id
    assert table_rows(table) == expected(model)


@pytest.mark.kafka
def test_canal_shared_topic_whole_database_via_cli(bootstrap: str, topic: str, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    types = {"id": "int(11)", "name": "varchar(20)", "price": "decimal(10,2)", "flag": "tinyint(1)"}

    def canal(table: str, kind: str, data: list[dict[str, Any]], old: list[dict[str, Any]] | None = None,
              extra_types: dict[str, str] | None = None) -> tuple[Any, Any]:
        return ({"table": table}, {"data": data, "old": old, "type": kind, "database": "shop", "table": table,
                                   "pkNames": ["id"], "isDdl": False, "mysqlType": {**types, **(extra_types or {})}})

    events = [
        canal("items", "INSERT", [{"id": str(i), "name": f"i{i}", "price": f"{i}.50", "flag": "1"} for i in range(5)]),
        canal("users", "INSERT", [{"id": "1", "name": "ann", "price": "0.00", "flag": "0"}]),
        canal("items", "UPDATE", [{"id": "2", "name": "i2", "price": "9.99", "flag": "0"}],
              [{"price": "2.50", "flag": "1"}]),
        canal("items", "DELETE", [{"id": "4", "name": "i4", "price": "4.50", "flag": "1"}]),
        ({"ddl": 1}, {"isDdl": True, "type": "ALTER", "database": "shop", "table": "users",
                      "sql": "ALTER TABLE users ADD age INT"}),
        canal("users", "INSERT", [{"id": "2", "name": "bob", "price": "1.00", "flag": "1", "age": "31"}],
              extra_types={"age": "int(11)"}),
    ]
    send(bootstrap, topic, events)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "engine"), str(REPO / "platform")])}
    cmd = [sys.executable, "-m", "strata_platform.cdc", "--bootstrap", bootstrap, "--topic", topic,
           "--warehouse", warehouse, "--database", "shop", "--format", "canal-json", "--until-idle", "1.5",
           "--table-conf", "bucket=2"]
    for _ in range(2):  # the second run is a restart: nothing is written twice
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, check=True)
    stats = json.loads(out.stdout.strip().splitlines()[-1])
    assert stats["rows_written"] == 0
    catalog = strata.load_catalog(warehouse)
    assert sorted(catalog.list_tables("shop")) == ["items", "users"]
    items = {r["id"]: (r["name"], str(r["price"]), r["flag"])
             for r in catalog.get_table("shop.items").to_arrow().to_pylist()}
    assert items == {0: ("i0", "0.50", True), 1: ("i1", "1.50", True), 2: ("i2", "9.99", False),
                     3: ("i3", "3.50", True)}
    users = catalog.get_table("shop.users").to_arrow().to_pylist()
    assert [(u["id"], u["name"], u["age"]) for u in users] == [(1, "ann", None), (2, "bob", 31)]
