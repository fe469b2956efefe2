"""Offset planning of the ``strata-kafka`` Spark source (no broker: the pure planning functions)."""

from __future__ import annotations

import pytest

from strata.errors import OptionError
from strata.spark.kafka_source import KafkaPartition, KafkaStreamReader, _admit, consumer_config


def test_admission_shares_the_limit_by_backlog() -> None:
    start = {"t": {"0": 10, "1": 0}}
    end = {"t": {"0": 110, "1": 20}, "u": {"0": 5}}  # backlogs 100, 20, 5 (u: a new topic, from 0)
    assert _admit(start, end, 25) == {"t": {"0": 30, "1": 4}, "u": {"0": 1}}
    assert _admit(start, end, 125) == end  # everything fits: unchanged


def test_partitions_cover_only_new_records() -> None:
    reader = KafkaStreamReader.__new__(KafkaStreamReader)
    parts = reader.partitions({"t": {"0": 5, "1": 7}}, {"t": {"0": 9, "1": 7, "2": 3}})
    assert [(p.topic, p.partition, p.start, p.end) for p in parts if isinstance(p, KafkaPartition)] == [
        ("t", 0, 5, 9), ("t", 2, 0, 3)]


def test_consumer_config_is_read_committed_without_group_commits() -> None:
    config = consumer_config({"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.fetch.max.bytes": "1000"})
    assert config["isolation.level"] == "read_committed" and config["enable.auto.commit"] is False
    assert config["fetch.max.bytes"] == "1000"
    with pytest.raises(OptionError, match=r"kafka\.bootstrap\.servers"):
        consumer_config({"subscribe": "t"})
