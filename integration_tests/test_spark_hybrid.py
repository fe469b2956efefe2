"""The hybrid read of ``spark.readStream.format("strata")`` (``streaming-read-mode=log``) on a real
Spark and a real Kafka broker: the base snapshot from the files, every later change from the log,
exactly once; and the fallback to file-based streaming when retention dropped the records.

The commits made after the query started have their data files deleted before they are
committed, so the query can only have seen their rows through Kafka.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

import strata
from strata.log import kafka as log_kafka
from strata.spark.writer import written_paths

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = [pytest.mark.kafka, pytest.mark.spark]
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
Row = tuple[str, int, str, float]  # (_ROW_KIND, id, name, amount)


def make_table(catalog: strata.FileSystemCatalog, bootstrap: str, topics: list[str]) -> strata.Table:
    topic = f"it-spark-log-{uuid.uuid4().hex[:12]}"
    topics.append(topic)
    # write-only: no compaction rewrites files, so deleting a commit's new files is all it takes
    options = {"bucket": "3", "log.system": "kafka", "log.kafka.bootstrap-servers": bootstrap,
               "log.kafka.topic": topic, "log.system.auto-register": "true", "write-only": "true"}
    return catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options=options)


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "name": [f"{tag}{i}" for i in ids], "amount": [i * 1.5 for i in ids]}, schema=SCHEMA)


class Model:
    """The table's expected state and the changes each commit makes."""

    def __init__(self) -> None:
        self.state: dict[int, tuple[str, float]] = {}

    def changes(self, data: pa.Table, kind: str) -> list[Row]:
        out = []
        for r in data.to_pylist():
            out.append((kind, r["id"], r["name"], r["amount"]))
            if kind == "-D":
                self.state.pop(r["id"], None)
            else:
                self.state[r["id"]] = (r["name"], r["amount"])
        return out

    def rows(self) -> list[Row]:
        return sorted(("+I", k, *v) for k, v in self.state.items())


def commit(table: strata.Table, model: Model, identifier: int, data: pa.Table, kind: str = "+I",
           delete_files: bool = False) -> list[Row]:
    """One commit of `data` as `kind` rows; with `delete_files`, its new data files are deleted
    before it is published (its log records are produced already)."""
    with table.new_write("w") as writer:
        writer.write_arrow(data, row_kind=[kind] * data.num_rows)
        messages = writer.prepare_commit()
    if delete_files:
        for path in written_paths(table, messages):
            table.file_io.delete(path)
    table.new_commit("w").commit(messages, identifier)
    return model.changes(data, kind)


def as_rows(df: DataFrame) -> list[Row]:
    return [(r["_ROW_KIND"], r["id"], r["name"], r["amount"]) for r in df.collect()]


def offsets_log(checkpoint: Path) -> list[dict[str, Any]]:
    """The strata source's offset of every planned micro-batch, in order."""
    files = sorted((checkpoint / "offsets").iterdir(), key=lambda f: int(f.name) if f.name.isdigit() else -1)
    return [json.loads(f.read_text().splitlines()[2]) for f in files if f.name.isdigit()]


def hybrid_stream(session: SparkSession, catalog: strata.FileSystemCatalog, **options: str) -> DataFrame:
    return (session.readStream.format("strata").option("streaming-read-mode", "log")
            .option("include-row-kind", "true").options(**options).load(f"{catalog.warehouse}#db.t"))


def test_hybrid_read_switches_to_kafka_without_gap_or_duplicate(session: SparkSession, catalog, bootstrap, topics,
                                                               tmp_path: Path) -> None:
    table = make_table(catalog, bootstrap, topics)
    model = Model()
    commit(table, model, 1, rows(list(range(0, 30)), "a"))
    commit(table, model, 2, rows(list(range(10, 20)), "b"))  # updates
    commit(table, model, 3, rows(list(range(25, 30)), "a"), "-D")
    base = model.rows()

    batches: dict[int, list[Row]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        batches[batch_id] = as_rows(df)

    checkpoint = tmp_path / "ck"
    query = (hybrid_stream(session, catalog).writeStream.foreachBatch(collect)
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="500 milliseconds").start())
    try:
        query.processAllAvailable()
        assert sorted(r for b in batches.values() for r in b) == base  # snapshot 3 from the files
        started = len(batches)
        expected: list[Row] = []
        expected += commit(table, model, 4, rows(list(range(30, 45)), "c"), delete_files=True)
        expected += commit(table, model, 5, rows([0, 1, 2, 31], "d"), delete_files=True)  # base and new keys
        expected += commit(table, model, 6, rows([3, 4, 32], "a"), "-D", delete_files=True)
        query.processAllAvailable()
        expected += commit(table, model, 7, rows([3, 50], "e"), delete_files=True)  # a deleted key returns
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()

    changes = [r for bid in sorted(batches) if bid >= started for r in batches[bid]]
    assert Counter(changes) == Counter(expected)  # each change exactly once, none missing
    state = {r[1]: r for r in base}
    for kind, key, name, amount in changes:  # per key, the changes arrive in commit order
        if kind == "-D":
            state.pop(key, None)
        else:
            state[key] = ("+I", key, name, amount)
    assert sorted(state.values()) == model.rows()
    last = offsets_log(checkpoint)[-1]
    assert last["snapshot"] == 7 and last["log-from"] == 3
    assert last["table"] == f"{catalog.warehouse}#db.t"
    assert {int(p): o for p, o in last["log"].items()} == log_kafka.snapshot_log_offsets(table.latest_snapshot())


def test_hybrid_read_falls_back_to_files_when_kafka_dropped_the_offsets(session: SparkSession, catalog, bootstrap,
                                                                       topics, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    table = make_table(catalog, bootstrap, topics)
    model = Model()
    commit(table, model, 1, rows(list(range(0, 20)), "a"))

    def run() -> list[Row]:
        got: list[Row] = []
        query = (hybrid_stream(session, catalog).writeStream.foreachBatch(lambda df, _: got.extend(as_rows(df)))
                 .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        return got

    assert sorted(run()) == model.rows()
    expected = commit(table, model, 2, rows(list(range(20, 30)), "b"))
    # retention: drop every record up to now, i.e. snapshot 2's records the stream still needs
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "it", "log_level": 3})
    ends = [TopicPartition(topics[0], p, consumer.get_watermark_offsets(TopicPartition(topics[0], p))[1])
            for p in range(3)]
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})  # kept alive until the futures are done
    for future in admin.delete_records(ends).values():
        future.result(30)
    expected += commit(table, model, 3, rows([0, 1, 25], "c"))

    assert Counter(run()) == Counter(expected)  # snapshots 2 and 3 from the files, exactly once
    last = offsets_log(tmp_path / "ck")[-1]
    assert last["snapshot"] == 3 and "log" not in last  # file-based from the fallback on


def test_log_mode_needs_a_log_store(session: SparkSession, catalog) -> None:
    catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    with pytest.raises(Exception, match=r"streaming-read-mode=log needs a table with log\.system=kafka"):
        hybrid_stream(session, catalog).writeStream.foreachBatch(lambda df, _: None).start().awaitTermination(60)
    with pytest.raises(Exception, match="streaming-read-mode 'kafka' is not one of"):
        (session.readStream.format("strata").option("streaming-read-mode", "kafka")
         .load(f"{catalog.warehouse}#db.t").writeStream.foreachBatch(lambda df, _: None).start()
         .awaitTermination(60))
