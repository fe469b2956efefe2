"""The Kafka log store: a topic per table, Kafka partition = bucket, one transaction per commit.

Writing (`LogWriter`, owned by a TableWrite):
  * transactional (default): the first row of a commit begins a Kafka transaction on a producer
    whose `transactional.id` is stable for (table, commit user, writer id), so a restarted writer
    fences its predecessor and its open transaction is aborted by the broker. `prepare()` flushes
    and hands a `LogCommittable` (the per-bucket end offsets) to the commit messages.
  * eventual: rows are produced at once by an idempotent producer (upsert log, PK tables only).

Committing (`LogCommit`, driven by TableCommit): the snapshot records, per bucket, the offset up
to which the log is complete (`log.offsets`, merged with the previous snapshot's); the Kafka
transaction commits only after the snapshot is published; a failed commit aborts it, and so does
a replayed commit that the file store skips as a duplicate.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from strata.errors import StrataError
from strata.log import metrics
from strata.log.options import LOG_OFFSETS_PROPERTY, LogOptions, log_enabled, log_options
from strata.log.serde import encode_keys, encode_values

if TYPE_CHECKING:
    from strata.operation.commit import CommitResult
    from strata.snapshot.snapshot import Snapshot
    from strata.table.table import Table

log = logging.getLogger(__name__)
_QUIET = {"log_level": 3}
_registry_lock = threading.Lock()
_TOPICS: set[tuple[str, str]] = set()
_TXN_PRODUCERS: dict[tuple[str, str], _TxnProducer] = {}
_EVENTUAL_PRODUCERS: dict[tuple[str, str], Any] = {}


class LogSystemError(StrataError):
    """The Kafka log store failed (topic missing, delivery failed, transaction not committed)."""


def _kafka() -> Any:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover
        raise LogSystemError("log.system=kafka needs confluent-kafka: pip install 'strata[kafka]'") from exc
    return confluent_kafka


# -- topics ---------------------------------------------------------------------------------------
def ensure_topic(opts: LogOptions, timeout: float = 30.0) -> None:
    """The table's topic exists with at least one partition per bucket (created when
    `log.system.auto-register` is true)."""
    if (opts.bootstrap, opts.topic) in _TOPICS:
        return
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": opts.bootstrap, **_QUIET})
    topics = admin.list_topics(timeout=timeout).topics  # all topics: never auto-creates one
    if opts.topic not in topics:
        if not opts.auto_register:
            raise LogSystemError(
                f"log topic {opts.topic!r} of table {opts.table} does not exist on {opts.bootstrap}: "
                f"create it with {opts.partitions} partition(s) or set log.system.auto-register=true")
        futures = admin.create_topics([NewTopic(opts.topic, num_partitions=opts.partitions,
                                                replication_factor=-1)], operation_timeout=timeout)
        for future in futures.values():
            try:
                future.result(timeout)
            except Exception as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise LogSystemError(f"cannot create log topic {opts.topic!r}: {exc}") from exc
        _wait_for_leaders(admin, opts, timeout)
    else:
        count = len(topics[opts.topic].partitions)
        if count < opts.partitions:
            raise LogSystemError(f"log topic {opts.topic!r} of table {opts.table} has {count} partition(s), "
                                 f"fewer than the table's {opts.partitions} bucket(s)")
    _TOPICS.add((opts.bootstrap, opts.topic))


def _wait_for_leaders(admin: Any, opts: LogOptions, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=5).topics.get(opts.topic)
        if topic is not None and len(topic.partitions) >= opts.partitions \
                and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.1)
    raise LogSystemError(f"log topic {opts.topic!r} has no leaders after {timeout:.0f}s")


# -- producers ------------------------------------------------------------------------------------
def _producer_config(opts: LogOptions) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": opts.bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000,
        "compression.type": "lz4", **_QUIET,
    }
    config.update(opts.client)
    return config


class _TxnProducer:
    """A transactional producer, kept per transactional id for the life of the process (one
    `init_transactions` per writer identity; reused by later writers of the same identity)."""

    def __init__(self, opts: LogOptions, transactional_id: str):
        config = _producer_config(opts)
        config.update({"transactional.id": transactional_id,
                       "transaction.timeout.ms": opts.transaction_timeout_ms})
        self.transactional_id = transactional_id
        self.table = opts.table
        self.producer = _kafka().Producer(config)
        self.producer.init_transactions(30)
        self.state = "idle"  # idle | open | prepared
        self.owner: object | None = None  # the LogWriter of the current transaction
        self.lock = threading.RLock()

    def begin(self) -> None:
        with self.lock:
            if self.state != "idle":
                # an abandoned transaction of this writer identity (messages never committed)
                log.warning("aborting an unfinished log transaction of %s", self.transactional_id)
                self.abort()
            self.producer.begin_transaction()
            self.state = "open"

    def commit(self) -> None:
        with self.lock:
            if self.state == "idle":
                return
            last: Exception | None = None
            for _ in range(3):
                try:
                    self.producer.commit_transaction(30)
                    self.state = "idle"
                    metrics.inc(metrics.TRANSACTIONS_COMMITTED)
                    metrics.engine("log_transaction", self.table, True)
                    return
                except _kafka().KafkaException as exc:
                    last = exc
                    err = exc.args[0]
                    if err.txn_requires_abort():
                        self.abort()
                        break
                    if not err.retriable():
                        self.state = "idle"
                        break
            raise LogSystemError(f"log transaction {self.transactional_id} could not be committed: {last}")

    def abort(self) -> None:
        with self.lock:
            if self.state == "idle":
                return
            try:
                self.producer.abort_transaction(30)
                metrics.inc(metrics.TRANSACTIONS_ABORTED)
                metrics.engine("log_transaction", self.table, False)
            finally:
                self.state = "idle"


def _txn_producer(opts: LogOptions, transactional_id: str) -> _TxnProducer:
    key = (opts.bootstrap, transactional_id)
    with _registry_lock:
        producer = _TXN_PRODUCERS.get(key)
        if producer is None:
            producer = _TXN_PRODUCERS[key] = _TxnProducer(opts, transactional_id)
        return producer


def _eventual_producer(opts: LogOptions) -> Any:
    key = (opts.bootstrap, json.dumps(opts.client, sort_keys=True))
    with _registry_lock:
        producer = _EVENTUAL_PRODUCERS.get(key)
        if producer is None:
            producer = _EVENTUAL_PRODUCERS[key] = _kafka().Producer(_producer_config(opts))
        return producer


def close_producers() -> None:
    """Flush and forget every cached producer (open transactions are aborted)."""
    with _registry_lock:
        for txn in _TXN_PRODUCERS.values():
            try:
                txn.abort()
            except Exception:  # best effort: the broker times the transaction out anyway
                log.debug("abort on close failed", exc_info=True)
        for producer in _EVENTUAL_PRODUCERS.values():
            producer.flush(30)
        _TXN_PRODUCERS.clear()
        _EVENTUAL_PRODUCERS.clear()
        _TOPICS.clear()


# -- writing --------------------------------------------------------------------------------------
@dataclass
class LogCommittable:
    """What one writer produced for one commit: the next offset of each Kafka partition (bucket)."""

    bootstrap: str
    topic: str
    offsets: dict[int, int]
    transactional_id: str | None  # None in eventual mode
    records: int = 0
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def _producer(self) -> _TxnProducer | None:
        if self.transactional_id is None:
            return None
        return _TXN_PRODUCERS.get((self.bootstrap, self.transactional_id))

    def commit(self) -> None:
        producer = self._producer()
        if producer is not None:
            producer.commit()

    def abort(self) -> None:
        producer = self._producer()
        if producer is not None:
            producer.abort()


class LogWriter:
    """Produces the rows of one TableWrite into the table's topic (partition = bucket)."""

    def __init__(self, table: Table, commit_user: str | None = None):
        self.opts = log_options(table)
        ensure_topic(self.opts)
        self.commit_user = commit_user or f"anonymous-{uuid.uuid4().hex}"
        self.transactional_id = self.opts.transactional_id(self.commit_user) if self.opts.transactional else None
        self._txn: _TxnProducer | None = None
        self._ends: dict[int, int] = {}
        self._errors: list[str] = []
        self._records = 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(str(err))
            return
        partition, offset = msg.partition(), msg.offset()
        if offset is not None and offset + 1 > self._ends.get(partition, 0):
            self._ends[partition] = offset + 1

    def write(self, bucket: int, rows: pa.Table, kinds: np.ndarray | None) -> None:
        """Rows of one bucket with their row kind codes (None: inserts)."""
        if kinds is not None:
            keep = np.ones(len(kinds), dtype=bool)
            if self.opts.changelog_mode == "upsert":
                keep &= kinds != 1
            if self.opts.ignore_delete:
                keep &= kinds != 3
            if not keep.all():
                rows, kinds = rows.filter(pa.array(keep)), kinds[keep]
        if rows.num_rows == 0:
            return
        values = encode_values(rows, kinds)
        keys = encode_keys(rows, self.opts.key_fields)
        if self.transactional_id is not None:
            if self._txn is None:
                txn = _txn_producer(self.opts, self.transactional_id)
                if txn.state == "prepared" and txn.owner is self:
                    raise LogSystemError(
                        f"writer of table {self.opts.table} prepared a commit that is not committed yet: commit "
                        "its messages before writing more (one log transaction per writer at a time)")
                txn.begin()
                txn.owner = self
                self._txn = txn
            producer = self._txn.producer
        else:
            producer = _eventual_producer(self.opts)
        self._produce(producer, max(bucket, 0), keys, values)
        self._records += len(values)

    def _produce(self, producer: Any, partition: int, keys: list[bytes] | None, values: list[bytes]) -> None:
        topic, produce, on_delivery = self.opts.topic, producer.produce, self._delivered
        last = len(values) - 1
        # transactional: delivery failures fail the transaction's commit, so only the last record
        # of a batch reports (its offset is the batch's end); eventual: every record reports
        every = self.transactional_id is None
        for i, value in enumerate(values):
            key = keys[i] if keys is not None else None
            callback = on_delivery if every or i == last else None
            while True:
                try:
                    if callback is None:
                        produce(topic, value, key, partition)
                    else:
                        produce(topic, value, key, partition, on_delivery=callback)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)

    def prepare(self) -> LogCommittable | None:
        """Flush; the committable of everything written since the last prepare (None if nothing)."""
        if self._records == 0:
            return None
        producer = self._txn.producer if self._txn is not None else _eventual_producer(self.opts)
        started = time.monotonic()
        remaining = producer.flush(60)
        if remaining or self._errors:
            errors, self._errors = self._errors[:3], []
            if self._txn is not None:
                self._txn.abort()
                self._txn = None
            raise LogSystemError(f"log records of table {self.opts.table} not delivered to {self.opts.topic!r}: "
                                 f"{remaining} pending, errors {errors}")
        committable = LogCommittable(self.opts.bootstrap, self.opts.topic, dict(self._ends),
                                     self.transactional_id, self._records)
        metrics.inc(metrics.RECORDS_PRODUCED, self._records)
        # latency: the flush that waits for the last acknowledgements (records go out as produced)
        metrics.engine("log_produced", self.opts.table, self._records, time.monotonic() - started)
        if self._txn is not None:
            self._txn.state = "prepared"
        self._txn = None
        self._ends, self._records = {}, 0
        return committable

    def close(self) -> None:
        """Abort a transaction with rows that were never prepared (prepared ones await the commit)."""
        if self._txn is not None and self._txn.state == "open":
            self._txn.abort()
        self._txn = None


# -- committing -----------------------------------------------------------------------------------
def snapshot_log_offsets(snapshot: Snapshot | None) -> dict[int, int]:
    """The per-bucket log offsets a snapshot recorded ({} if none)."""
    if snapshot is None or not snapshot.properties:
        return {}
    text = snapshot.properties.get(LOG_OFFSETS_PROPERTY)
    if not text:
        return {}
    return {int(k): int(v) for k, v in json.loads(text).items()}


def merge_offsets(previous: Mapping[int, int], new: Mapping[int, int]) -> dict[int, int]:
    merged = dict(previous)
    for bucket, offset in new.items():
        merged[bucket] = max(offset, merged.get(bucket, 0))
    return merged


def offsets_property(offsets: Mapping[int, int]) -> str:
    return json.dumps({str(k): v for k, v in sorted(offsets.items())}, separators=(",", ":"))


class LogCommit:
    """One commit of a table with a log store: records offsets in the snapshot, then finishes
    (commits or aborts) the Kafka transactions of the messages."""

    def __init__(self, committables: Iterable[LogCommittable]):
        unique: dict[str, LogCommittable] = {}
        for c in committables:
            unique.setdefault(c.id, c)
        self.committables = list(unique.values())
        offsets: dict[int, int] = {}
        for c in self.committables:
            offsets = merge_offsets(offsets, c.offsets)
        self.offsets = offsets

    def snapshot_properties(self, latest: Snapshot | None, properties: dict[str, str] | None) -> dict[str, str]:
        """The properties of the snapshot built on `latest`: its log offsets, carried forward."""
        out = dict(properties or {})
        out[LOG_OFFSETS_PROPERTY] = offsets_property(merge_offsets(snapshot_log_offsets(latest), self.offsets))
        return out

    def finish(self, result: CommitResult) -> None:
        for c in self.committables:
            if result.skipped_as_duplicate:
                c.abort()  # the data is already in the table (and its records in the log)
            else:
                c.commit()

    def fail(self) -> None:
        for c in self.committables:
            try:
                c.abort()
            except Exception:
                log.warning("aborting log transaction %s failed", c.transactional_id, exc_info=True)


def log_commit_for(table: Table, messages: Iterable[Any]) -> LogCommit | None:
    """The log side of a commit, or None for tables without a log store."""
    if not log_enabled(table):
        return None
    return LogCommit(m.log for m in messages if getattr(m, "log", None) is not None)
