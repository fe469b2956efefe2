"""The Kafka log store against the real broker: transactions per commit, offsets in snapshots,
hybrid reads, and the fallback when Kafka's retention has dropped the needed offsets."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.errors import CommitFailedError
from strata.log import HybridReader, LogOffsetsLostWarning, LogSystemError, fallback_count, snapshot_log_offsets
from strata.log import kafka as log_kafka
from strata.log.serde import decode_envelope
from strata.operation.commit import FileStoreCommit

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])


def make_table(catalog: strata.Catalog, bootstrap: str, topics: list[str], pk: bool = True,
               buckets: int = 2, **options: str) -> strata.Table:
    topic = f"it-log-{uuid.uuid4().hex[:12]}"
    topics.append(topic)
    opts = {"bucket": str(buckets), "log.system": "kafka", "log.kafka.bootstrap-servers": bootstrap,
            "log.kafka.topic": topic, "log.system.auto-register": "true", **options}
    if not pk and buckets > 0:
        opts["bucket-key"] = "id"
    name = f"db.t_{uuid.uuid4().hex[:8]}"
    return catalog.create_table(name, SCHEMA, primary_keys=["id"] if pk else None, options=opts)


def rows(ids: range | list[int], tag: str = "v") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"{tag}{i}" for i in ids], "amount": [i * 1.5 for i in ids]}, schema=SCHEMA)


def read_log(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[dict[str, Any]]:
    """Every record of the topic (all partitions, from the start to the end), decoded."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "enable.partition.eof": True, "log_level": 3})
    partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: list[dict[str, Any]] = []
    done: set[int] = set()
    try:
        while len(done) < len(partitions):
            for m in consumer.consume(1000, 1.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        done.add(m.partition())
                        continue
                    raise AssertionError(str(m.error()))
                done.discard(m.partition())
                for kind, row in decode_envelope(m.value()):
                    out.append({"kind": kind, "partition": m.partition(),
                                "key": json.loads(m.key()) if m.key() else None, **row})
    finally:
        consumer.close()
    return out


def ids_of(records: list[dict[str, Any]]) -> Counter[int]:
    return Counter(r["id"] for r in records)


# -- transactional ---------------------------------------------------------------------------------
def test_read_committed_sees_exactly_the_committed_rows(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics)
    table.write(rows(range(0, 50)), commit_user="w", identifier=1)
    table.write(rows(range(50, 80)), commit_user="w", identifier=2)
    seen = read_log(bootstrap, topics[0])
    assert ids_of(seen) == Counter(range(80))
    assert all(r["key"] == {"id": r["id"]} and r["kind"] == 0 for r in seen)
    # Kafka partition = bucket: the same keys land in the same bucket directory
    by_bucket = {s.bucket: {r["id"] for r in table.new_read().to_arrow([s]).to_pylist()} for s in table.scan()}
    for r in seen:
        assert r["id"] in by_bucket[r["partition"]]

    # an uncommitted transaction is invisible to read_committed, though its records are in Kafka
    writer = table.new_write("w")
    writer.write_arrow(rows(range(100, 110)))
    messages = writer.prepare_commit()
    writer.close()
    assert ids_of(read_log(bootstrap, topics[0])) == Counter(range(80))
    assert len(read_log(bootstrap, topics[0], "read_uncommitted")) == 90
    table.new_commit("w").commit(messages, 3)
    assert ids_of(read_log(bootstrap, topics[0])) == Counter([*range(80), *range(100, 110)])

    # every snapshot recorded, per bucket, the offset just past its last record
    offsets = snapshot_log_offsets(table.latest_snapshot())
    assert set(offsets) == {0, 1}
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "log_level": 3})
    for p, offset in offsets.items():
        _low, high = consumer.get_watermark_offsets(TopicPartition(topics[0], p), timeout=10)
        assert offset == high - 1  # the commit marker follows the last record
    consumer.close()


def test_failed_commit_leaves_nothing_visible(catalog, bootstrap, topics, monkeypatch) -> None:
    table = make_table(catalog, bootstrap, topics)
    table.write(rows(range(10)), commit_user="w", identifier=1)

    def broken(self, snapshot, *args):  # the publish of snapshot-N fails
        raise CommitFailedError("simulated publish failure")

    monkeypatch.setattr(FileStoreCommit, "_publish", broken)
    with pytest.raises(CommitFailedError):
        table.write(rows(range(10, 20)), commit_user="w", identifier=2)
    monkeypatch.undo()
    assert table.latest_snapshot().id == 1
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(10))
    assert ids_of(read_log(bootstrap, topics[0])) == Counter(range(10))
    assert len(read_log(bootstrap, topics[0], "read_uncommitted")) == 20  # produced, then aborted
    # the writer goes on after the failure
    table.write(rows(range(20, 25)), commit_user="w", identifier=2)
    assert ids_of(read_log(bootstrap, topics[0])) == Counter([*range(10), *range(20, 25)])


def test_replayed_commit_and_restarted_writer_produce_no_duplicates(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics)
    assert not table.write(rows(range(10)), commit_user="w", identifier=1).skipped_as_duplicate
    # a replay of the same commit (e.g. after a restart) is skipped: its transaction is aborted
    log_kafka.close_producers()
    assert table.write(rows(range(10)), commit_user="w", identifier=1).skipped_as_duplicate

    # a writer dies with an open transaction; its successor (same commit user) fences it
    writer = table.new_write("w")
    writer.write_arrow(rows(range(10, 20)))
    writer.prepare_commit()
    log_kafka._TXN_PRODUCERS.clear()  # the process is gone (no abort, no commit)
    table.write(rows(range(10, 20)), commit_user="w", identifier=2)
    assert ids_of(read_log(bootstrap, topics[0])) == Counter(range(20))
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(20))


def test_eventual_records_are_visible_at_once_as_upserts(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics, **{"log.consistency": "eventual"})
    table.write(rows(range(5)))
    writer = table.new_write()
    writer.write_arrow(rows([1, 1, 2]), row_kind=["-U", "+U", "-D"])
    writer.prepare_commit()  # not committed: the records are visible nevertheless
    seen = read_log(bootstrap, topics[0])
    assert [(r["id"], r["kind"]) for r in seen if r["kind"] != 0] == [(1, 2), (2, 3)]  # no -U (upsert)
    writer.close()


def test_eventual_refuses_append_tables(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics, pk=False, **{"log.consistency": "eventual"})
    with pytest.raises(ValueError, match="primary key"):
        table.write(rows(range(3)))


def test_append_table_log(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics, pk=False, buckets=-1)
    table.write(rows(range(7)))
    seen = read_log(bootstrap, topics[0])
    assert ids_of(seen) == Counter(range(7))
    assert {r["partition"] for r in seen} == {0} and all(r["key"] is None for r in seen)


def test_missing_topic_without_auto_register(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics, **{"log.system.auto-register": "false"})
    with pytest.raises(LogSystemError, match=r"does not exist.*auto-register"):
        table.write(rows(range(3)))
    assert table.latest_snapshot() is None


# -- hybrid read ---------------------------------------------------------------------------------------
def apply(state: dict[int, dict[str, Any]], changes: pa.Table) -> dict[int, dict[str, Any]]:
    for r in changes.to_pylist():
        kind = r.pop("_ROW_KIND")
        if kind in ("+I", "+U"):
            state[r["id"]] = r
        else:
            state.pop(r["id"], None)
    return state


def as_state(table: pa.Table) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in table.to_pylist()}


def history(table: strata.Table) -> None:
    table.write(rows(range(0, 40)), commit_user="w", identifier=1)
    table.write(rows(range(40, 60)), commit_user="w", identifier=2)
    table.write(rows(range(0, 10), "upd"), row_kind="+U", commit_user="w", identifier=3)
    table.write(rows(range(50, 55)), row_kind="-D", commit_user="w", identifier=4)
    table.write(rows(range(60, 70)), commit_user="w", identifier=5)


def test_hybrid_read_switches_without_gap_or_duplicate(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics, buckets=3)
    history(table)
    latest = table.latest_snapshot().id
    for start in (1, 2, 4):
        with HybridReader(table, snapshot_id=start) as reader:
            snap = reader.read_snapshot()
            assert as_state(snap.drop_columns(["_ROW_KIND"])) == as_state(table.to_arrow(snapshot_id=start))
            changes = reader.read_until()
            assert not reader.fell_back
            # exactly the changes the snapshots after `start` hold, and the latest state after them
            expected = table.read_incremental(start, latest)
            assert Counter(map(str, changes.to_pylist())) == Counter(map(str, expected.to_pylist()))
            assert apply(as_state(snap.drop_columns(["_ROW_KIND"])), changes) == as_state(table.to_arrow())

    # streaming on: commits after the reader started arrive through the log
    with HybridReader(table) as reader:
        state = as_state(reader.read_snapshot().drop_columns(["_ROW_KIND"]))
        assert reader.read_until().num_rows == 0
        table.write(rows(range(70, 75)), commit_user="w", identifier=6)
        table.write(rows([0]), row_kind="-D", commit_user="w", identifier=7)
        apply(state, reader.read_until())
        assert state == as_state(table.to_arrow())
        assert reader.poll(timeout=0.5).num_rows == 0


def test_hybrid_read_falls_back_when_offsets_are_gone(catalog, bootstrap, topics) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    table = make_table(catalog, bootstrap, topics, buckets=2)
    history(table)
    # simulate retention: drop every record of the topic
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "log_level": 3})
    ends = [TopicPartition(topics[0], p, consumer.get_watermark_offsets(TopicPartition(topics[0], p))[1])
            for p in range(2)]
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    for future in admin.delete_records(ends).values():
        future.result(30)

    before = fallback_count()
    with HybridReader(table, snapshot_id=2) as reader, pytest.warns(LogOffsetsLostWarning):
        changes = reader.read_until()
    assert reader.fell_back and fallback_count() == before + 1
    expected = table.read_incremental(2, table.latest_snapshot().id)
    assert Counter(map(str, changes.to_pylist())) == Counter(map(str, expected.to_pylist()))
    state = apply(as_state(table.to_arrow(snapshot_id=2)), changes)
    assert state == as_state(table.to_arrow())


def test_a_writer_must_commit_before_its_next_transaction(catalog, bootstrap, topics) -> None:
    table = make_table(catalog, bootstrap, topics)
    writer = table.new_write("w")
    writer.write_arrow(rows(range(3)))
    first = writer.prepare_commit()
    with pytest.raises(LogSystemError, match="not committed yet"):
        writer.write_arrow(rows(range(3, 6)))
    table.new_commit("w").commit(first, 1)
    writer.write_arrow(rows(range(3, 6)))
    table.new_commit("w").commit(writer.prepare_commit(), 2)
    writer.close()
    assert ids_of(read_log(bootstrap, topics[0])) == Counter(range(6))
