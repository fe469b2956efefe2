"""The local Kafka broker (KRaft, one node): real produce/consume and transactions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from strata_platform.services import kafka as broker
from strata_platform.services.base import Service, listening_sockets

pytestmark = pytest.mark.kafka


@pytest.fixture
def topic(kafka: Service) -> Iterator[str]:
    """A fresh 3-partition topic, deleted afterwards."""
    name = f"it-{uuid.uuid4().hex[:12]}"
    broker.create_topics(bootstrap(kafka), {name: 3})
    yield name
    broker.delete_topics(bootstrap(kafka), [name])


def bootstrap(kafka: Service) -> str:
    return kafka.client_env()["STRATA_KAFKA_BOOTSTRAP"]


def test_client_env_points_at_loopback(kafka: Service) -> None:
    assert bootstrap(kafka) == "127.0.0.1:19092"


def test_listens_on_loopback_only(kafka: Service) -> None:
    pid = kafka.running_pid()
    assert pid is not None
    sockets = listening_sockets(pid)
    assert {("127.0.0.1", 19092), ("127.0.0.1", 19093)} <= sockets, sockets
    assert {addr for addr, _ in sockets} == {"127.0.0.1"}, sockets


def test_thousand_messages_round_trip(kafka: Service, topic: str) -> None:
    sent = [f"value-{i}-{uuid.uuid4().hex[:6]}" for i in range(1000)]
    broker.produce(bootstrap(kafka), topic, sent)
    received = broker.consume(bootstrap(kafka), topic, expected=len(sent))
    assert len(received) == 1000
    assert sorted(received) == sorted(sent)
    # reading to the end again yields exactly the same records, no more
    assert sorted(broker.consume(bootstrap(kafka), topic)) == sorted(sent)


def test_read_committed_hides_aborted_transaction(kafka: Service) -> None:
    name = f"it-tx-{uuid.uuid4().hex[:12]}"
    broker.create_topics(bootstrap(kafka), {name: 1})
    try:
        committed, aborted = broker.transactional_produce(bootstrap(kafka), name, n=25)
        seen_committed = broker.consume(bootstrap(kafka), name, isolation="read_committed")
        seen_uncommitted = broker.consume(bootstrap(kafka), name, isolation="read_uncommitted")
    finally:
        broker.delete_topics(bootstrap(kafka), [name])
    assert seen_committed == committed  # in order, and nothing of the aborted transaction
    # the aborted records did reach the log: a read_uncommitted consumer sees them
    assert sorted(seen_uncommitted) == sorted(committed + aborted)


def test_check_passes(kafka: Service) -> None:
    detail = kafka.check()
    assert "1000/1000" in detail
    assert "read_committed saw 10" in detail


def test_cluster_ids_never_start_with_a_dash() -> None:
    """The storage tool's parser reads a leading '-' as an option; 1 in 64 random ids had one."""
    import base64

    ids = [broker.new_cluster_id() for _ in range(5000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(base64.urlsafe_b64decode(i + "==")) == 16 for i in ids)
    assert len(set(ids)) == len(ids)
