"""``spark.readStream.format("strata-kafka")``: Kafka topics as a Spark stream, on confluent-kafka.

Spark's own Kafka source needs the spark-sql-kafka jar (from Maven); this Python data source
needs only confluent-kafka. Rows have the columns of Spark's Kafka source: ``key``, ``value``
(binary), ``topic``, ``partition``, ``offset`` and ``timestamp``.

    from strata.spark.kafka_source import register_kafka
    register_kafka(spark)
    df = (spark.readStream.format("strata-kafka").option("kafka.bootstrap.servers", "127.0.0.1:19092")
          .option("subscribe", "shop.orders,shop.items").load())

Offsets are ``{topic: {partition: next offset}}``. The driver plans each micro-batch from the
partitions' end offsets (new partitions of a topic join from their beginning); each Kafka
partition with new records becomes one Spark partition, read by an executor with its own
consumer, assigned (never subscribed: no consumer group, no committed group offsets) and
``isolation.level=read_committed``. A batch's range [start, end) is fixed when planned, so a
re-run of the batch after a restart reads the same records.

Options:
    kafka.bootstrap.servers   required
    subscribe                 topics, comma-separated
    startingOffsets           earliest (default) or latest: where a query without a checkpoint starts
    maxOffsetsPerTrigger      admission control: at most this many offsets per micro-batch, shared
                              over the partitions in proportion to their backlog
    kafka.<key>               any other librdkafka consumer setting (e.g. kafka.security.protocol)
    read.timeout.seconds      a task fails when its partition yields nothing for this long (120)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from strata.errors import OptionError
from strata.spark.options import get_int, normalize
from strata.spark.types import expected_arrow_schema

KAFKA_PREFIX = "kafka."
SCHEMA = "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp"
ROWS_PER_BATCH = 10_000
Offsets = dict[str, dict[str, int]]


def register_kafka(spark: Any) -> None:
    """Make ``format("strata-kafka")`` available in this session (its streaming queries may
    start together: see ``strata.spark.registration``)."""
    from strata.spark.registration import register_data_source

    register_data_source(spark, KafkaDataSource)


def consumer_config(settings: Mapping[str, str]) -> dict[str, Any]:
    """librdkafka settings from the source's options: assign-only, read_committed, no commits."""
    bootstrap = settings.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise OptionError("the strata-kafka source needs the option kafka.bootstrap.servers")
    extra = {k[len(KAFKA_PREFIX):]: v for k, v in settings.items() if k.startswith(KAFKA_PREFIX)}
    return {"group.id": "strata-spark-kafka", "enable.auto.commit": False, "enable.auto.offset.store": False,
            "isolation.level": "read_committed", "auto.offset.reset": "earliest", "log_level": 3, **extra}


def _confluent() -> Any:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover
        raise OptionError("the strata-kafka source needs confluent-kafka: pip install 'strata[kafka]'") from exc
    return confluent_kafka


class KafkaPartition(InputPartition):
    """The records [start, end) of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets and planning on the driver (one long-lived consumer for metadata and watermarks);
    ``read`` on executors."""

    def __init__(self, settings: dict[str, str], schema: StructType) -> None:
        self.settings = settings
        self.config = consumer_config(settings)
        self.topics = [t.strip() for t in settings.get("subscribe", "").split(",") if t.strip()]
        if not self.topics:
            raise OptionError("the strata-kafka source needs the option subscribe (comma-separated topics)")
        self.starting = settings.get("startingoffsets", "earliest").lower()
        if self.starting not in ("earliest", "latest"):
            raise OptionError(f"startingOffsets must be earliest or latest, got {self.starting!r}")
        self.max_offsets = get_int(settings, "maxoffsetspertrigger")
        if self.max_offsets is not None and self.max_offsets < 1:
            raise OptionError("maxOffsetsPerTrigger must be at least 1")
        self.timeout = float(settings.get("read.timeout.seconds", "120"))
        self.target = expected_arrow_schema(schema)
        self.available_now_end: Offsets | None = None
        self._driver_consumer: Any = None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_driver_consumer"] = None
        return state

    # -- driver ----------------------------------------------------------------------------------
    def _consumer(self) -> Any:
        if self._driver_consumer is None:
            self._driver_consumer = _confluent().Consumer(self.config)
        return self._driver_consumer

    def _watermarks(self) -> dict[str, dict[str, tuple[int, int]]]:
        """(low, high) of every partition of the subscribed topics."""
        kafka = _confluent()
        consumer = self._consumer()
        metadata = consumer.list_topics(timeout=30).topics
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for topic in self.topics:
            if topic not in metadata or metadata[topic].error is not None:
                raise OptionError(f"Kafka topic {topic!r} (option subscribe) does not exist on "
                                  f"{self.config['bootstrap.servers']}")
            out[topic] = {str(p): consumer.get_watermark_offsets(kafka.TopicPartition(topic, p), timeout=30,
                                                                 cached=False)
                          for p in sorted(metadata[topic].partitions)}
        return out

    def initialOffset(self) -> dict:
        pick = 1 if self.starting == "latest" else 0
        return {t: {p: marks[pick] for p, marks in parts.items()} for t, parts in self._watermarks().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_offsets) if self.max_offsets is not None else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.available_now_end = self._ends()

    def _ends(self) -> Offsets:
        return {t: {p: high for p, (_, high) in parts.items()} for t, parts in self._watermarks().items()}

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        start = start or {}
        ends = self.available_now_end or self._ends()
        out: Offsets = {}
        for topic, parts in ends.items():
            known = start.get(topic, {})
            # a partition added to the topic joins from its beginning; a position never moves back
            out[topic] = {p: max(high, known.get(p, 0)) for p, high in parts.items()}
            out[topic].update({p: pos for p, pos in known.items() if p not in parts})
        if isinstance(limit, ReadMaxRows):
            out = _admit(start, out, limit.max_rows)
        return out

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        out: list[InputPartition] = []
        for topic, parts in end.items():
            for p, stop in parts.items():
                first = start.get(topic, {}).get(p, 0)
                if stop > first:
                    out.append(KafkaPartition(topic, int(p), first, stop))
        return out

    def commit(self, end: dict) -> None:
        """Progress lives in Spark's checkpoint; nothing is committed to Kafka."""

    def stop(self) -> None:
        if self._driver_consumer is not None:
            self._driver_consumer.close()
            self._driver_consumer = None

    # -- executors -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaPartition):
            return
        kafka = _confluent()
        consumer = kafka.Consumer(self.config)
        try:
            consumer.assign([kafka.TopicPartition(partition.topic, partition.partition, partition.start)])
            yield from self._read_range(consumer, partition)
        finally:
            consumer.close()

    def _read_range(self, consumer: Any, part: KafkaPartition) -> Iterator[pa.RecordBatch]:
        kafka = _confluent()
        columns: tuple[list[Any], ...] = ([], [], [], [])  # key, value, offset, timestamp
        position, last_progress = part.start, time.monotonic()
        while position < part.end:
            messages = consumer.consume(min(ROWS_PER_BATCH, part.end - position), timeout=1.0)
            for m in messages:
                if m.error() is not None:
                    if m.error().code() == kafka.KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"reading Kafka {part.topic}[{part.partition}]: {m.error()}")
                if m.offset() >= part.end:
                    position = part.end
                    break
                stamp_type, stamp = m.timestamp()
                values = (m.key(), m.value(), m.offset(), stamp if stamp_type else None)
                for column, v in zip(columns, values, strict=True):
                    column.append(v)
                position = m.offset() + 1
            if messages:
                last_progress = time.monotonic()
            else:  # control records (transaction markers) and aborted records advance the position only
                position = max(position, _position(consumer, kafka, part))
                if position < part.end and time.monotonic() - last_progress > self.timeout:
                    raise RuntimeError(f"Kafka {part.topic}[{part.partition}] yielded nothing for {self.timeout:.0f}s "
                                       f"at offset {position} (the batch reads up to {part.end}); "
                                       "option read.timeout.seconds")
            if len(columns[0]) >= ROWS_PER_BATCH or (position >= part.end and columns[0]):
                yield self._batch(part, columns)
                columns = ([], [], [], [])

    def _batch(self, part: KafkaPartition, columns: tuple[list[Any], ...]) -> pa.RecordBatch:
        keys, values, offsets, stamps = columns
        n = len(offsets)
        arrays = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                  pa.repeat(pa.scalar(part.topic), n), pa.repeat(pa.scalar(part.partition, pa.int32()), n),
                  pa.array(offsets, pa.int64()),
                  pa.array(stamps, pa.int64()).cast(pa.timestamp("ms")).cast(pa.timestamp("us", tz="UTC"))]
        return pa.RecordBatch.from_arrays([a.cast(f.type) for a, f in zip(arrays, self.target, strict=True)],
                                          schema=self.target)


def _position(consumer: Any, kafka: Any, part: KafkaPartition) -> int:
    found = consumer.position([kafka.TopicPartition(part.topic, part.partition)])
    offset = found[0].offset if found else -1
    return int(offset) if offset is not None and offset >= 0 else part.start


def _admit(start: dict, end: Offsets, max_offsets: int) -> Offsets:
    """`end` cut so that at most `max_offsets` offsets are read, each partition's share in
    proportion to its backlog (at least one offset for a partition with a backlog)."""
    backlog = {(t, p): stop - start.get(t, {}).get(p, 0) for t, parts in end.items() for p, stop in parts.items()}
    total = sum(b for b in backlog.values() if b > 0)
    if total <= max_offsets:
        return end
    out: Offsets = {t: dict(parts) for t, parts in end.items()}
    for (t, p), b in backlog.items():
        if b > 0:
            out[t][p] = start.get(t, {}).get(p, 0) + max(1, b * max_offsets // total)
    return out


class KafkaDataSource(DataSource):
    """The ``strata-kafka`` format (streaming reads only)."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.settings = normalize(options)

    @classmethod
    def name(cls) -> str:
        return "strata-kafka"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.settings, schema)
