"""Faults of the Kafka log store against the real broker: the crash gap between "snapshot
published" and "Kafka transaction committed", a broker restart in the middle of a transactional
stream, and a writer process killed with SIGKILL at random points. After each, read_committed
consumers and the hybrid reader see every committed row exactly once (checked against a model).

Run as a script (`python test_log_faults.py child ...`) this module is the writer process of the
SIGKILL test."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa

import strata
from strata.log import HybridReader, LogSystemError, snapshot_log_offsets
from strata.log import kafka as log_kafka
from strata.log import metrics as log_metrics
from strata.snapshot.snapshot import Snapshot

BATCH = 50
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.float64())])
CRASH_ENV = "STRATA_TEST_LOG_CRASH_AFTER_PUBLISH"  # child only: SIGKILL itself after publishing batch N


def batch_rows(identifier: int) -> pa.Table:
    """The rows of commit `identifier`: deterministic, so a restarted writer replays the same."""
    ids = list(range(identifier * BATCH, (identifier + 1) * BATCH))
    return pa.table({"id": ids, "name": [f"r{i}" for i in ids], "amount": [i * 0.5 for i in ids]}, schema=SCHEMA)


def expected_ids(identifiers: range) -> Counter[int]:
    return Counter(i for n in identifiers for i in range(n * BATCH, (n + 1) * BATCH))


def run_writer(warehouse: str, table_name: str, commit_user: str, last: int) -> None:
    """Commit batches 1..last, resuming after the last identifier this commit user committed."""
    table = strata.load_catalog(warehouse).get_table(table_name)
    done = table.new_commit(commit_user).last_committed_identifier() or 0
    crash_at = int(os.environ.get(CRASH_ENV, "0"))
    if crash_at:
        original = log_kafka.LogCommittable.commit

        def commit_or_die(self: log_kafka.LogCommittable) -> None:
            if table.new_commit(commit_user).last_committed_identifier() == crash_at:
                os.kill(os.getpid(), signal.SIGKILL)  # published, Kafka transaction still open
            original(self)

        log_kafka.LogCommittable.commit = commit_or_die  # type: ignore[method-assign]
    for identifier in range(done + 1, last + 1):
        table.write(batch_rows(identifier), commit_user=commit_user, identifier=identifier)
    log_kafka.close_producers()


if __name__ == "__main__" and sys.argv[1:2] == ["child"]:
    run_writer(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    sys.exit(0)

# -- the tests (pytest) ------------------------------------------------------------------------------
import pytest  # noqa: E402 - the child process above needs no pytest

from strata_platform.services import registry  # noqa: E402

pytestmark = pytest.mark.kafka


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    path = str(tmp_path / "warehouse")
    strata.load_catalog(path).create_database("db")
    return path


def make_table(warehouse: str, bootstrap: str, topics: list[str], pk: bool = True, buckets: int = 2) -> strata.Table:
    topic = f"it-logfault-{uuid.uuid4().hex[:12]}"
    topics.append(topic)
    opts = {"bucket": str(buckets), "log.system": "kafka", "log.kafka.bootstrap-servers": bootstrap,
            "log.kafka.topic": topic, "log.system.auto-register": "true"}
    if not pk:
        opts["bucket-key"] = "id"
    return strata.load_catalog(warehouse).create_table(
        f"db.t_{uuid.uuid4().hex[:8]}", SCHEMA, primary_keys=["id"] if pk else None, options=opts)


def committed_ids(bootstrap: str, topic: str) -> Counter[int]:
    """The ids of every read_committed record of the topic, counted."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    from strata.log.serde import decode_envelope

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"it-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": 3})
    partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out: Counter[int] = Counter()
    done: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while len(done) < len(partitions):
            assert time.monotonic() < deadline, "the topic was not read to its end in 120 s"
            for m in consumer.consume(1000, 1.0):
                err, partition, value = m.error(), m.partition(), m.value()
                assert partition is not None
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, str(err)
                    done.add(partition)
                    continue
                done.discard(partition)
                assert value is not None
                out.update(row["id"] for _kind, row in decode_envelope(value))
    finally:
        consumer.close()
    return out


def latest(table: strata.Table) -> Snapshot:
    snapshot = table.latest_snapshot()
    assert snapshot is not None
    return snapshot


def assert_exactly_once(table: strata.Table, bootstrap: str, topic: str, identifiers: range) -> None:
    """The model: commit n holds rows n*BATCH..; the table, the log (read_committed) and the
    hybrid reader from every snapshot hold each committed row exactly once."""
    expected = expected_ids(identifiers)
    assert Counter(table.to_arrow().column("id").to_pylist()) == expected
    assert committed_ids(bootstrap, topic) == expected
    last = latest(table).id
    for start in sorted({1, last // 2, last}):
        with HybridReader(table, snapshot_id=start) as reader:
            files = Counter(reader.read_snapshot().column("id").to_pylist())
            changes = reader.read_until()
            changes = pa.concat_tables([changes, reader.poll(timeout=2.0)])
            assert not reader.fell_back
            assert set(changes.column("_ROW_KIND").to_pylist()) <= {"+I"}
            assert files + Counter(changes.column("id").to_pylist()) == expected, f"hybrid read from {start}"


def drop_producer_without_commit() -> None:
    """The process is gone: no abort, no commit (the broker decides when the id is reused)."""
    log_kafka._TXN_PRODUCERS.clear()


# -- the crash gap, in process -------------------------------------------------------------------------
@pytest.mark.parametrize("pk", [True, False], ids=["pk", "append"])
def test_commit_published_but_transaction_lost_is_repaired(warehouse, bootstrap, topics, monkeypatch, pk) -> None:
    table = make_table(warehouse, bootstrap, topics, pk=pk)
    table.write(batch_rows(1), commit_user="w", identifier=1)
    # batch 2: the snapshot is published, then the writer "dies" before the Kafka commit
    monkeypatch.setattr(log_kafka.LogCommittable, "commit", lambda self: None)
    table.write(batch_rows(2), commit_user="w", identifier=2)
    monkeypatch.undo()
    drop_producer_without_commit()
    assert committed_ids(bootstrap, topics[0]) == expected_ids(range(1, 2))  # the gap: batch 2 is missing
    assert log_kafka.snapshot_log_transactions(latest(table))

    # the restarted writer (same commit user) repairs batch 2 before its own first transaction
    repaired = log_metrics.get(log_metrics.RECORDS_REPAIRED)
    table.write(batch_rows(3), commit_user="w", identifier=3)
    assert log_metrics.get(log_metrics.RECORDS_REPAIRED) == repaired + BATCH
    assert_exactly_once(table, bootstrap, topics[0], range(1, 4))

    # a second restart finds the repair committed and produces nothing again
    drop_producer_without_commit()
    assert table.write(batch_rows(3), commit_user="w", identifier=3).skipped_as_duplicate
    assert log_metrics.get(log_metrics.RECORDS_REPAIRED) == repaired + BATCH
    assert_exactly_once(table, bootstrap, topics[0], range(1, 4))


def test_replay_of_a_published_commit_repairs_its_log(warehouse, bootstrap, topics, monkeypatch) -> None:
    table = make_table(warehouse, bootstrap, topics)
    table.write(batch_rows(1), commit_user="w", identifier=1)

    def failed(self: log_kafka._TxnProducer) -> None:  # the transaction is lost, e.g. timed out
        self.abort()
        raise LogSystemError("simulated: transaction aborted by the broker")

    monkeypatch.setattr(log_kafka._TxnProducer, "commit", failed)
    # the snapshot is published, so the commit stands: the log's failure (after a repair that
    # failed too) is reported in the result, not raised
    result = table.write(batch_rows(2), commit_user="w", identifier=2)
    assert result.snapshot_ids == [2]
    assert "could not be repaired" in result.callback_failures["log-commit"]
    monkeypatch.undo()
    assert latest(table).commit_identifier == 2
    assert committed_ids(bootstrap, topics[0]) == expected_ids(range(1, 2))
    # the caller retries the commit: a duplicate, whose log is repaired
    assert table.write(batch_rows(2), commit_user="w", identifier=2).skipped_as_duplicate
    assert_exactly_once(table, bootstrap, topics[0], range(1, 3))
    # the hybrid reader starting at the repaired snapshot skips its re-produced records
    with HybridReader(table, snapshot_id=2) as reader:
        assert reader.read_until().num_rows == 0 and reader.poll(timeout=1.0).num_rows == 0
    assert snapshot_log_offsets(latest(table))


# -- a broker restart in the middle of a transactional stream ------------------------------------------
def test_broker_restart_mid_stream(warehouse, bootstrap, topics) -> None:
    table = make_table(warehouse, bootstrap, topics, buckets=3)
    service = registry.get("kafka")
    last, restart_after = 12, 4
    restarted = threading.Event()
    failures: list[str] = []

    def restart() -> None:
        try:
            service.stop()
            time.sleep(1.0)
        finally:
            service.start()  # shared with others: back as soon as possible, left running
            restarted.set()

    restarter: threading.Thread | None = None
    for identifier in range(1, last + 1):
        if identifier == restart_after:
            restarter = threading.Thread(target=restart, daemon=True)
            restarter.start()
        for _attempt in range(10):  # the writer retries the commit (a replay is skipped and repaired)
            try:
                table.write(batch_rows(identifier), commit_user="w", identifier=identifier)
                break
            except LogSystemError as exc:
                failures.append(str(exc))
                time.sleep(1.0)
        else:
            pytest.fail(f"commit {identifier} failed 10 times: {failures[-3:]}")
    assert restarter is not None
    restarter.join(300)
    assert restarted.is_set() and service.is_ready()
    assert_exactly_once(table, bootstrap, topics[0], range(1, last + 1))


# -- a writer process killed with SIGKILL ---------------------------------------------------------------
def start_child(warehouse: str, table: strata.Table, last: int, crash_at: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, CRASH_ENV: str(crash_at)}
    return subprocess.Popen([sys.executable, __file__, "child", warehouse, str(table.identifier), "w", str(last)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def wait_child(proc: subprocess.Popen[bytes], timeout: float = 300) -> int:
    out, _ = proc.communicate(timeout=timeout)
    if proc.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(f"writer exited with {proc.returncode}: {out.decode(errors='replace')[-2000:]}")
    return proc.returncode


def test_writer_killed_between_publish_and_kafka_commit(warehouse, bootstrap, topics) -> None:
    table = make_table(warehouse, bootstrap, topics)
    assert wait_child(start_child(warehouse, table, 6, crash_at=3)) == -signal.SIGKILL
    assert latest(table).commit_identifier == 3  # published; its transaction never committed
    assert committed_ids(bootstrap, topics[0]) == expected_ids(range(1, 3))
    assert wait_child(start_child(warehouse, table, 6)) == 0
    assert_exactly_once(table, bootstrap, topics[0], range(1, 7))


def test_writer_killed_at_random_points(warehouse, bootstrap, topics) -> None:
    table = make_table(warehouse, bootstrap, topics, pk=False)
    rng = random.Random(int(os.environ.get("STRATA_TEST_SEED", "7")))
    last = 40
    # first a crash in the gap between publish and Kafka commit, whatever the machine's speed
    crash_at = (table.new_commit("w").last_committed_identifier() or 0) + 2
    assert wait_child(start_child(warehouse, table, last, crash_at=crash_at)) == -signal.SIGKILL
    for _ in range(3):  # then kills at random moments (a fast writer may finish first: also fine)
        proc = start_child(warehouse, table, last)
        time.sleep(rng.uniform(0.2, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        wait_child(proc)
    assert wait_child(start_child(warehouse, table, last)) == 0
    assert_exactly_once(table, bootstrap, topics[0], range(1, last + 1))
