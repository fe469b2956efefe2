"""``Table.stream`` over a table with a Kafka log store (against the real broker): the changes come
from the log, every row as written, read_committed; judged against the model of the changes
written and against ``to_arrow``; the consumer's position is a snapshot, saved once the log is
read up to that snapshot's offsets, and a stream whose start snapshot expired reads it from files."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

import strata
from strata.log import kafka as log_kafka

pytestmark = pytest.mark.kafka
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
Change = tuple[str, int, str | None]


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    from strata_platform.services.testing import provide

    for service in provide("kafka"):
        yield service.client_env()["STRATA_KAFKA_BOOTSTRAP"]


@pytest.fixture
def topic(bootstrap: str) -> Iterator[str]:
    from strata_platform.services import kafka as broker

    name = f"stream-{uuid.uuid4().hex[:12]}"
    yield name
    log_kafka.close_producers()
    broker.delete_topics(bootstrap, [name])


def log_table(catalog: strata.Catalog, bootstrap: str, topic: str, consistency: str,
              keyed: bool = True) -> strata.Table:
    return catalog.create_table(
        f"db.t_{uuid.uuid4().hex[:8]}", SCHEMA, primary_keys=["id"] if keyed else None,
        options={"bucket": "2", "log.system": "kafka", "log.consistency": consistency,
                 "log.kafka.bootstrap-servers": bootstrap, "log.kafka.topic": topic,
                 "log.system.auto-register": "true", **({} if keyed else {"bucket-key": "id"})})


def rows(ids: range | list[int], tag: str) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def changes(batches: list[pa.RecordBatch]) -> Counter[Change]:
    """The changes as (kind, id, name), name None for deletes (their records carry the key only)."""
    out: Counter[Change] = Counter()
    for batch in batches:
        for kind, id_, name in zip(*(batch.column(c).to_pylist() for c in ("_ROW_KIND", "id", "name")),
                                   strict=True):
            out[(kind, id_, None if kind == "-D" else name)] += 1
    return out


def applied(batches: list[pa.RecordBatch]) -> dict[int, str]:
    """The table the changes lead to, applied in order (the order of a key is its bucket's)."""
    state: dict[int, str] = {}
    for batch in batches:
        for kind, id_, name in zip(*(batch.column(c).to_pylist() for c in ("_ROW_KIND", "id", "name")),
                                   strict=True):
            if kind in ("+I", "+U"):
                state[id_] = name
            else:
                state.pop(id_, None)
    return state


def table_rows(table: strata.Table) -> dict[int, str]:
    data = table.to_arrow()
    return dict(zip(data.column("id").to_pylist(), data.column("name").to_pylist(), strict=True))


def write_history(table: strata.Table) -> list[Change]:
    """Three commits: inserts; an update of key 3 written as -U and +U in one commit, with new
    keys; a delete. Returns the changes as written."""
    table.write(rows(range(20), "a"))
    update = pa.concat_tables([rows([3], "a"), rows([3], "b"), rows(range(20, 30), "b")])
    table.write(update, row_kind=["-U", "+U", *["+I"] * 10])
    table.delete(rows([5, 6], "").select(["id"]))
    return [*(("+I", i, f"a{i}") for i in range(20)), ("-U", 3, "a3"), ("+U", 3, "b3"),
            *(("+I", i, f"b{i}") for i in range(20, 30)), ("-D", 5, None), ("-D", 6, None)]


def test_a_transactional_log_gives_every_row_as_written(catalog: strata.Catalog, bootstrap: str, topic: str) -> None:
    table = log_table(catalog, bootstrap, topic, "transactional")
    written = write_history(table)
    got = list(table.stream(from_snapshot=1, follow=False))
    assert changes(got) == Counter(written)
    assert applied(got) == table_rows(table)
    # the files merged key 3's -U/+U of one commit: only the log has the -U
    from_files = changes(list(table.stream(from_snapshot=1, follow=False, log=False)))
    assert ("-U", 3, "a3") not in from_files and ("+U", 3, "b3") in from_files
    assert table.consumers.consumer("any") is None


def test_an_append_tables_log_gives_its_rows_as_its_files(catalog: strata.Catalog, bootstrap: str,
                                                          topic: str) -> None:
    table = log_table(catalog, bootstrap, topic, "transactional", keyed=False)
    table.write(rows(range(20), "a"))
    table.write(rows(range(10, 30), "b"))  # the same ids again: an append table keeps both
    got = list(table.stream(from_snapshot=1, follow=False))
    written = Counter([*(("+I", i, f"a{i}") for i in range(20)), *(("+I", i, f"b{i}") for i in range(10, 30))])
    assert changes(got) == written
    assert changes(list(table.stream(from_snapshot=1, follow=False, log=False))) == written
    data = table.to_arrow()
    assert sorted(zip(data.column("id").to_pylist(), data.column("name").to_pylist(), strict=True)) == \
        sorted((i, name) for _, i, name in written.elements())


def test_an_eventual_log_gives_rows_before_their_snapshot(catalog: strata.Catalog, bootstrap: str,
                                                          topic: str) -> None:
    table = log_table(catalog, bootstrap, topic, "eventual")
    written = write_history(table)
    got = list(table.stream(from_snapshot=1, follow=False))
    # an upsert log: no -U
    assert changes(got) == Counter(c for c in written if c[0] != "-U")
    assert applied(got) == table_rows(table)

    stream = iter(table.stream(poll_interval=0.05))  # from now on
    writer = table.new_write("late")
    writer.write_arrow(rows(range(100, 110), "c"))
    messages = writer.prepare_commit()  # produced, not committed: no snapshot holds them yet
    table.write(rows(range(200, 210), "s"))  # committed after them, in both buckets
    seen: list[pa.RecordBatch] = []
    sentinels = Counter(("+I", i, f"s{i}") for i in range(200, 210))
    while not changes(seen) >= sentinels:  # a partition's records come in order: the earlier ones are in
        seen.append(next(stream))
    assert changes(seen) == sentinels + Counter(("+I", i, f"c{i}") for i in range(100, 110))
    table.new_commit("late").commit(messages, 1)
    writer.close()


def test_the_consumer_position_follows_the_log_and_resumes_after_expiry(
        catalog: strata.Catalog, bootstrap: str, topic: str) -> None:
    table = log_table(catalog, bootstrap, topic, "transactional")
    written = write_history(table)  # snapshots 1..3
    stream = iter(table.stream(from_snapshot=2, consumer_id="mirror", poll_interval=0.05))
    expected = Counter(written[20:])
    seen: list[pa.RecordBatch] = []
    # a key's -U comes before its +U in its partition: waiting for all but the -U waits for it too
    while not changes(seen) >= Counter(c for c in written[20:] if c[0] != "-U"):
        seen.append(next(stream))
    assert changes(seen) == expected
    assert table.consumers.consumer("mirror") in (None, 2, 3)  # snapshot 3's records not all asked past
    table.write(rows(range(40, 45), "d"))  # snapshot 4
    first = next(stream)  # asking for more: snapshots 2 and 3 are read
    assert table.consumers.consumer("mirror") == 4
    assert set(changes([first])) <= {("+I", i, f"d{i}") for i in range(40, 45)}
    table.write(rows(range(50, 53), "e"))  # snapshot 5
    table.expire_snapshots(retain_min=1, retain_max=1)
    assert table.snapshot_manager.earliest_id() == 4  # kept for the consumer: 3 and its offsets are gone

    resumed = table.stream(consumer_id="mirror", follow=False)
    got = list(resumed)  # snapshot 4 from the files, then the log from its offsets
    assert changes(got) == Counter([*(("+I", i, f"d{i}") for i in range(40, 45)),
                                    *(("+I", i, f"e{i}") for i in range(50, 53))])
    assert table.consumers.consumer("mirror") == 6


def test_a_stream_whose_log_records_are_gone_reads_the_files(catalog: strata.Catalog, bootstrap: str,
                                                              topic: str) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    from strata.log import LogOffsetsLostWarning, fallback_count

    table = log_table(catalog, bootstrap, topic, "transactional")
    write_history(table)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "x", "log_level": 3})
    ends = [TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1])
            for p in range(2)]
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})  # alive until its answers came
    for future in admin.delete_records(ends).values():
        future.result(30)  # as retention would

    before = fallback_count()
    with pytest.warns(LogOffsetsLostWarning):
        got = list(table.stream(from_snapshot=2, consumer_id="mirror", follow=False))
    assert fallback_count() == before + 1
    assert changes(got) == changes(list(table.stream(from_snapshot=2, follow=False, log=False)))
    assert table.consumers.consumer("mirror") == 4
