"""CDC ingestion on Spark Structured Streaming (``SparkCdcJob``) from the real broker.

Schema changes mid-stream without a restart (debezium, topic per table), a shared canal topic for
a whole database (tables created on first sight), unsupported changes reported and not applied,
and restarts from the checkpoint (a crash mid-batch, a lost commit marker) without duplicates.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from test_cdc import REPO, Model, expected, send, table_rows

import strata
from strata_platform.cdc.spark_job import SparkCdcJob
from strata_platform.services import kafka as broker
from strata_platform.services.base import Service

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


@pytest.fixture(scope="module")
def bootstrap(kafka: Service) -> str:
    return kafka.client_env()["STRATA_KAFKA_BOOTSTRAP"]


@pytest.fixture
def topics(bootstrap: str) -> Iterator[list[str]]:
    names = [f"it-cdcspark-{uuid.uuid4().hex[:10]}-{i}" for i in range(2)]
    broker.create_topics(bootstrap, {n: 2 for n in names})
    yield names
    broker.delete_topics(bootstrap, names)


def with_schema(events: list[tuple[Any, Any]], types: dict[str, str]) -> list[tuple[Any, Any]]:
    """Debezium events wrapped as {"schema", "payload"}: the column types come from `types`."""
    columns = [{"field": n, "type": t} for n, t in types.items()]
    schema = {"type": "struct", "fields": [{"field": "before", "type": "struct", "fields": columns},
                                           {"field": "after", "type": "struct", "fields": columns}]}
    return [(key, {"schema": schema, "payload": value}) for key, value in events]


def canal(table: str, kind: str, data: list[dict[str, Any]], types: dict[str, str], keys: list[str] | None = None,
          old: list[dict[str, Any]] | None = None) -> tuple[Any, Any]:
    return ({"table": table}, {"data": data, "old": old, "type": kind, "database": "shop", "table": table,
                               "pkNames": keys or ["id"], "isDdl": False, "mysqlType": types})


def job(session: SparkSession, bootstrap: str, topics: list[str], tmp_path: Path, **kwargs: Any) -> SparkCdcJob:
    return SparkCdcJob(session, bootstrap, topics, str(tmp_path / "wh"), "shop", str(tmp_path / "checkpoint"),
                       table_options={"bucket": "2"}, **kwargs)


def test_debezium_topic_per_table_schema_change_without_restart(session: SparkSession, bootstrap: str,
                                                                topics: list[str], tmp_path: Path) -> None:
    orders, customers = Model("orders"), Model("customers")
    order_types = {"id": "int64", "name": "string", "qty": "int32"}
    for i in range(40):
        orders.insert({"id": i, "name": f"n{i}", "qty": i})
        customers.insert({"id": i, "name": f"c{i}", "qty": -i})
    for i in range(0, 40, 3):
        orders.update(i, qty=1000 + i)
    for i in range(0, 40, 7):
        orders.delete(i)
    send(bootstrap, topics[0], with_schema(orders.take(), order_types))
    send(bootstrap, topics[1], customers.take())  # schemaless debezium: types inferred

    cdc = job(session, bootstrap, topics, tmp_path)
    query = cdc.start(processingTime="1 second")
    try:
        query.processAllAvailable()
        catalog = strata.load_catalog(str(tmp_path / "wh"))
        assert sorted(cdc.stats.tables_created) == ["shop.customers", "shop.orders"]
        assert catalog.get_table("shop.orders").schema.field("qty").type.root == "INT"
        assert table_rows(catalog.get_table("shop.orders")) == expected(orders)
        assert table_rows(catalog.get_table("shop.customers")) == expected(customers)

        # mid-stream, the same query: a new column, and qty widened to BIGINT with values beyond INT
        widened = {**order_types, "qty": "int64", "note": "string"}
        for i in range(40, 50):
            orders.insert({"id": i, "name": f"n{i}", "qty": 2**40 + i, "note": f"new{i}"})
        orders.update(1, note="backfilled", qty=2**33)
        orders.delete(2)
        send(bootstrap, topics[0], with_schema(orders.take(), widened))
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    table = strata.load_catalog(str(tmp_path / "wh")).get_table("shop.orders")
    assert table.schema.field_names == ["id", "name", "qty", "note"]
    assert table.schema.field("qty").type.root == "BIGINT"
    assert cdc.stats.columns_added == ["shop.orders.note"]
    assert cdc.stats.columns_widened == ["shop.orders.qty: int32 -> int64"]
    assert cdc.stats.unsupported_changes == []
    assert table_rows(table) == expected(orders)


def test_canal_shared_topic_whole_database(session: SparkSession, bootstrap: str, topics: list[str],
                                           tmp_path: Path) -> None:
    types = {"id": "int(11)", "name": "varchar(20)", "price": "decimal(10,2)", "flag": "tinyint(1)"}
    send(bootstrap, topics[0], [
        canal("items", "INSERT", [{"id": str(i), "name": f"i{i}", "price": f"{i}.50", "flag": "1"}
                                  for i in range(5)], types),
        canal("users", "INSERT", [{"id": "1", "name": "ann", "price": "0.00", "flag": "0"}], types),
        canal("items", "UPDATE", [{"id": "2", "name": "i2", "price": "9.99", "flag": "0"}], types,
              old=[{"price": "2.50", "flag": "1"}]),
        canal("items", "DELETE", [{"id": "4", "name": "i4", "price": "4.50", "flag": "1"}], types),
        ({"ddl": 1}, {"isDdl": True, "type": "ALTER", "database": "shop", "table": "users",
                      "sql": "ALTER TABLE users ADD age INT"}),
        canal("users", "INSERT", [{"id": "2", "name": "bob", "price": "1.00", "flag": "1", "age": "31"}],
              {**types, "age": "int(11)"}),
        ({"bad": 1}, "not a canal event"),
    ])
    first = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json")
    first.run_available_now()
    assert sorted(first.stats.tables_created) == ["shop.items", "shop.users"]
    assert first.stats.bad_events == 1 and first.stats.columns_added == []  # age came with users' first batch

    # a table seen for the first time later in the stream, in a restarted query
    send(bootstrap, topics[0], [canal("orders", "INSERT", [{"id": "7", "name": "o7", "price": "7.00", "flag": "0"}],
                                      types)])
    second = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json")
    second.run_available_now()
    assert second.stats.tables_created == ["shop.orders"] and second.stats.rows_written == 1
    assert first.stats.events == 5 and second.stats.events == 1  # the DDL event carries no change

    catalog = strata.load_catalog(str(tmp_path / "wh"))
    assert sorted(catalog.list_tables("shop")) == ["items", "orders", "users"]
    items = {r["id"]: (r["name"], str(r["price"]), r["flag"])
             for r in catalog.get_table("shop.items").to_arrow().to_pylist()}
    assert items == {0: ("i0", "0.50", True), 1: ("i1", "1.50", True), 2: ("i2", "9.99", False),
                     3: ("i3", "3.50", True)}
    users = sorted(catalog.get_table("shop.users").to_arrow().to_pylist(), key=lambda u: u["id"])
    assert [(u["id"], u["name"], u["age"]) for u in users] == [(1, "ann", None), (2, "bob", 31)]
    assert catalog.get_table("shop.orders").to_arrow().column("name").to_pylist() == ["o7"]


def test_unsupported_changes_are_reported_not_applied(session: SparkSession, bootstrap: str, topics: list[str],
                                                      tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    types = {"id": "int(11)", "code": "int(11)", "total": "bigint", "name": "varchar(20)"}
    send(bootstrap, topics[0], [
        canal("items", "INSERT", [{"id": "1", "code": "10", "total": "100", "name": "a"}], types)])
    cdc = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json")
    cdc.run_available_now()
    # the source changes its key, turns `code` into a string column and narrows `total`: none of
    # it can be applied to the table; rows whose values still fit are written
    changed = {**types, "code": "varchar(20)", "total": "int(11)"}
    send(bootstrap, topics[0], [
        canal("items", "INSERT", [{"id": "2", "code": "20", "total": "200", "name": "b"}], changed,
              keys=["id", "name"])])
    with caplog.at_level(logging.WARNING, logger="strata_platform.cdc"):
        job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json").run_available_now()
    reported = [r.getMessage() for r in caplog.records if "unsupported schema change" in r.getMessage()]
    expected_reports = ["shop.items: primary key ['id'] -> ['id', 'name']", "shop.items.code: int32 -> string",
                        "shop.items.total: int64 -> int32"]
    assert [m.split("not applied: ")[1] for m in reported] == expected_reports
    table = strata.load_catalog(str(tmp_path / "wh")).get_table("shop.items")
    assert table.schema.primary_keys == ["id"]
    assert [(f.name, f.type.root) for f in table.schema.fields] == [
        ("id", "INT"), ("code", "INT"), ("total", "BIGINT"), ("name", "VARCHAR")]
    assert table.schema.id == 0
    rows = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": 1, "code": 10, "total": 100, "name": "a"}, {"id": 2, "code": 20, "total": 200, "name": "b"}]


def test_restart_from_checkpoint_has_no_duplicates(session: SparkSession, bootstrap: str, topics: list[str],
                                                   tmp_path: Path) -> None:
    types = {"id": "int(11)", "v": "varchar(20)"}
    model: dict[str, dict[int, str]] = {"a": {}, "b": {}}
    events = []
    for step in range(30):  # interleaved changes of two tables on one shared topic
        for name in ("a", "b"):
            i = step % 7
            kind = "UPDATE" if i in model[name] else "INSERT"
            model[name][i] = f"{name}{step}"
            events.append(canal(name, kind, [{"id": str(i), "v": model[name][i]}], types))
        if step % 5 == 4:
            gone = min(model["a"])
            events.append(canal("a", "DELETE", [{"id": str(gone), "v": model["a"].pop(gone)}], types))
    send(bootstrap, topics[0], events)

    # a crash in micro-batch 2 after table `a` was committed and before `b` was
    crashing = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json", max_offsets_per_trigger=12)
    write = crashing._write_table

    def write_then_crash(parsed: Any, name: str, changes: Any, batch_id: int) -> None:
        write(parsed, name, changes, batch_id)
        if batch_id == 2:
            raise RuntimeError("simulated crash")

    crashing._write_table = write_then_crash  # type: ignore[method-assign]
    with pytest.raises(Exception, match="simulated crash"):
        crashing.run_available_now()
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    assert [s.commit_identifier for s in catalog.get_table("shop.a").snapshots()] == [0, 1, 2]
    assert [s.commit_identifier for s in catalog.get_table("shop.b").snapshots()] == [0, 1]

    # the restart re-runs batch 2 with the same offsets: `a` skips it, `b` commits it
    resumed = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json", max_offsets_per_trigger=12)
    resumed.run_available_now()
    assert resumed.stats.duplicate_commits == 1
    # a lost commit marker: the last batch runs again and is dropped by both tables
    checkpoint = tmp_path / "checkpoint"
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    os.remove(checkpoint / "commits" / str(last))
    os.remove(checkpoint / "commits" / f".{last}.crc")
    replay = job(session, bootstrap, topics[:1], tmp_path, fmt="canal-json", max_offsets_per_trigger=12)
    replay.run_available_now()
    assert replay.stats.duplicate_commits == 2 and replay.stats.rows_written == 0

    for name in ("a", "b"):
        table = catalog.get_table(f"shop.{name}")
        identifiers = [s.commit_identifier for s in table.snapshots()]
        assert identifiers == list(range(last + 1))  # one commit per micro-batch, none twice
        rows = {r["id"]: r["v"] for r in table.to_arrow().to_pylist()}
        assert rows == model[name]
    assert json.loads((checkpoint / "offsets" / str(last)).read_text().splitlines()[-1])  # the source's offsets


def test_cli_engine_spark_is_idempotent(spark: Service, bootstrap: str, topics: list[str], tmp_path: Path) -> None:
    model = Model("orders")
    for i in range(20):
        model.insert({"id": i, "name": f"n{i}", "qty": i})
    model.update(3, qty=33)
    model.delete(5)
    send(bootstrap, topics[0], model.take())
    env = {**os.environ, **spark.client_env(),
           "PYTHONPATH": os.pathsep.join([str(REPO / "engine"), str(REPO / "platform")])}
    cmd = [sys.executable, "-m", "strata_platform.cdc", "--engine", "spark", "--bootstrap", bootstrap,
           "--topic", topics[0], "--warehouse", str(tmp_path / "wh"), "--database", "shop",
           "--checkpoint", str(tmp_path / "checkpoint"), "--until-idle", "1"]
    outputs = [subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=True)
               for _ in range(2)]  # the second run restarts from the checkpoint: nothing new
    stats = [json.loads(out.stdout.strip().splitlines()[-1]) for out in outputs]
    assert stats[0]["tables_created"] == ["shop.orders"] and stats[0]["rows_written"] == 23
    assert stats[1]["batches"] == 0 and stats[1]["rows_written"] == 0
    table = strata.load_catalog(str(tmp_path / "wh")).get_table("shop.orders")
    assert table_rows(table) == expected(model)
    with pytest.raises(subprocess.CalledProcessError) as failed:
        subprocess.run([*cmd[:-4], "--until-idle", "1"], capture_output=True, text=True, env=env, timeout=120,
                       check=True)
    assert "--engine spark needs --checkpoint" in failed.value.stderr
