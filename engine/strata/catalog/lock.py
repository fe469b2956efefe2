"""A distributed lock in a JDBC database, in Paimon's ``paimon_distributed_locks`` table.

Layout (Paimon's SQLite / PostgreSQL dialects; ``lock_owner`` is the column newer Paimon adds)::

    paimon_distributed_locks(lock_id VARCHAR(255) PRIMARY KEY,
                             acquired_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL,
                             expire_time_seconds BIGINT DEFAULT 0 NOT NULL,
                             lock_owner VARCHAR(36))

* acquire: INSERT the row. On a primary-key violation, DELETE the row if it is stale
  (``now - acquired_at > expire_time_seconds``, by the database's clock) and INSERT again; if it is
  live, someone holds the lock: back off (doubling, with jitter, capped at
  ``lock-check-max-sleep``) and retry until ``lock-acquire-timeout``.
* release: DELETE the row, only if it is still ours (``lock_owner``): a holder whose lease was taken
  over must not free its successor's lock.
* ``lock_id`` = ``"<catalog-key>.<database>.<table>"``, as Paimon's ``JdbcCatalogLock``.

A lease can expire under a holder that stalls (GC pause, suspended VM). The holder keeps a
conservative deadline by its own monotonic clock (from before its INSERT was sent, minus one second
for the database's second-granularity timestamps); ``JdbcLock.valid_for()`` tells a critical
section how long it may still count on exclusivity.

``LockedPublisher`` publishes snapshots under the lock (check-then-put) with the three outcomes of
a commit: the lock database unavailable before the write is "nothing published" (the commit
retries); a failed write is put again under the lock until a PUT answers, and stays ambiguous
only if none does (the committer then reads the snapshot back); a failed release
after a durable write never fails the commit (the lease expires by itself).
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from strata.errors import OptionError, StrataError
from strata.options import parse_duration_ms
from strata.snapshot.snapshot_manager import NothingPublishedError

if TYPE_CHECKING:
    from strata.snapshot.snapshot import Snapshot
    from strata.snapshot.snapshot_manager import SnapshotManager

log = logging.getLogger(__name__)

LOCK_TABLE = "paimon_distributed_locks"

# option -> default, as in Paimon's CatalogOptions; lock.expire-time is Strata's (Paimon writes
# the acquire timeout as the expiry: a crashed holder would block the table for 8 minutes).
LOCK_ACQUIRE_TIMEOUT = ("lock-acquire-timeout", "8 min")
LOCK_CHECK_MAX_SLEEP = ("lock-check-max-sleep", "8 s")
LOCK_EXPIRE_TIME = ("lock.expire-time", "60 s")
LOCK_KEY_MAX_LENGTH = ("lock-key-max-length", "255")
REPUT_ATTEMPTS = 5  # puts of an ambiguously written snapshot, under the lock, before it stays unknown


class LockAcquireTimeoutError(StrataError):
    """The lock stayed held by someone else for the whole ``lock-acquire-timeout``. (Deliberately
    not an OSError: a commit treats those as ambiguous and retries, this one must abort it.)"""


def _duration_ms(options: Mapping[str, str], option: tuple[str, str]) -> int:
    key, default = option
    value = options.get(key, default)
    try:
        return parse_duration_ms(value)
    except ValueError as exc:
        raise OptionError(f"catalog option {key!r}: {exc}") from None


def lock_key_max_length(options: Mapping[str, str]) -> int:
    """The longest lock id the lock table takes (``lock-key-max-length``, Paimon's option)."""
    try:
        return int(options.get(*LOCK_KEY_MAX_LENGTH))
    except ValueError:
        raise OptionError(f"catalog option {LOCK_KEY_MAX_LENGTH[0]!r} must be an integer") from None


def table_lock_id(catalog_key: str, database: str, table: str) -> str:
    """A table's lock id, as Paimon's ``JdbcCatalogLock`` spells it (Java and Python writers of one
    table must take the same row)."""
    return f"{catalog_key}.{database}.{table}"


class _Dialect:
    """The SQL that differs between databases: how old a lock row is, in seconds."""

    def __init__(self, engine: Engine):
        self.name = engine.dialect.name
        if self.name == "postgresql":
            # NOW()/LOCALTIMESTAMP are fixed at transaction start: each statement is its own transaction
            self.age_seconds = "EXTRACT(EPOCH FROM (LOCALTIMESTAMP - acquired_at))"
        elif self.name == "sqlite":
            # CURRENT_TIMESTAMP is UTC text with second precision
            self.age_seconds = "(strftime('%s', 'now') - strftime('%s', acquired_at))"
        else:
            raise OptionError(f"JDBC lock: unsupported database {self.name!r} (use SQLite or PostgreSQL)")

    def create_sql(self, key_max_length: int) -> str:
        return (f"CREATE TABLE {LOCK_TABLE} ("
                f"lock_id VARCHAR({key_max_length}) NOT NULL, "
                "acquired_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP NOT NULL, "
                "expire_time_seconds BIGINT DEFAULT 0 NOT NULL, "
                "lock_owner VARCHAR(36), "
                "PRIMARY KEY (lock_id))")


def ensure_lock_table(engine: Engine, key_max_length: int = 255) -> None:
    """Create the lock table if absent (and add ``lock_owner`` to an older one); race-tolerant."""
    dialect = _Dialect(engine)
    if not inspect(engine).has_table(LOCK_TABLE):
        try:
            with engine.begin() as conn:
                conn.execute(text(dialect.create_sql(key_max_length)))
        except DBAPIError:
            if not inspect(engine).has_table(LOCK_TABLE):  # else: created concurrently
                raise
    columns = {c["name"].lower() for c in inspect(engine).get_columns(LOCK_TABLE)}
    if "lock_owner" not in columns:
        try:
            with engine.begin() as conn:
                conn.execute(text(f"ALTER TABLE {LOCK_TABLE} ADD COLUMN lock_owner VARCHAR(36)"))
        except DBAPIError:
            if "lock_owner" not in {c["name"].lower() for c in inspect(engine).get_columns(LOCK_TABLE)}:
                raise


class JdbcLock:
    """One lock id; a context manager (``with lock: ...``). Not reentrant, not shared by threads."""

    def __init__(self, engine: Engine, lock_id: str, acquire_timeout_ms: int = 8 * 60_000,
                 check_max_sleep_ms: int = 8_000, expire_seconds: int = 60, owner: str | None = None):
        if expire_seconds < 2:
            raise OptionError(f"lock expiry must be at least 2 s, got {expire_seconds} s")
        self.engine = engine
        self.lock_id = lock_id
        self.acquire_timeout_ms = acquire_timeout_ms
        self.check_max_sleep_ms = max(1, check_max_sleep_ms)
        self.expire_seconds = expire_seconds
        self.owner = owner or str(uuid.uuid4())
        self._dialect = _Dialect(engine)
        self._deadline: float | None = None  # monotonic time our lease surely lasts until
        self.attempts = 0

    # -- the SQL -------------------------------------------------------------------------------
    def expire_stale(self) -> int:
        """Delete this lock's row if it outlived its expiry (by the database clock)."""
        with self.engine.begin() as conn:
            result = conn.execute(text(
                f"DELETE FROM {LOCK_TABLE} WHERE lock_id = :id "
                f"AND {self._dialect.age_seconds} > expire_time_seconds"), {"id": self.lock_id})
        if result.rowcount:
            log.warning("lock %s: took over an expired lease", self.lock_id)
        return int(result.rowcount or 0)

    def try_acquire(self) -> bool:
        """One attempt: INSERT our row; if taken, clear it when stale and INSERT once more.
        False if someone holds the lock. (Paimon clears first; inserting first saves the
        uncontended path a round trip.)"""
        self.attempts += 1
        return self._insert() or (self.expire_stale() > 0 and self._insert())

    def _insert(self) -> bool:
        started = time.monotonic()
        try:
            with self.engine.begin() as conn:
                conn.execute(text(
                    f"INSERT INTO {LOCK_TABLE} (lock_id, expire_time_seconds, lock_owner) "
                    "VALUES (:id, :expire, :owner)"),
                    {"id": self.lock_id, "expire": self.expire_seconds, "owner": self.owner})
        except IntegrityError:
            return False
        # second-granularity timestamps can make the database see the row one second older
        self._deadline = started + self.expire_seconds - 1
        return True

    def acquire(self) -> None:
        if self._deadline is not None:
            raise RuntimeError(f"lock {self.lock_id} is already held by this JdbcLock")
        started = time.monotonic()
        sleep_ms = 10.0
        while not self.try_acquire():
            waited_ms = (time.monotonic() - started) * 1000
            if waited_ms >= self.acquire_timeout_ms:
                raise LockAcquireTimeoutError(
                    f"could not acquire lock {self.lock_id!r} in {waited_ms / 1000:.1f} s "
                    f"(option {LOCK_ACQUIRE_TIMEOUT[0]!r}): another writer holds it")
            nap = min(sleep_ms, self.check_max_sleep_ms, self.acquire_timeout_ms - waited_ms)
            time.sleep(max(0.0, nap) * random.uniform(0.5, 1.0) / 1000)
            sleep_ms = min(sleep_ms * 2, self.check_max_sleep_ms)

    def release(self) -> bool:
        """Delete our row; False if it was no longer ours (expired and taken over)."""
        self._deadline = None
        with self.engine.begin() as conn:
            result = conn.execute(text(f"DELETE FROM {LOCK_TABLE} WHERE lock_id = :id AND lock_owner = :owner"),
                                  {"id": self.lock_id, "owner": self.owner})
        if not result.rowcount:
            log.warning("lock %s: released after its lease had expired", self.lock_id)
            return False
        return True

    def valid_for(self) -> float:
        """Seconds the lease surely still lasts (by this process's clock); 0 when not held."""
        if self._deadline is None:
            return 0.0
        return max(0.0, self._deadline - time.monotonic())

    @property
    def held(self) -> bool:
        return self.valid_for() > 0

    def __enter__(self) -> JdbcLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


class JdbcCatalogLock:
    """Builds the per-table locks of one catalog from its options (Paimon's lock options)."""

    def __init__(self, engine: Engine, catalog_key: str, options: Mapping[str, str] | None = None):
        opts = dict(options or {})
        self.engine = engine
        self.catalog_key = catalog_key
        self.acquire_timeout_ms = _duration_ms(opts, LOCK_ACQUIRE_TIMEOUT)
        self.check_max_sleep_ms = _duration_ms(opts, LOCK_CHECK_MAX_SLEEP)
        self.expire_seconds = max(2, -(-_duration_ms(opts, LOCK_EXPIRE_TIME) // 1000))
        self.key_max_length = lock_key_max_length(opts)
        ensure_lock_table(engine, self.key_max_length)

    def lock_id(self, database: str, table: str) -> str:
        lock_id = table_lock_id(self.catalog_key, database, table)
        if len(lock_id) > self.key_max_length:
            raise OptionError(f"lock id {lock_id!r} is longer than {LOCK_KEY_MAX_LENGTH[0]}="
                              f"{self.key_max_length}")
        return lock_id

    def lock(self, database: str, table: str) -> JdbcLock:
        return JdbcLock(self.engine, self.lock_id(database, table), self.acquire_timeout_ms,
                        self.check_max_sleep_ms, self.expire_seconds)


RENAMED_RETRIES = 5  # renames a waiting commit follows to the table's new lock before giving up


class LockedPublisher:
    """Publishes snapshot-N under a table's lock: check that N is absent, write it, release (as
    Paimon's ``RenamingSnapshotCommit``). A publish function for ``FileStoreCommit``: True
    published, False taken (or the lease too short to write safely), NothingPublishedError when
    nothing was written (a check or the lock database failed), OSError when the write stayed
    ambiguous after being put again."""

    def __init__(self, new_lock: Callable[[], JdbcLock], margin_seconds: float,
                 current_lock_id: Callable[[], str] | None = None):
        self.new_lock = new_lock
        self.margin_seconds = margin_seconds  # the lease must outlast the write by this much
        # the lock id guarding the table now: a table renamed while we queued is guarded by its new name's
        self.current_lock_id = current_lock_id

    def __call__(self, manager: SnapshotManager, snapshot: Snapshot) -> bool:
        if self._exists(manager, snapshot):  # already lost: do not queue for the lock to learn it
            return False
        lock = self._acquire(manager, snapshot)
        try:
            # taken meanwhile, or (checked last, after every read) the lease may lapse mid-write:
            # retry with a fresh one
            published = not self._exists(manager, snapshot) and self._write(manager, snapshot, lock)
        except BaseException:
            _release_quietly(lock)
            raise
        # every path that acquired releases here: a lock kept after losing the check would stall
        # every other committer of the table for a whole lease
        if not _release_quietly(lock) and published:
            # the lease lapsed before we released it: another holder may have checked and written
            # N over ours; ours counts only if N still holds it
            return manager.read_back(snapshot)
        return published

    def _write(self, manager: SnapshotManager, snapshot: Snapshot, lock: JdbcLock) -> bool:
        """Publish under the lock. An ambiguous write is settled here, while the lock is held: the
        same bytes are put again until one PUT answers (N was absent at the check, so whatever is
        there is ours). Settling it after the release instead would leave a window in which a
        delayed PUT of ours lands over another committer's snapshot-N."""
        def lease_outlasts_write() -> bool:
            return lock.valid_for() >= self.margin_seconds

        try:
            return manager.publish(snapshot, ready=lease_outlasts_write)
        except OSError as exc:
            ambiguous = exc
        for attempt in range(REPUT_ATTEMPTS):
            time.sleep(min(2.0, 0.1 * 2 ** attempt) * random.uniform(0.5, 1.0))
            if not lease_outlasts_write():
                break  # the lease may lapse mid-write: leave it ambiguous, the committer reads back
            try:
                manager.put_again(snapshot)
                log.info("snapshot %d of %s: ambiguous write settled by writing it again under the lock (%s)",
                         snapshot.id, manager.table_path, ambiguous)
                return True
            except OSError as exc:
                ambiguous = exc
        raise ambiguous

    def _acquire(self, manager: SnapshotManager, snapshot: Snapshot) -> JdbcLock:
        """The table's lock, held. A table renamed while we queued is guarded by its new name's
        lock from then on: that one is taken instead."""
        for _ in range(RENAMED_RETRIES):
            lock: JdbcLock | None = None
            try:
                lock = self.new_lock()
                lock.acquire()
                if self.current_lock_id is None or self.current_lock_id() == lock.lock_id:
                    return lock
            except DBAPIError as exc:
                if lock is not None:
                    _release_quietly(lock)  # the INSERT may have landed and lost its reply
                raise NothingPublishedError(f"snapshot {snapshot.id} of {manager.table_path} not written: the "
                                            f"lock database is unavailable ({type(exc).__name__}: {exc})") from exc
            _release_quietly(lock)
        raise NothingPublishedError(f"snapshot {snapshot.id} of {manager.table_path} not written: the table was "
                                    f"renamed {RENAMED_RETRIES} times while its commit waited for the lock")

    @staticmethod
    def _exists(manager: SnapshotManager, snapshot: Snapshot) -> bool:
        try:
            return manager.exists(snapshot.id)
        except OSError as exc:
            raise NothingPublishedError(f"snapshot {snapshot.id} of {manager.table_path} not written: could not "
                                        f"check whether it exists ({exc})") from exc


def _release_quietly(lock: JdbcLock) -> bool:
    """Release; False if the lease was no longer ours or the database could not be reached (the
    row then expires by itself after ``lock.expire-time``)."""
    try:
        return lock.release()
    except DBAPIError as exc:
        log.warning("lock %s: release failed (%s); the lease expires by itself", lock.lock_id, exc)
        return False
