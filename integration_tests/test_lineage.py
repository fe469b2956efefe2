"""Lineage and consistent multi-table reads: a three-stage streaming pipeline on a real Spark,
and the MetaService over HTTP with its state in a MinIO warehouse.

Pipeline (each stage a Structured Streaming query with ``LineageBatchWriter``, at its own speed):

  db.source_events (written by the test: the root)
    -> orders-job (trigger 1 s)   -> db.orders  (id, customer, cents)
    -> fees-job   (trigger 3 s)   -> db.fees    (id, customer, fee)
    -> totals-job (trigger 6 s)   -> db.totals  (customer, fee_total, n)   full recompute

The join orders JOIN fees ON id JOIN totals ON customer, read at the consistent set, always equals
the same join computed from the source table at the set's point; over each table's latest
snapshot it differs while a slower stage lags.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import strata
from strata.fs.s3 import S3FileIO
from strata.lineage import consistent_set, read_consistent, tag_consistent_set
from strata.lineage.spark import LineageBatchWriter
from strata.table.table import Table
from strata_platform import metaservice
from strata_platform.services.base import Service

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.lineage

SOURCE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.string()),
                    pa.field("amount", pa.int64())])
ORDERS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.string()),
                    pa.field("cents", pa.int64())])
FEES = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("customer", pa.string()),
                  pa.field("fee", pa.int64())])
TOTALS = pa.schema([pa.field("customer", pa.string(), nullable=False), pa.field("fee_total", pa.int64()),
                    pa.field("n", pa.int64())])
BATCH = 20


# -- the stages: Spark transforms, and the same in pyarrow for the reference ------------------------
def to_orders(df: DataFrame) -> DataFrame:
    return df.selectExpr("id", "upper(customer) AS customer", "amount * 100 AS cents")


def to_fees(df: DataFrame) -> DataFrame:
    return df.selectExpr("id", "customer", "cents DIV 10 AS fee")


def to_totals(df: DataFrame) -> DataFrame:
    return df.groupBy("customer").agg({"fee": "sum", "id": "count"}).selectExpr(
        "customer", "CAST(`sum(fee)` AS BIGINT) AS fee_total", "CAST(`count(id)` AS BIGINT) AS n")


def source_batch(start: int, n: int) -> pa.Table:
    ids = pa.array(range(start, start + n), pa.int64())
    customers = pc.binary_join_element_wise("c", pc.cast(pc.bit_wise_and(ids, 7), pa.string()), "")
    return pa.table([ids, customers, pc.add(pc.bit_wise_and(pc.multiply(ids, 13), 63), 1)], schema=SOURCE)


def reference(source: pa.Table) -> tuple[pa.Table, pa.Table, pa.Table]:
    orders = pa.table([source["id"], pc.utf8_upper(source["customer"]), pc.multiply(source["amount"], 100)],
                      schema=ORDERS)
    fees = pa.table([orders["id"], orders["customer"], pc.divide(orders["cents"], 10)], schema=FEES)
    grouped = fees.group_by("customer").aggregate([("fee", "sum"), ("id", "count")])
    totals = pa.table([grouped["customer"], grouped["fee_sum"], grouped["id_count"]], schema=TOTALS)
    return orders, fees, totals


def join_rows(orders: pa.Table, fees: pa.Table, totals: pa.Table) -> list[tuple]:
    joined = orders.join(fees.drop_columns(["customer"]), "id").join(totals, "customer")
    cols = ["id", "customer", "cents", "fee", "fee_total", "n"]
    return sorted(zip(*(joined[c].to_pylist() for c in cols), strict=True))


def source_join(source_table: Table, snapshot_id: int) -> list[tuple]:
    return join_rows(*reference(source_table.to_arrow(snapshot_id=snapshot_id)))


# -- fixtures ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def session(session: SparkSession) -> SparkSession:
    session.conf.set("spark.sql.shuffle.partitions", "1")  # tiny aggregates (restored after the module)
    return session


def uri(catalog: strata.Catalog, table: Table) -> str:
    return f"{catalog.warehouse}#{table.identifier}"  # type: ignore[attr-defined]


def create_tables(catalog: strata.Catalog) -> dict[str, Table]:
    specs = {"source_events": (SOURCE, ["id"]), "orders": (ORDERS, ["id"]), "fees": (FEES, ["id"]),
             "totals": (TOTALS, ["customer"])}
    return {name: catalog.create_table(f"db.{name}", schema, primary_keys=keys, options={"bucket": "1"})
            for name, (schema, keys) in specs.items()}


def start_stage(session: SparkSession, catalog: strata.Catalog, upstream: Table, writer_args: dict[str, Any],
                trigger: str, checkpoint: Path) -> Any:
    writer = LineageBatchWriter(upstream=upstream, checkpoint=str(checkpoint),
                                upstream_location=uri(catalog, upstream), **writer_args)
    query = (session.readStream.format("strata").load(uri(catalog, upstream))
             .writeStream.option("checkpointLocation", str(checkpoint)).foreachBatch(writer)
             .trigger(processingTime=trigger).start())
    # one query starting at a time: on a loaded machine concurrent Python workers time out connecting
    wait_for(f"the first micro-batch of {writer_args['job']}",
             lambda: query.exception() is not None or bool(query.recentProgress))
    assert query.exception() is None, query.exception()
    return query


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def reached(table: Table, source: Table) -> int:
    """The source snapshot `table`'s newest snapshot derives from (0 if none)."""
    from strata.lineage import effective_lineage

    latest = table.snapshot_manager.latest_id()
    lineage = effective_lineage(table, latest) if latest else None
    return int(lineage.roots.get(str(source.identifier), 0)) if lineage else 0


# -- the pipeline test ---------------------------------------------------------------------------------
@pytest.mark.spark
def test_three_stage_spark_pipeline_reads_consistently(session: SparkSession, catalog: strata.Catalog,
                                                       tmp_path: Path) -> None:
    t = create_tables(catalog)
    t["source_events"].write(source_batch(0, BATCH))
    stages = [
        (t["source_events"], {"job": "orders-job", "target": t["orders"], "transform": to_orders}, "1 second"),
        (t["orders"], {"job": "fees-job", "target": t["fees"], "transform": to_fees}, "3 seconds"),
        (t["fees"], {"job": "totals-job", "target": t["totals"], "transform": to_totals,
                     "full_recompute": True}, "6 seconds"),
    ]
    queries = [start_stage(session, catalog, up, args, trigger, tmp_path / f"ckpt-{i}")
               for i, (up, args, trigger) in enumerate(stages)]
    tables = [t["orders"], t["fees"], t["totals"]]
    checked = set()
    try:
        for i in range(1, 10):
            t["source_events"].write(source_batch(i * BATCH, BATCH))
            time.sleep(1.0)
            cset = consistent_set(tables)
            if cset is None:
                continue
            point = int(cset.point["db.source_events"])
            assert join_rows(*read_consistent(tables, cset).values()) == source_join(t["source_events"], point)
            checked.add(point)
        for q in queries:
            assert q.exception() is None
        assert checked, "no consistent set was ever found while the pipeline ran"

        # make the slow stage visibly behind: stop it, feed one more batch through the others
        queries[2].stop()
        newest = t["source_events"].write(source_batch(10 * BATCH, BATCH)).snapshot_ids[-1]
        wait_for("orders and fees to reach the newest source snapshot",
                 lambda: reached(t["fees"], t["source_events"]) >= newest)
        latest_join = join_rows(*(x.to_arrow() for x in tables))
        assert latest_join != source_join(t["source_events"], newest)  # the latest snapshots do not agree
        assert latest_join != source_join(t["source_events"], reached(t["totals"], t["source_events"]))
        cset = consistent_set(tables)
        assert cset is not None
        point = int(cset.point["db.source_events"])
        assert point < newest
        expected = source_join(t["source_events"], point)
        assert join_rows(*read_consistent(tables, cset).values()) == expected

        # the same read through Spark options, and through the tags any reader can use
        by_spark = [session.read.format("strata").options(**cset.spark_options(x))
                    .load(uri(catalog, x)).toArrow() for x in tables]
        assert join_rows(*(b.select(s.names) for b, s in zip(by_spark, (ORDERS, FEES, TOTALS), strict=True))) \
            == expected
        tag = tag_consistent_set(tables, cset)
        by_tag = [session.read.format("strata").option("tag", tag).load(uri(catalog, x))
                  .toArrow().select(s.names) for x, s in zip(tables, (ORDERS, FEES, TOTALS), strict=True)]
        assert join_rows(*by_tag) == expected

        # the slow stage catches up: the consistent point moves to the newest source snapshot
        queries[2] = start_stage(session, catalog, *stages[2][:2], "1 second", tmp_path / "ckpt-2")
        wait_for("totals to catch up", lambda: reached(t["totals"], t["source_events"]) >= newest)
        cset = consistent_set(tables)
        assert cset is not None and cset.point == {"db.source_events": str(newest)}
        assert join_rows(*read_consistent(tables, cset).values()) == source_join(t["source_events"], newest)
    finally:
        for q in queries:
            if q.isActive:
                q.stop()


# -- the MetaService ----------------------------------------------------------------------------------
def s3_options(minio: Service) -> dict[str, str]:
    env = minio.client_env()
    return {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"]}


@pytest.fixture
def s3_catalog(minio: Service) -> Iterator[strata.Catalog]:
    prefix = f"s3://warehouse/lineage-{uuid.uuid4().hex[:12]}"
    cat = strata.load_catalog(prefix, **s3_options(minio))
    cat.create_database("db")
    yield cat
    S3FileIO(s3_options(minio)).delete_dir(prefix)


def call(port: int, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            raw = resp.read()
            return resp.status, raw.decode() if path == "/metrics" else json.loads(raw)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def run_stage(upstream: Table, target: Table, job: str, rows: pa.Table) -> None:
    from strata.lineage import lineage_properties

    read_at = upstream.snapshot_manager.latest_id()
    assert read_at is not None
    with target.new_write() as writer:
        writer.write_arrow(rows)
        messages = writer.prepare_commit()
    target.new_commit().commit(messages, properties=lineage_properties(job, reads={upstream: read_at}))


@pytest.mark.minio
def test_metaservice_tags_points_and_survives_restart(s3_catalog: strata.Catalog) -> None:
    t = create_tables(s3_catalog)
    source, orders, fees = t["source_events"], t["orders"], t["fees"]
    service = metaservice.MetaService(s3_catalog)
    server = metaservice.start(service, port=0)
    port = server.server_port
    try:
        assert call(port, "GET", "/health") == (200, {"status": "ok"})
        status, answer = call(port, "PUT", "/pipelines/shop", {"tables": ["db.orders", "db.fees"]})
        assert status == 200 and answer["tables"] == ["db.orders", "db.fees"]
        assert call(port, "PUT", "/pipelines/bad", {"tables": ["db.nope"]})[0] == 404
        assert call(port, "POST", "/pipelines/shop/tags")[0] == 409  # nothing committed yet

        source.write(source_batch(0, BATCH))
        run_stage(source, orders, "orders-job", reference(source.to_arrow())[0])
        run_stage(orders, fees, "fees-job", reference(source.to_arrow())[1])
        source.write(source_batch(BATCH, BATCH))
        run_stage(source, orders, "orders-job", reference(source.to_arrow())[0])  # fees lags now

        status, answer = call(port, "GET", "/pipelines/shop/consistent")
        assert status == 200 and answer["consistent"]["point"] == {"db.source_events": "1"}
        status, tagged = call(port, "POST", "/pipelines/shop/tags")
        assert status == 200 and tagged["created"] and tagged["tag"] == "lineage-db.source_events-1"
        assert call(port, "POST", "/pipelines/shop/tags")[1]["created"] is False
        assert orders.tags.exists("lineage-db.source_events-1") and fees.tags.exists("lineage-db.source_events-1")

        status, graph = call(port, "GET", "/graph")
        edges = {(e["source"], e["target"]): e for e in graph["edges"]}
        assert edges[("db.orders", "db.fees")]["behind_snapshots"] == 1
        assert edges[("db.source_events", "db.orders")]["behind_snapshots"] == 0
        metrics = call(port, "GET", "/metrics")[1]
        assert 'strata_lineage_lag_snapshots{source="db.orders",table="db.fees"} 1.0' in metrics
        assert 'strata_metaservice_tags_created_total{pipeline="shop"} 1.0' in metrics
    finally:
        server.shutdown()
        server.server_close()

    # a new process on the same warehouse: the pipeline and its tagged points are still there
    located: Any = s3_catalog
    restarted = metaservice.MetaService(strata.load_catalog(located.warehouse, **located.options))
    server = metaservice.start(restarted, port=0)
    try:
        status, listed = call(server.server_port, "GET", "/pipelines")
        assert [p["name"] for p in listed["pipelines"]] == ["shop"]
        points = call(server.server_port, "GET", "/pipelines/shop/points")[1]["points"]
        assert [p["tag"] for p in points] == ["lineage-db.source_events-1"]
        assert call(server.server_port, "DELETE", "/pipelines/shop")[0] == 200
        assert call(server.server_port, "GET", "/pipelines/shop/consistent")[0] == 404
    finally:
        server.shutdown()
        server.server_close()
