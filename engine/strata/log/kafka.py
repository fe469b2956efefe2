"""The Kafka log store: a topic per table, Kafka partition = bucket, one transaction per commit.

Writing (`LogWriter`, owned by a TableWrite):
  * transactional (default): the first row of a commit begins a Kafka transaction on a producer
    whose `transactional.id` is stable for (table, commit user, writer id), so a restarted writer
    fences its predecessor and its open transaction is aborted by the broker. `prepare()` flushes
    and hands a `LogCommittable` (the per-bucket end offsets) to the commit messages.
  * eventual: rows are produced at once by an idempotent producer (upsert log, PK tables only).

Committing (`LogCommit`, driven by TableCommit): the snapshot records, per bucket, the offset up
to which the log is complete (`log.offsets`, merged with the previous snapshot's) and, per
transaction, its end offsets (`log.transactions`: {transactional id: {partition: end}}); the
Kafka transaction commits only after the snapshot is published (retrying while the broker is
unreachable); a failed file-store commit aborts it.

The crash gap and its repair. Between "snapshot N published" and "transaction committed" a writer
can die (or the commit can fail for good), and the broker then aborts the transaction: N's rows
are in the table but not in the log. The repair restores exactly-once for read_committed readers:
  1. When: (a) a process first uses a transactional id for a commit user (a restarted writer:
     `LogWriter` runs it before its first transaction), (b) a replayed commit is skipped as a
     duplicate, (c) committing the transaction failed after the snapshot was published.
  2. Which snapshot: the newest non-COMPACT snapshot of that commit user (b: with that identifier)
     whose `log.transactions` names our transactional id. A writer runs one transaction at a time,
     so only that commit can be incomplete.
  3. Fence first: a fresh producer's `init_transactions` fences the old incarnation and makes the
     broker decide its transaction (commit if it was being committed, else abort).
  4. Check: a read_committed consumer waits until the partition's last stable offset passes the
     records, then looks at the transaction's last record (offset end-1 of one partition): visible
     means committed. Else it scans those partitions after `end` for a committed record with the
     header `strata.repair` = "<N> <transactional id>" (an earlier repair that did commit).
  5. Repair: N's delta files (the rows the commit added, with their row kinds, per bucket) are
     produced again in a new transaction, every record carrying that header, and committed.
     Transactions are atomic, so the repair is all-or-nothing and step 4 makes it idempotent.
Consequences: a repaired commit's records sit after N's recorded offsets, so the hybrid reader
skips `strata.repair` records of snapshots <= its start snapshot (its files hold them) and
delivers the others; within one flush the files hold the changes of a key merged, so a repair
re-produces that merged form (same effect on the table's state). A transaction that shares a
partition with another transaction of the same commit cannot be told apart in the files: that
case raises `LogSystemError` instead of guessing.
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
from strata.log.options import (
    LOG_OFFSETS_PROPERTY,
    LOG_TRANSACTIONS_PROPERTY,
    REPAIR_HEADER,
    LogOptions,
    log_enabled,
    log_options,
)
from strata.log.serde import KIND_NAMES, encode_keys, encode_values
from strata.store import FileStore, HasStore, store_of

if TYPE_CHECKING:
    from strata.operation.commit import CommitResult
    from strata.snapshot.snapshot import Snapshot

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
        self.timeout = opts.transaction_timeout_ms / 1000  # how long to ride over a broker outage
        self.producer = _kafka().Producer(config)
        _retry_while_retriable(self.producer.init_transactions, self.timeout,
                               f"initializing log transactions of {transactional_id}")
        self.state = "idle"  # idle | open | prepared
        self.owner: object | None = None  # the LogWriter of the current transaction
        self.lock = threading.RLock()
        self.recovered = False  # the repair of this identity's last commit ran (see the module doc)

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
            deadline = time.monotonic() + self.timeout
            while True:  # retriable errors (broker unreachable, coordinator moving) until the deadline
                try:
                    self.producer.commit_transaction(max(1.0, min(30.0, deadline - time.monotonic())))
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
                    if not err.retriable() or time.monotonic() > deadline:
                        self.state = "unknown"  # only a fresh producer (fencing this one) can tell
                        break
                    log.warning("log transaction %s: commit retried: %s", self.transactional_id, err)
            raise LogSystemError(f"log transaction {self.transactional_id} could not be committed: {last}")

    def abort(self) -> None:
        with self.lock:
            if self.state in ("idle", "unknown"):
                return
            try:
                self.producer.abort_transaction(30)
                metrics.inc(metrics.TRANSACTIONS_ABORTED)
                metrics.engine("log_transaction", self.table, False)
            finally:
                self.state = "idle"


def _retry_while_retriable(call: Any, timeout: float, what: str) -> None:
    """Run `call(remaining seconds)` again on retriable Kafka errors until `timeout` passes."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            call(max(1.0, min(30.0, deadline - time.monotonic())))
            return
        except _kafka().KafkaException as exc:
            err = exc.args[0]
            if not err.retriable() or time.monotonic() > deadline:
                raise LogSystemError(f"{what} failed: {err}") from exc
            log.warning("%s: retrying after %s", what, err)


def _txn_producer(opts: LogOptions, transactional_id: str, fresh: bool = False) -> _TxnProducer:
    """The process's producer of a transactional id; `fresh` replaces it by a new one, whose
    `init_transactions` fences the old one and makes the broker decide its transaction."""
    key = (opts.bootstrap, transactional_id)
    with _registry_lock:
        producer = _TXN_PRODUCERS.get(key)
        if producer is None or fresh:
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


def _log_rows(opts: LogOptions, rows: pa.Table, kinds: np.ndarray | None) -> tuple[pa.Table, np.ndarray | None]:
    """The rows the log carries: no -U in upsert mode, no -D with log.ignore-delete."""
    if kinds is None:
        return rows, kinds
    keep = np.ones(len(kinds), dtype=bool)
    if opts.changelog_mode == "upsert":
        keep &= kinds != 1
    if opts.ignore_delete:
        keep &= kinds != 3
    if keep.all():
        return rows, kinds
    return rows.filter(pa.array(keep)), kinds[keep]


def _produce(producer: Any, topic: str, partition: int, keys: list[bytes] | None, values: list[bytes],
             on_delivery: Any, every: bool, headers: list[tuple[str, bytes]] | None = None) -> None:
    """Produce records into one partition; `on_delivery` reports every record or only the last."""
    produce = producer.produce
    last = len(values) - 1
    extra = {} if headers is None else {"headers": headers}
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else None
        callback = on_delivery if every or i == last else None
        while True:
            try:
                if callback is None and headers is None:
                    produce(topic, value, key, partition)
                else:
                    produce(topic, value, key, partition, on_delivery=callback, **extra)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
    producer.poll(0)


class LogWriter:
    """Produces the rows of one TableWrite into the table's topic (partition = bucket)."""

    def __init__(self, table: FileStore | HasStore, commit_user: str | None = None):
        self.table = table = store_of(table)
        self.opts = log_options(table)
        ensure_topic(self.opts)
        self.named_user = commit_user is not None  # only a named user can have an earlier incarnation
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
        rows, kinds = _log_rows(self.opts, rows, kinds)
        if rows.num_rows == 0:
            return
        values = encode_values(rows, kinds)
        keys = encode_keys(rows, self.opts.key_fields)
        if self.transactional_id is not None:
            if self._txn is None:
                self._txn = self._begin(self.transactional_id)
            producer = self._txn.producer
        else:
            producer = _eventual_producer(self.opts)
        # transactional: delivery failures fail the transaction's commit, so only the last record
        # of a batch reports (its offset is the batch's end); eventual: every record reports
        _produce(producer, self.opts.topic, max(bucket, 0), keys, values, self._delivered,
                 every=self.transactional_id is None)
        self._records += len(values)

    def _begin(self, transactional_id: str) -> _TxnProducer:
        txn = _txn_producer(self.opts, transactional_id)
        if txn.state == "prepared" and txn.owner is self:
            raise LogSystemError(
                f"writer of table {self.opts.table} prepared a commit that is not committed yet: commit "
                "its messages before writing more (one log transaction per writer at a time)")
        if txn.state == "unknown" or (not txn.recovered and self.named_user):
            # a restarted writer, or one whose last commit failed: first complete that commit's log
            txn = repair_commit_log(self.table, self.commit_user, fresh=txn.state == "unknown") or txn
        txn.recovered = True
        txn.begin()
        txn.owner = self
        return txn

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


def snapshot_log_transactions(snapshot: Snapshot | None) -> dict[str, dict[int, int]]:
    """The transactions a snapshot's commit wrote: {transactional id: {partition: end offset}}."""
    if snapshot is None or not snapshot.properties:
        return {}
    text = snapshot.properties.get(LOG_TRANSACTIONS_PROPERTY)
    if not text:
        return {}
    return {txn: {int(p): int(e) for p, e in ends.items()} for txn, ends in json.loads(text).items()}


class LogCommit:
    """One commit of a table with a log store: records offsets in the snapshot, then finishes
    (commits or aborts) the Kafka transactions of the messages."""

    def __init__(self, committables: Iterable[LogCommittable], table: FileStore | None = None,
                 commit_user: str = "", identifier: int | None = None):
        self.table = table
        self.commit_user = commit_user
        self.identifier = identifier
        unique: dict[str, LogCommittable] = {}
        for c in committables:
            unique.setdefault(c.id, c)
        self.committables = list(unique.values())
        offsets: dict[int, int] = {}
        for c in self.committables:
            offsets = merge_offsets(offsets, c.offsets)
        self.offsets = offsets

    def snapshot_properties(self, latest: Snapshot | None, properties: dict[str, str] | None) -> dict[str, str]:
        """The properties of the snapshot built on `latest`: its log offsets, carried forward, and
        the end offsets of this commit's transactions (what a repair checks)."""
        out = dict(properties or {})
        out[LOG_OFFSETS_PROPERTY] = offsets_property(merge_offsets(snapshot_log_offsets(latest), self.offsets))
        txns = {c.transactional_id: {str(p): e for p, e in sorted(c.offsets.items())}
                for c in self.committables if c.transactional_id is not None and c.offsets}
        if txns:
            out[LOG_TRANSACTIONS_PROPERTY] = json.dumps(txns, sort_keys=True, separators=(",", ":"))
        else:
            out.pop(LOG_TRANSACTIONS_PROPERTY, None)
        return out

    def finish(self, result: CommitResult) -> None:
        if result.skipped_as_duplicate:
            for c in self.committables:
                c.abort()  # the data is already in the table; its log is checked (and repaired) below
            if self.table is not None:
                repair_commit_log(self.table, self.commit_user, self.identifier)
            return
        failed: list[LogSystemError] = []
        for c in self.committables:
            try:
                c.commit()
            except LogSystemError as exc:
                failed.append(exc)
        if failed:  # the snapshot is published: its records must reach the log all the same
            if self.table is None:
                raise failed[0]
            try:
                repair_commit_log(self.table, self.commit_user, self.identifier, fresh=True)
            except LogSystemError as exc:
                raise LogSystemError(
                    f"snapshot {result.snapshot_ids} of table {self.table.identifier} is published but its log "
                    f"transaction failed ({failed[0]}) and could not be repaired yet ({exc}); the next writer "
                    f"of commit user {self.commit_user!r} repairs it") from exc

    def fail(self) -> None:
        for c in self.committables:
            try:
                c.abort()
            except Exception:
                log.warning("aborting log transaction %s failed", c.transactional_id, exc_info=True)


def log_commit_for(table: FileStore | HasStore, messages: Iterable[Any], commit_user: str,
                   identifier: int) -> LogCommit | None:
    """The log side of a commit, or None for tables without a log store."""
    table = store_of(table)
    if not log_enabled(table):
        return None
    return LogCommit((m.log for m in messages if getattr(m, "log", None) is not None), table, commit_user,
                     identifier)


# -- repairing the crash gap (see the module docstring) -----------------------------------------
def repair_commit_log(table: FileStore | HasStore, commit_user: str, identifier: int | None = None,
                      fresh: bool = False) -> _TxnProducer | None:
    """Make the log of `commit_user`'s latest commit (or the one with `identifier`) complete:
    re-produce its rows if its transaction never committed. Returns the (fenced, idle) producer
    of the commit user's transactional id, or None when there is nothing of ours to check."""
    table = store_of(table)
    opts = log_options(table)
    if not opts.transactional:
        return None
    transactional_id = opts.transactional_id(commit_user)
    snapshot = _commit_snapshot(table, commit_user, identifier)
    ends = snapshot_log_transactions(snapshot).get(transactional_id) if snapshot is not None else None
    if snapshot is None or not ends:
        return None
    # a fresh producer (or the first of this process) fences any earlier incarnation, so the
    # broker has decided that commit's transaction before we look
    txn = _txn_producer(opts, transactional_id, fresh=fresh)
    if txn.state != "idle":  # a transaction in flight: only a fresh producer makes its outcome final
        txn = _txn_producer(opts, transactional_id, fresh=True)
    with txn.lock:
        if _log_complete(opts, snapshot.id, transactional_id, ends, txn.timeout):
            return txn
        _check_separable(snapshot, transactional_id, ends)
        count = _reproduce(table, opts, snapshot.id, transactional_id, txn, set(ends))
        log.warning("table %s: re-produced %d log record(s) of snapshot %d (transaction %s never committed)",
                    opts.table, count, snapshot.id, transactional_id)
        metrics.inc(metrics.RECORDS_REPAIRED, count)
    return txn


def _commit_snapshot(table: FileStore, commit_user: str, identifier: int | None) -> Snapshot | None:
    """The newest non-COMPACT snapshot of the commit user (with that identifier, if given)."""
    manager = table.snapshot_manager
    latest, earliest = manager.latest_id(), manager.earliest_id()
    if latest is None or earliest is None:
        return None
    for sid in range(latest, earliest - 1, -1):
        try:
            snap = manager.snapshot(sid)
        except KeyError:
            continue
        if snap.commit_user != commit_user or snap.commit_kind == "COMPACT":
            continue
        if identifier is None or snap.commit_identifier == identifier:
            return snap
        if snap.commit_identifier < identifier:
            return None
    return None


def _check_separable(snapshot: Snapshot, transactional_id: str, ends: Mapping[int, int]) -> None:
    shared = {p for other, e in snapshot_log_transactions(snapshot).items() if other != transactional_id
              for p in e if p in ends}
    if shared:
        raise LogSystemError(
            f"snapshot {snapshot.id}: log transaction {transactional_id} never committed, and it shares log "
            f"partition(s) {sorted(shared)} with other transactions of the same commit, so its rows cannot be "
            "told apart in the files; replay the commit from its source")


def _log_complete(opts: LogOptions, snapshot_id: int, transactional_id: str, ends: Mapping[int, int],
                  timeout: float) -> bool:
    """Did the transaction commit, or did a repair of it? (read_committed, after the LSO passed it)"""
    consumer = _kafka().Consumer({"bootstrap.servers": opts.bootstrap, "group.id": f"strata-repair-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "enable.partition.eof": True, **_QUIET})
    try:
        stable = _wait_stable(consumer, opts, ends, timeout)
        first = min(ends)
        if _first_offset(consumer, opts.topic, first, ends[first] - 1, stable[first]) == ends[first] - 1:
            return True
        marker = f"{snapshot_id} {transactional_id}".encode()
        return any(_has_repair(consumer, opts.topic, p, ends[p], stable[p], marker) for p in sorted(ends))
    finally:
        consumer.close()


def _wait_stable(consumer: Any, opts: LogOptions, ends: Mapping[int, int], timeout: float) -> dict[int, int]:
    """Wait until each partition's last stable offset reaches its high watermark as of now
    (transaction markers are written asynchronously); returns those offsets."""
    from confluent_kafka import TopicPartition

    uncommitted = _kafka().Consumer({"bootstrap.servers": opts.bootstrap, "group.id": "strata-repair",
                                     "isolation.level": "read_uncommitted", **_QUIET})
    try:
        targets = {p: max(end, uncommitted.get_watermark_offsets(TopicPartition(opts.topic, p), timeout=30)[1])
                   for p, end in ends.items()}
    finally:
        uncommitted.close()
    deadline = time.monotonic() + timeout
    stable: dict[int, int] = {}
    for p, target in targets.items():
        while True:
            stable[p] = consumer.get_watermark_offsets(TopicPartition(opts.topic, p), timeout=30)[1]
            if stable[p] >= target:
                break
            if time.monotonic() > deadline:
                raise LogSystemError(f"log topic {opts.topic!r} partition {p}: the last stable offset stays at "
                                     f"{stable[p]} < {target} (an open transaction of another writer?)")
            time.sleep(0.1)
    return stable


def _scan(consumer: Any, topic: str, partition: int, start: int, stop: int) -> Iterable[Any]:
    """The committed records of one partition in [start, stop)."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= stop:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    while True:
        for m in consumer.consume(10_000, 1.0):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise LogSystemError(f"reading log topic {topic!r} partition {partition}: {err}")
            if m.offset() >= stop:
                return
            yield m
            if m.offset() + 1 >= stop:
                return


def _first_offset(consumer: Any, topic: str, partition: int, start: int, stop: int) -> int | None:
    for m in _scan(consumer, topic, partition, start, stop):
        return int(m.offset())
    return None


def _has_repair(consumer: Any, topic: str, partition: int, start: int, stop: int, marker: bytes) -> bool:
    return any((REPAIR_HEADER, marker) in (m.headers() or ()) for m in _scan(consumer, topic, partition, start, stop))


def _reproduce(table: FileStore, opts: LogOptions, snapshot_id: int, transactional_id: str, txn: _TxnProducer,
               partitions: set[int]) -> int:
    """Produce the rows snapshot `snapshot_id` added to these buckets again, in one transaction."""
    import pyarrow.compute as pc

    from strata.scan.planner import TableScan
    from strata.table.read import TableRead

    splits = [s for s in TableScan(table).plan_delta(snapshot_id) if max(s.bucket, 0) in partitions]
    read = TableRead(table)
    headers = [(REPAIR_HEADER, f"{snapshot_id} {transactional_id}".encode())]
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    txn.begin()
    count = 0
    for split in splits:
        data = read.to_arrow([split])
        kind_column = data.column(0)
        kinds = pc.index_in(kind_column, value_set=pa.array(KIND_NAMES)).to_numpy(zero_copy_only=False)
        rows, codes = _log_rows(opts, data.drop_columns([data.column_names[0]]), kinds.astype(np.int8))
        if rows.num_rows:
            _produce(txn.producer, opts.topic, max(split.bucket, 0), encode_keys(rows, opts.key_fields),
                     encode_values(rows, codes), delivered, every=False, headers=headers)
            count += rows.num_rows
    remaining = txn.producer.flush(txn.timeout)
    if remaining or errors:
        txn.abort()
        raise LogSystemError(f"re-producing the log of snapshot {snapshot_id} of {opts.table}: {remaining} "
                             f"record(s) pending, errors {errors[:3]}")
    txn.commit()
    return count
