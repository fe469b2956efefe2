"""A commit has three outcomes: committed, not published (cleanup safe), or unknown
(CommitStateUnknownError, every file kept). Faults are injected deterministically by a FileIO
that fails chosen calls before they take effect (the request never landed) or after (the reply
was lost), in both publish modes: atomic create-if-absent (the filesystem catalog) and
check-then-put under the JDBC lock (a JDBC catalog on SQLite over a store without conditional
PUT). One test drops the reply of a real snapshot PUT on MinIO."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.exc import OperationalError

from strata import metrics
from strata.catalog import lock as lock_module
from strata.catalog.filesystem import FileSystemCatalog
from strata.catalog.jdbc import JdbcCatalog
from strata.catalog.lock import JdbcLock, LockAcquireTimeoutError
from strata.errors import CommitStateUnknownError, CorruptMetadataError, OptionError, SnapshotNotFoundError
from strata.fs import file_io as file_io_module
from strata.fs.file_io import LocalFileIO
from strata.operation.callbacks import CommitCallback
from strata.operation.commit import CommitResult
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.table.table import Table

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
MODES = ("atomic", "lock")
R = TypeVar("R")


@dataclasses.dataclass
class Fault:
    """Fail the next `times` calls of `op` on paths matching `pattern`: "before" the call takes
    effect, or "after" it did (a lost reply). `then` arms more faults when this one fires."""

    op: str
    pattern: str
    when: str = "before"
    times: int = 1
    then: list[Fault] = dataclasses.field(default_factory=list)


class FaultyIO(LocalFileIO):
    """A local FileIO with injected faults. With `check_then_put`, write_new is HEAD-then-PUT and
    the store claims to be an object store without conditional PUT, so a JDBC catalog publishes
    under its lock."""

    def __init__(self, check_then_put: bool = False):
        super().__init__()
        self.check_then_put = check_then_put
        self.faults: list[Fault] = []
        self.fired: list[tuple[str, str, str]] = []  # (op, path, when)
        self.deleted: list[str] = []

    @property
    def is_object_store(self) -> bool:
        return self.check_then_put

    def arm(self, *faults: Fault) -> None:
        self.faults.extend(faults)

    def _fault(self, op: str, path: str) -> str | None:
        for fault in self.faults:
            if fault.op == op and re.search(fault.pattern, path) and fault.times > 0:
                fault.times -= 1
                self.fired.append((op, path, fault.when))
                self.faults.extend(fault.then)
                return fault.when
        return None

    def _run(self, op: str, path: str, call: Callable[[], R]) -> R:
        when = self._fault(op, path)
        if when == "before":
            raise OSError(f"injected: {op} {path} failed before it took effect")
        result = call()
        if when == "after":
            raise OSError(f"injected: the reply of {op} {path} was lost")
        return result

    def write_new(self, path: str, data: bytes) -> bool:
        if self.check_then_put:
            return self._run("write_new", path, lambda: not self.exists(path) and self._put(path, data))
        return self._run("write_new", path, lambda: LocalFileIO.write_new(self, path, data))

    def _put(self, path: str, data: bytes) -> bool:
        LocalFileIO.write_bytes(self, path, data)
        return True

    def write_bytes(self, path: str, data: bytes) -> None:
        self._run("write_bytes", path, lambda: LocalFileIO.write_bytes(self, path, data))

    def read_bytes(self, path: str) -> bytes:
        return self._run("read_bytes", path, lambda: LocalFileIO.read_bytes(self, path))

    def delete(self, path: str) -> None:
        self.deleted.append(path)
        LocalFileIO.delete(self, path)


@pytest.fixture(autouse=True)
def quick_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two read-back attempts instead of six (the backoff between them is what costs time)."""
    monkeypatch.setattr(file_io_module, "READ_BACK_ATTEMPTS", 2)
    monkeypatch.setattr(lock_module, "REPUT_ATTEMPTS", 2)


def unsettled(mode: str, when: str, *then: Fault, snapshot: str = r"/snapshot/snapshot-2$") -> Fault:
    """An ambiguous write of a snapshot (2) that stays ambiguous: under the lock, the committer's
    puts of the same bytes fail too; then `then`."""
    if mode == "lock":
        then = (Fault("write_bytes", snapshot, "before", times=lock_module.REPUT_ATTEMPTS, then=list(then)),)
    return Fault("write_new", snapshot, when, then=list(then))


def open_catalog(mode: str, root: Path, io: FaultyIO) -> FileSystemCatalog | JdbcCatalog:
    warehouse = str(root / "warehouse")
    if mode == "atomic":
        catalog: FileSystemCatalog | JdbcCatalog = FileSystemCatalog(warehouse, file_io=io)
    else:
        catalog = JdbcCatalog(warehouse, {"uri": f"sqlite:///{root}/catalog.sqlite"}, file_io=io)
    catalog.create_database("db", ignore_if_exists=True)
    return catalog


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def io(mode: str) -> FaultyIO:
    return FaultyIO(check_then_put=mode == "lock")


@pytest.fixture
def table(mode: str, io: FaultyIO, tmp_path: Path) -> Table:
    catalog = open_catalog(mode, tmp_path, io)
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "2", "commit.min-retry-wait": "1 ms"})
    if mode == "lock":
        assert table.snapshot_publisher() is not None  # check-then-put under the JDBC lock
    else:
        assert table.snapshot_publisher() is None  # the FileIO's atomic create-if-absent
    return table


def data(ids: list[int] | range, tag: str = "v") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


def prepare(table: Table, batch: pa.Table) -> list:
    with table.new_write() as writer:
        writer.write_arrow(batch)
        return writer.prepare_commit()


def reopened(table: Table) -> Table:
    """A fresh table object over the same files (a restarted writer)."""
    assert isinstance(table.catalog, (FileSystemCatalog, JdbcCatalog))
    return table.catalog.get_table(str(table.identifier))


def ids(table: Table) -> list[int]:
    return sorted(table.to_arrow().column("id").to_pylist())


def snapshot_files(table: Table) -> set[str]:
    return {name for name in os.listdir(table.snapshot_manager.dir) if name.startswith("snapshot-")}


def assert_every_snapshot_readable(table: Table) -> None:
    """Each snapshot's manifest lists, manifests and data files exist, and it reads."""
    manager, store = table.snapshot_manager, table.manifest_store
    for name in sorted(snapshot_files(table)):
        snap = manager.snapshot(int(name.split("-")[1]))
        lists = [snap.base_manifest_list, snap.delta_manifest_list, snap.changelog_manifest_list]
        for manifest_list in filter(None, lists):
            assert os.path.exists(store.path(manifest_list)), f"{name} names a deleted {manifest_list}"
            store.read_entries(store.read_manifest_list(manifest_list))
        if snap.index_manifest:
            assert os.path.exists(store.path(snap.index_manifest)), f"{name} names a deleted index manifest"
        table.to_arrow(snapshot_id=snap.id)


def metric(name: str, **labels: str) -> float:
    if not metrics.ENABLED:
        return 0.0
    import prometheus_client

    return prometheus_client.REGISTRY.get_sample_value(name, labels) or 0.0


SNAPSHOT_2 = r"/snapshot/snapshot-2$"


# -- committed ------------------------------------------------------------------------------------

def test_lost_reply_of_a_landed_snapshot_is_committed(mode: str, table: Table, io: FaultyIO) -> None:
    """Read back (atomic create), or put again while the lock is held (check-then-put)."""
    table.write(data(range(3)))
    io.arm(Fault("write_new", SNAPSHOT_2, "after"))
    result = table.new_commit("job").commit(prepare(table, data([10, 11])), identifier=1)
    assert result.snapshot_ids == [2] and result.attempts == 1 and result.read_backs == (mode == "atomic")
    assert ids(table) == [0, 1, 2, 10, 11]
    assert_every_snapshot_readable(table)
    assert table.snapshot_manager._hint("LATEST") == 2  # the hint follows the read-back


def test_failed_hint_write_never_fails_a_durable_commit(table: Table, io: FaultyIO) -> None:
    table.write(data(range(3)))
    io.arm(Fault("write_bytes", r"/snapshot/LATEST$", "before", times=5))
    result = table.new_commit("job").commit(prepare(table, data([7])), identifier=1)
    assert result.snapshot_ids == [2] and result.read_backs == 0
    assert table.snapshot_manager._hint("LATEST") == 1  # stale: readers probe past it
    assert [s.id for s in table.snapshots()] == [1, 2] and ids(table) == [0, 1, 2, 7]


# -- not published ----------------------------------------------------------------------------------

def test_write_that_never_landed_is_retried_once(mode: str, table: Table, io: FaultyIO) -> None:
    """Atomic create: read back as absent, retried. Under the lock: put again before the release."""
    table.write(data(range(3)))
    io.arm(Fault("write_new", SNAPSHOT_2, "before"))
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    assert result.snapshot_ids == [2]
    assert (result.attempts, result.read_backs) == ((2, 1) if mode == "atomic" else (1, 0))
    assert [s.commit_user for s in table.snapshots()] == [table.snapshot_manager.snapshot(1).commit_user, "job"]
    assert ids(table) == [0, 1, 2, 10]
    assert_every_snapshot_readable(table)


@pytest.mark.parametrize("mode", ["atomic"])  # under the lock the same bytes are put again before the release
def test_failed_read_after_an_ambiguous_attempt_is_unknown(table: Table, io: FaultyIO) -> None:
    """The first attempt's write fails and its read-back finds snapshot 2 absent (it may still
    land); the next attempt cannot read the table. Before, that read's OSError reached the caller
    as a plain failure: nothing said the commit could still be published."""
    table.write(data(range(3)))
    before = len(io.fired)
    io.arm(Fault("write_new", SNAPSHOT_2, "before",
                 then=[Fault("read_bytes", r"/snapshot/snapshot-1$", "before", times=10)]))
    messages = prepare(table, data([10]))
    with pytest.raises(CommitStateUnknownError, match="identifier 1"):
        table.new_commit("job").commit(messages, identifier=1)
    assert len(io.fired) > before + 1  # the write failed, then a read of the table did
    assert not any("/manifest/" in path for path in io.deleted)  # nothing cleaned up
    io.faults.clear()
    assert table.new_commit("job").commit(prepare(table, data([10])), identifier=1).snapshot_ids == [2]
    assert ids(reopened(table)) == [0, 1, 2, 10]


def test_late_landing_of_an_ambiguous_attempt_is_found_not_published_twice(table: Table, io: FaultyIO) -> None:
    """The read-back of an ambiguous write finds N absent; the write lands afterwards (a delayed
    request) and the retry at N then finds N taken: the retry must recognise its own earlier
    attempt and stop, never publish the identifier a second time."""
    table.write(data(range(3)))
    commit = table.new_commit("job")
    inner = commit._commit.publish
    delayed: list = []

    def publish(manager, snapshot):
        if not delayed:
            delayed.append(snapshot)
            raise OSError("injected: timed out; the request is still in flight")
        if len(delayed) == 1:
            delayed.append(inner(manager, delayed[0]))  # the delayed request lands now, first
        return inner(manager, snapshot)

    commit._commit.publish = publish
    result = commit.commit(prepare(table, data([10])), identifier=1)
    assert result.snapshot_ids == [2] and result.attempts == 3
    assert [(s.commit_user, s.commit_identifier) for s in table.snapshots()][1:] == [("job", 1)]
    assert ids(table) == [0, 1, 2, 10]
    assert_every_snapshot_readable(table)


@pytest.mark.parametrize("mode", ["lock"])
def test_delayed_put_under_the_lock_never_lands_over_another_commit(mode: str, table: Table, io: FaultyIO,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot PUT that timed out under the lock may still be in flight. The committer settles
    it before letting the lock go (it puts the same bytes again until a PUT answers), so when the
    delayed request lands, after the next committer published, it only rewrites this commit's own
    snapshot. (Settled after the release instead, the read-back found N absent or another's, the
    commit retried as N+1, and the delayed PUT then replaced the other commit's snapshot N.)"""
    table.write(data(range(3)))
    other = reopened(table)
    in_flight: list[tuple[str, bytes]] = []
    write_new, release = FaultyIO.write_new, JdbcLock.release

    def timed_out(self: FaultyIO, path: str, body: bytes) -> bool:
        if re.search(SNAPSHOT_2, path) and not in_flight:
            in_flight.append((path, body))
            raise OSError(f"injected: PUT {path} timed out; the request is still in flight")
        return write_new(self, path, body)

    def release_then_other_commits(lock: JdbcLock) -> bool:
        released = release(lock)
        if len(in_flight) == 1:
            in_flight.append(("", b""))
            other.write(data([20]))  # the next committer takes the lock as soon as it is free
        return released

    monkeypatch.setattr(FaultyIO, "write_new", timed_out)
    monkeypatch.setattr(JdbcLock, "release", release_then_other_commits)
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    path, body = in_flight[0]
    LocalFileIO.write_bytes(io, path, body)  # the delayed PUT lands at last
    assert result.snapshot_ids == [2] and result.read_backs == 0
    snapshots = reopened(table).snapshots()
    assert [s.id for s in snapshots] == [1, 2, 3]
    assert snapshots[1].commit_user == "job" and snapshots[2].commit_user != "job"
    assert ids(reopened(table)) == [0, 1, 2, 10, 20]
    assert_every_snapshot_readable(table)


@pytest.mark.parametrize("mode", ["lock"])
def test_lock_database_outage_before_the_write_is_not_published(mode: str, table: Table, io: FaultyIO,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    table.write(data(range(3)))
    inner, outages = JdbcLock._insert, list[str]()

    def insert(lock: JdbcLock) -> bool:
        if not outages:
            outages.append(lock.lock_id)
            raise OperationalError("INSERT INTO paimon_distributed_locks", {}, ConnectionError("database is down"))
        return inner(lock)

    monkeypatch.setattr(JdbcLock, "_insert", insert)
    before = set(os.listdir(f"{table.path}/manifest"))
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    assert outages and result.snapshot_ids == [2] and result.attempts == 2 and result.read_backs == 0
    # the first attempt was definitely not published: its manifest lists were cleaned up
    cleaned = [p for p in io.deleted if "/manifest/manifest-list-" in p]
    assert len(cleaned) == 2 and not any(os.path.exists(p) for p in cleaned)
    assert {os.path.basename(p) for p in cleaned}.isdisjoint(before)
    assert ids(table) == [0, 1, 2, 10]
    assert_every_snapshot_readable(table)


@pytest.mark.parametrize("mode", ["lock"])
def test_failed_lock_release_after_the_write_never_fails_the_commit(mode: str, table: Table,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    table.write(data(range(3)))

    def release(lock: JdbcLock) -> bool:
        raise OperationalError("DELETE FROM paimon_distributed_locks", {}, ConnectionError("database is down"))

    monkeypatch.setattr(JdbcLock, "release", release)
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    assert result.snapshot_ids == [2] and result.read_backs == 0
    assert ids(table) == [0, 1, 2, 10]


@pytest.mark.parametrize("mode", ["lock"])
def test_losing_the_check_under_the_lock_releases_it(mode: str, io: FaultyIO, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Another writer publishes N between our first check and our lock: we find N taken under the
    lock, must let the lock go, and retry as N+1 at once (a kept lock stalls every committer of
    the table until its lease expires; the short acquire timeout turns that into a failure)."""
    catalog = JdbcCatalog(str(tmp_path / "warehouse"), {"uri": f"sqlite:///{tmp_path}/catalog.sqlite",
                                                        "lock-acquire-timeout": "3 s"}, file_io=io)
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    table.write(data(range(3)))
    other = reopened(table)
    inner, raced = JdbcLock.acquire, list[int]()

    def acquire(lock: JdbcLock) -> None:
        if not raced:
            raced.append(1)
            other.write(data([20]))  # takes and frees the lock itself, publishing the id we planned
        inner(lock)

    monkeypatch.setattr(JdbcLock, "acquire", acquire)
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    assert raced and result.snapshot_ids == [3] and result.attempts == 2
    assert ids(table) == [0, 1, 2, 10, 20]
    with catalog.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT COUNT(*) FROM paimon_distributed_locks").scalar() == 0


# -- unknown ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("landed", [True, False], ids=["landed", "not-landed"])
def test_unknown_outcome_keeps_every_file_and_a_replay_settles_it(mode: str, table: Table, io: FaultyIO,
                                                                  landed: bool) -> None:
    table.write(data(range(3)))
    messages = prepare(table, data([10, 11]))
    written = {os.path.join(d, f) for d, _, files in os.walk(table.path) for f in files}
    outage = Fault("read_bytes", SNAPSHOT_2, times=2)  # every read-back attempt fails
    io.arm(unsettled(mode, "after" if landed else "before", outage))
    unknown_before = metric("strata_commit_state_unknown_total", table="db.t")
    with pytest.raises(CommitStateUnknownError) as failure:
        table.new_commit("job").commit(messages, identifier=7)
    message = str(failure.value)
    assert "snapshot 2" in message and "'job'" in message and "identifier 7" in message
    assert "Every file of the commit is kept" in message and "orphan-file cleanup" in message
    assert io.deleted == []  # nothing cleaned up: not the manifest lists, not the data files
    kept = {os.path.join(d, f) for d, _, files in os.walk(table.path) for f in files}
    assert written <= kept
    assert snapshot_files(table) == ({"snapshot-1", "snapshot-2"} if landed else {"snapshot-1"})
    assert_every_snapshot_readable(table)
    if metrics.ENABLED:
        assert metric("strata_commit_state_unknown_total", table="db.t") == unknown_before + 1

    # the job restarts and replays the batch: same commit user and identifier, new files
    again = reopened(table)
    result = again.new_commit("job").commit(prepare(again, data([10, 11])), identifier=7)
    assert result.skipped_as_duplicate is landed
    assert result.snapshot_ids == ([] if landed else [2])
    assert ids(again) == [0, 1, 2, 10, 11]
    assert_every_snapshot_readable(again)


def test_retried_write_that_landed_then_unreadable_is_unknown_not_cleaned(mode: str, table: Table,
                                                                          io: FaultyIO) -> None:
    """The field case: the write landed, the reply was lost and the read-back failed in the
    same outage. Before, the attempt's manifest lists were deleted under the published snapshot."""
    table.write(data(range(3)))
    io.arm(unsettled(mode, "after", Fault("read_bytes", SNAPSHOT_2, times=2)))
    with pytest.raises(CommitStateUnknownError):
        table.new_commit("job").commit(prepare(table, data([5])), identifier=1)
    assert_every_snapshot_readable(table)  # snapshot 2 names its manifest lists, all there
    assert ids(table) == [0, 1, 2, 5]


def test_unknown_compaction_after_its_published_batch_leaves_the_commit_successful(mode: str, table: Table,
                                                                                   io: FaultyIO) -> None:
    """A writer's commit publishes its batch (APPEND, snapshot 2), then its compaction (COMPACT,
    snapshot 3), whose outcome is unknown. The batch is in: the commit succeeds and says the
    compaction failed, every file is kept, and a replay is skipped. Before, the commit raised, and
    the replay found the batch only while snapshot 2 was still retained (the field run's double
    count)."""
    table.write(data(range(3)))
    with table.new_write() as writer:
        writer.write_arrow(data([10, 11]))
        writer.compact(full=True)
        messages = writer.prepare_commit(wait_compaction=True)
    assert any(m.compact_after for m in messages)
    snapshot_3 = r"/snapshot/snapshot-3$"
    io.arm(unsettled(mode, "after", Fault("read_bytes", snapshot_3, times=2), snapshot=snapshot_3))
    result = table.new_commit("job").commit(messages, identifier=4)
    assert result.snapshot_ids == [2] and not result.skipped_as_duplicate
    assert result.compaction_failure is not None and "CommitStateUnknownError" in result.compaction_failure
    assert not any("/manifest/" in path for path in io.deleted)  # the compaction's manifest lists are kept
    assert_every_snapshot_readable(table)
    assert ids(reopened(table)) == [0, 1, 2, 10, 11]
    assert table.new_commit("job").commit(prepare(table, data([10, 11])), identifier=4).skipped_as_duplicate
    assert ids(reopened(table)) == [0, 1, 2, 10, 11]


def test_replayed_write_is_skipped_before_writing_a_file(table: Table) -> None:
    """Table.write checks the replay first: a restarted job's replay writes nothing at all."""
    assert table.write(data([1, 2]), commit_user="job", identifier=1).snapshot_ids == [1]
    files = {f for _, _, names in os.walk(table.path) for f in names}
    replay = reopened(table).write(data([1, 2]), commit_user="job", identifier=1)
    assert replay.skipped_as_duplicate and {f for _, _, names in os.walk(table.path) for f in names} == files


def test_schema_change_with_a_lost_reply_is_settled_by_reading_back(table: Table, io: FaultyIO) -> None:
    io.arm(Fault("write_new", r"/schema/schema-1$", "after"))
    table.add_column("extra", pa.int32())
    assert "extra" in reopened(table).schema.field_names


def test_schema_change_unknown_keeps_the_file(table: Table, io: FaultyIO) -> None:
    io.arm(Fault("write_new", r"/schema/schema-1$", "after", then=[Fault("read_bytes", r"/schema/schema-1$", times=2)]))
    with pytest.raises(CommitStateUnknownError, match="schema 1"):
        table.add_column("extra", pa.int32())
    assert "extra" in reopened(table).schema.field_names  # it had landed, and was kept


def test_tag_with_a_lost_reply_is_created(table: Table, io: FaultyIO) -> None:
    table.write(data(range(3)))
    io.arm(Fault("write_new", r"/tag/tag-t1$", "after"))
    table.create_tag("t1")
    assert [t.name for t in table.list_tags()] == ["t1"]
    io.arm(Fault("write_new", r"/tag/tag-t2$", "after", then=[Fault("read_bytes", r"/tag/tag-t2$", times=2)]))
    with pytest.raises(CommitStateUnknownError, match="tag 't2'"):
        table.create_tag("t2")
    assert [t.name for t in table.list_tags()] == ["t1", "t2"]


# -- work after the commit ---------------------------------------------------------------------------------

def test_failing_commit_callback_leaves_the_commit_successful(table: Table, caplog: pytest.LogCaptureFixture) -> None:
    commit = table.new_commit("job")
    ran: list[list[int]] = []

    def broken(result) -> None:
        raise OSError("injected: the mirror's store is down")

    commit.add_callback(CommitCallback("mirror", broken))
    commit.add_callback(CommitCallback("audit", lambda result: ran.append(result.snapshot_ids)))
    before = metric("strata_commit_callback_failures_total", table="db.t", type="mirror")
    with caplog.at_level(logging.WARNING, logger="strata.operation.callbacks"):
        result = commit.commit(prepare(table, data([1, 2])), identifier=1)
    assert result.snapshot_ids == [1] and result.published
    assert result.callback_failures == {"mirror": "OSError: injected: the mirror's store is down"}
    assert ran == [[1]]  # the next callback still ran
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mirror" in warnings[0].getMessage()
    if metrics.ENABLED:
        assert metric("strata_commit_callback_failures_total", table="db.t", type="mirror") == before + 1
    assert [c.name for c in commit.callbacks()] == ["expiry", "iceberg-sync", "mirror", "audit"]
    # a replay publishes nothing: only callbacks that ask for every commit run
    assert commit.commit(prepare(table, data([1, 2])), identifier=1).callback_failures == {}
    assert ran == [[1]]


# -- dynamic buckets -----------------------------------------------------------------------------------------

def test_merged_hash_index_files_are_deleted_only_after_a_definite_outcome(mode: str, io: FaultyIO,
                                                                            tmp_path: Path) -> None:
    """Two writers of one commit rewrote one bucket's hash index: the committer merges them.
    Their files must survive until the outcome is known (a replay of the original messages names
    them), and after an unknown outcome nothing is deleted."""
    catalog = open_catalog(mode, tmp_path, io)
    table = catalog.create_table("db.d", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "-1", "commit.min-retry-wait": "1 ms"})
    table.write(data(range(3)))
    messages = prepare(table, data([10, 11])) + prepare(table, data([12]))
    writer_files = [f"{table.path}/index/{e.file_name}" for m in messages for e in m.index_changes
                    if e.kind.name == "ADD"]
    assert len(writer_files) == 2
    io.arm(unsettled(mode, "after", Fault("read_bytes", SNAPSHOT_2, times=2)))
    with pytest.raises(CommitStateUnknownError):
        table.new_commit("job").commit(messages, identifier=1)
    assert all(os.path.exists(p) for p in writer_files) and io.deleted == []
    assert ids(table) == [0, 1, 2, 10, 11, 12]  # it had landed, with the merged index file
    # a replay of the very same messages is skipped; a fresh commit merges and, once it is
    # published, deletes the writers' replaced files
    assert table.new_commit("job").commit(messages, identifier=1).skipped_as_duplicate
    more = prepare(table, data([20])) + prepare(table, data([21]))
    more_files = [f"{table.path}/index/{e.file_name}" for m in more for e in m.index_changes if e.kind.name == "ADD"]
    assert table.new_commit("job").commit(more, identifier=2).snapshot_ids == [3]
    assert not any(os.path.exists(p) for p in more_files)
    assert ids(reopened(table)) == [0, 1, 2, 10, 11, 12, 20, 21]
    assert_every_snapshot_readable(table)


# -- two jobs with one commit user -------------------------------------------------------------------------

@pytest.mark.parametrize("identifier", [7, BATCH_COMMIT_IDENTIFIER], ids=["same-identifier", "batch"])
def test_job_that_loses_its_snapshot_id_to_a_job_of_the_same_user_commits_its_own_rows(
        mode: str, table: Table, identifier: int) -> None:
    """Jobs A and B share a commit user and an identifier. B publishes snapshot 2 between A's
    build and A's publish, so A's attempt at 2 is definitely lost and A retries. Before, the retry
    took B's snapshot 2 (same user, identifier and kind) as its own: A reported success with B's
    snapshot and A's rows were never committed."""
    table.write(data(range(3)))
    job_a, job_b = table, reopened(table)
    commit_a = job_a.new_commit("job")
    a_messages, b_messages = prepare(job_a, data([10, 11, 12])), prepare(job_b, data([20, 21]))
    inner, b_results = commit_a._commit.publish, list[CommitResult]()

    def b_publishes_first(manager, snapshot) -> bool:
        if not b_results:
            b_results.append(job_b.new_commit("job").commit(b_messages, identifier=identifier))
        return inner(manager, snapshot)

    commit_a._commit.publish = b_publishes_first
    result = commit_a.commit(a_messages, identifier=identifier)
    assert b_results[0].snapshot_ids == [2]
    assert result.snapshot_ids == [3] and result.attempts == 2
    assert ids(reopened(table)) == [0, 1, 2, 10, 11, 12, 20, 21]
    assert table.to_arrow(snapshot_id=3).num_rows - table.to_arrow(snapshot_id=2).num_rows == 3  # A's rows
    assert_every_snapshot_readable(table)


@pytest.mark.parametrize("mode", ["atomic"])  # the race is the same under the lock (see the test above)
def test_spark_like_jobs_with_one_commit_user_and_no_identifier_lose_no_batch(mode: str, table: Table,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two batch jobs with the option commit-user set and no commit-identifier (every batch
    commits with the same identifier) write at once; B's snapshot lands between A's build and
    A's write. Both batches must be in the table, each job's result naming its own snapshot."""
    table.write(data(range(3)))
    job_a, job_b = table, reopened(table)
    publish, b_results = SnapshotManager.publish, list[CommitResult | None]()

    def b_lands_first(manager: SnapshotManager, snapshot: Snapshot, ready: Callable[[], bool] | None = None) -> bool:
        if not b_results:
            b_results.append(None)  # B's own publish goes straight through
            b_results[0] = job_b.write(data([20, 21]), commit_user="etl")
        return publish(manager, snapshot, ready)

    monkeypatch.setattr(SnapshotManager, "publish", b_lands_first)
    result = job_a.write(data([10, 11, 12]), commit_user="etl")
    assert b_results[0] is not None and b_results[0].snapshot_ids == [2] and result.snapshot_ids == [3]
    assert ids(reopened(table)) == [0, 1, 2, 10, 11, 12, 20, 21]
    assert [s.delta_record_count for s in reopened(table).snapshots()] == [3, 2, 3]


def test_late_landing_is_recognised_by_the_attempt_not_by_the_user(table: Table) -> None:
    """A's first attempt at snapshot 2 is ambiguous and read back absent; then job B, of the same
    commit user and identifier, publishes 2. A's delayed write can no longer land at 2: A must
    not take B's snapshot for its late landing, and commits its rows as snapshot 3."""
    table.write(data(range(3)))
    job_b = reopened(table)
    commit_a = table.new_commit("job")
    inner, calls = commit_a._commit.publish, list[int]()
    b_messages = prepare(job_b, data([20]))

    def ambiguous_then_b(manager, snapshot) -> bool:
        calls.append(snapshot.id)
        if len(calls) == 1:
            job_b.new_commit("job").commit(b_messages, identifier=5)  # B lands at 2 meanwhile
            raise OSError("injected: timed out; the request never arrives")
        return inner(manager, snapshot)

    commit_a._commit.publish = ambiguous_then_b
    result = commit_a.commit(prepare(table, data([10])), identifier=5)
    assert calls == [2, 3] and result.snapshot_ids == [3] and result.read_backs == 1
    assert ids(reopened(table)) == [0, 1, 2, 10, 20]


# -- an ambiguous last attempt ----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["atomic"])  # under the lock the same bytes are put again before the release
def test_ambiguous_last_attempt_read_back_as_absent_is_unknown(table: Table, io: FaultyIO) -> None:
    """Every attempt's snapshot write fails ambiguously and is read back absent: a delayed write
    could still land, so the outcome is unknown (before: "failed, nothing published"), and every
    file is kept. A replay settles it."""
    table.write(data(range(3)))
    table = table.set_options(**{"commit.max-retries": "1"})
    io.arm(Fault("write_new", SNAPSHOT_2, "before", times=2))
    with pytest.raises(CommitStateUnknownError, match="absent when read back"):
        table.new_commit("job").commit(prepare(table, data([10])), identifier=3)
    assert io.deleted == []
    again = reopened(table)
    assert again.new_commit("job").commit(prepare(again, data([10])), identifier=3).snapshot_ids == [2]
    assert ids(reopened(table)) == [0, 1, 2, 10]


@pytest.mark.parametrize("mode", ["atomic"])
def test_sort_compaction_keeps_its_files_after_an_unknown_outcome(io: FaultyIO, tmp_path: Path) -> None:
    """A sort compaction whose snapshot write stays ambiguous must not delete the files it wrote:
    its snapshot may still land and name them. Before, CommitFailedError made it delete them."""
    catalog = open_catalog("atomic", tmp_path, io)
    table = catalog.create_table("db.a", SCHEMA, options={"bucket": "-1", "commit.min-retry-wait": "1 ms",
                                                          "commit.max-retries": "1"})
    table.write(data([5, 3]))
    table.write(data([4, 1]))
    before = data_files(table)
    io.arm(Fault("write_new", r"/snapshot/snapshot-3$", "before", times=2))
    with pytest.raises(CommitStateUnknownError):
        table.compact(sort_by=["id"])
    written = data_files(table) - before
    assert written and not any(path in io.deleted for path in written)


def data_files(table: Table) -> set[str]:
    return {os.path.join(d, f) for d, _, files in os.walk(table.path) for f in files
            if f.startswith("data-") and "/bucket-" in d}


# -- the replay cache ----------------------------------------------------------------------------------------

def test_replay_of_a_rolled_back_identifier_is_committed_after_other_commits(table: Table) -> None:
    """A job commits identifiers 1..3; the table is rolled back to 1; other jobs then commit until
    the table is past where the job's committer last looked. The job's replay of identifier 2 must
    be committed: its snapshot is gone. Before, the committer's remembered answer (3) survived the
    rollback and the replay was skipped, so batch 2 was lost."""
    commit = table.new_commit("job")
    for identifier in (1, 2, 3):
        commit.commit(prepare(table, data([identifier])), identifier=identifier)
    assert commit.last_committed_identifier() == 3
    table.rollback_to(1)
    for i in range(3):
        reopened(table).write(data([100 + i]))
    result = commit.commit(prepare(table, data([2])), identifier=2)
    assert not result.skipped_as_duplicate and result.snapshot_ids == [5]
    assert ids(reopened(table)) == [1, 2, 100, 101, 102]
    assert commit.commit(prepare(table, data([2])), identifier=2).skipped_as_duplicate


# -- a compaction after its published batch ------------------------------------------------------------------

def dynamic_bucket_commit(table: Table) -> list:
    """Two writers of one bucket of a dynamic-bucket table (the committer merges their hash index
    files) and a compaction, in one commit."""
    with table.new_write() as writer:
        writer.write_arrow(data([10, 11]))
        writer.compact(full=True)
        first = writer.prepare_commit(wait_compaction=True)
    messages = first + prepare(table, data([12]))
    assert any(m.compact_after for m in messages)
    assert len([e for m in messages for e in m.index_changes if e.index_type == "HASH" and e.kind.name == "ADD"]) == 2
    return messages


def assert_latest_snapshot_files_exist(table: Table) -> None:
    """Every file the latest snapshot names: manifest lists, manifests, data and index files."""
    table = reopened(table)
    snap = table.latest_snapshot()
    assert snap is not None
    assert_every_snapshot_readable(table)
    for entry in table.new_scan().plan_entries():
        assert os.path.exists(f"{table.path}/bucket-{entry.bucket}/{entry.file.file_name}")
    for entry in table.manifest_store.read_index_manifest(snap.index_manifest):
        assert os.path.exists(f"{table.path}/index/{entry.file_name}"), f"{entry.file_name} was deleted"


@pytest.mark.parametrize("mode", ["lock"])
def test_lock_timeout_of_the_compaction_after_its_published_batch(mode: str, io: FaultyIO, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch's APPEND publishes under the JDBC lock; the lock then times out for the
    compaction's COMPACT. The batch is durable, so the commit succeeds and says why its compaction
    is not in. Before, LockAcquireTimeoutError escaped (a retrying job wrote the batch twice) and
    the merged hash index file that the published snapshot names was deleted."""
    catalog = open_catalog(mode, tmp_path, io)
    table = catalog.create_table("db.d", SCHEMA, primary_keys=["id"], options={"bucket": "-1"})
    table.write(data(range(3)))
    messages = dynamic_bucket_commit(table)
    inner, acquired = JdbcLock.acquire, list[str]()

    def acquire(lock: JdbcLock) -> None:
        acquired.append(lock.lock_id)
        if len(acquired) == 2:
            raise LockAcquireTimeoutError(f"could not acquire lock {lock.lock_id!r}: another writer holds it")
        inner(lock)

    monkeypatch.setattr(JdbcLock, "acquire", acquire)
    result = table.new_commit("job").commit(messages, identifier=1)
    assert result.snapshot_ids == [2] and len(acquired) == 2
    assert result.compaction_failure is not None and "LockAcquireTimeoutError" in result.compaction_failure
    assert_latest_snapshot_files_exist(table)
    monkeypatch.setattr(JdbcLock, "acquire", inner)
    assert table.new_commit("job").commit(prepare(table, data([10])), identifier=1).skipped_as_duplicate
    reopened(table).write(data([11, 12]))  # the next writer reads the bucket's hash index: an upsert
    assert ids(reopened(table)) == [0, 1, 2, 10, 11, 12]


@pytest.mark.parametrize("error", [OptionError("commit.max-retries: not a number"),
                                   SnapshotNotFoundError("snapshot 2 not found"),
                                   CorruptMetadataError("cannot parse snapshot-2: truncated")],
                         ids=lambda e: type(e).__name__)
def test_any_error_of_the_compaction_after_its_published_batch_leaves_the_commit_successful(
        mode: str, io: FaultyIO, tmp_path: Path, error: Exception) -> None:
    catalog = open_catalog(mode, tmp_path, io)
    table = catalog.create_table("db.d", SCHEMA, primary_keys=["id"], options={"bucket": "-1"})
    table.write(data(range(3)))
    commit = table.new_commit("job")
    inner, published = commit._commit.publish, list[int]()

    def publish(manager, snapshot) -> bool:
        if published:
            raise error
        published.append(snapshot.id)
        return inner(manager, snapshot)

    commit._commit.publish = publish
    result = commit.commit(dynamic_bucket_commit(table), identifier=1)
    assert result.snapshot_ids == [2] and result.compaction_failure == f"{type(error).__name__}: {error}"
    assert_latest_snapshot_files_exist(table)
    assert ids(reopened(table)) == [0, 1, 2, 10, 11, 12]


# -- random faults against a model ------------------------------------------------------------------------------

FAULT_OPS = st.sampled_from([("write_new", r"/snapshot/snapshot-\d+$"), ("read_bytes", r"/snapshot/snapshot-\d+$"),
                             ("write_bytes", r"/snapshot/snapshot-\d+$"),  # a put again under the lock
                             ("write_bytes", r"/snapshot/(LATEST|EARLIEST)$"), ("write_bytes", r"/manifest/")])
FAULTS = st.lists(st.tuples(FAULT_OPS, st.sampled_from(["before", "after"]), st.integers(1, 3)), max_size=4)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.lists(FAULTS, min_size=3, max_size=3))
def test_random_faults_lose_no_acknowledged_batch(plan: list, mode: str, tmp_path_factory: pytest.TempPathFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Three batches, each committed until it is acknowledged, by a restarted writer (same user,
    same identifier, fresh table object) after any error. Whatever the faults: every batch is in
    the table exactly once and every snapshot reads."""
    monkeypatch.setattr(file_io_module, "READ_BACK_ATTEMPTS", 2)
    monkeypatch.setattr(lock_module, "REPUT_ATTEMPTS", 2)
    io = FaultyIO(check_then_put=mode == "lock")
    catalog = open_catalog(mode, tmp_path_factory.mktemp("faults"), io)
    catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2", "commit.min-retry-wait": "1 ms"})
    acknowledged: list[int] = []
    for batch, faults in enumerate(plan):
        rows = list(range(batch * 10, batch * 10 + 3))
        io.arm(*(Fault(op, pattern, when, times) for (op, pattern), when, times in faults))
        for _ in range(10):
            table = catalog.get_table("db.t")
            try:
                table.new_commit("writer").commit(prepare(table, data(rows)), identifier=batch + 1)
                break
            except (OSError, CommitStateUnknownError):
                continue  # restart: replay with the same user and identifier
        else:
            pytest.fail(f"batch {batch} was never acknowledged under faults {faults}")
        acknowledged += rows
        io.faults.clear()
    table = catalog.get_table("db.t")
    assert ids(table) == acknowledged
    assert_every_snapshot_readable(table)
    users = [(s.commit_user, s.commit_identifier) for s in table.snapshots()]
    assert users == [("writer", i) for i in range(1, 4)]  # each identifier published once


# -- MinIO: a dropped reply of the real snapshot PUT ---------------------------------------------------------

@pytest.fixture
def minio_catalog(minio_options: dict[str, str]) -> Iterator[FileSystemCatalog]:
    from strata.fs.s3 import S3FileIO
    from strata_platform.services.minio import BUCKET

    root = f"s3://{BUCKET}/engine-tests/{uuid.uuid4().hex[:16]}"
    io = S3FileIO({**minio_options, "s3.conditional-put": "true"})
    yield FileSystemCatalog(root, file_io=io)
    io.delete_dir(root)


@pytest.mark.minio
@pytest.mark.parametrize("retried", [False, True], ids=["reply-lost", "retry-got-412"])
def test_minio_snapshot_put_whose_reply_is_lost(minio_catalog: FileSystemCatalog, retried: bool) -> None:
    """The snapshot PUT lands on MinIO and its reply is dropped. Without retry, the committer
    reads the snapshot back; with a retry (as botocore does after a lost reply), the retried
    conditional PUT gets 412 and the FileIO reads the object back. Both are committed."""
    from botocore.exceptions import ClientError, ReadTimeoutError

    from strata.fs.s3 import S3FileIO

    minio_catalog.create_database("db")
    table = minio_catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(data(range(3)))
    assert isinstance(table.file_io, S3FileIO)
    client = table.file_io._client
    put, dropped = client.put_object, list[str]()

    def put_object(**kwargs):
        reply = put(**kwargs)
        if kwargs["Key"].endswith("/snapshot/snapshot-2") and not dropped:
            dropped.append(kwargs["Key"])
            if not retried:
                raise ReadTimeoutError(endpoint_url="minio: reply dropped")
            try:
                put(**kwargs)  # botocore's retry of the same request
            except ClientError as exc:
                exc.response["ResponseMetadata"]["RetryAttempts"] = 1
                raise
        return reply

    client.put_object = put_object
    result = table.new_commit("job").commit(prepare(table, data([10])), identifier=1)
    assert dropped and result.snapshot_ids == [2] and result.attempts == 1
    assert result.read_backs == (0 if retried else 1)
    client.put_object = put
    again = minio_catalog.get_table("db.t")
    assert sorted(again.to_arrow().column("id").to_pylist()) == [0, 1, 2, 10]
    assert [s.id for s in again.snapshots()] == [1, 2]


# -- Spark: an unreadable state is never "not committed" -----------------------------------------------------

def test_spark_abort_check_is_unknown_when_snapshots_cannot_be_read(table: Table, io: FaultyIO) -> None:
    """The Spark writer's abort deletes the batch's files only when no snapshot of its commit user
    was published; snapshots it cannot read make that unknown (before, a read error counted as
    "not committed" and abort deleted the files of a published snapshot)."""
    from strata.spark.writer import committed_since

    table.write(data(range(3)))
    table.new_commit("spark-batch").commit(prepare(table, data([10])))
    assert committed_since(table, "spark-batch", 1)
    assert not committed_since(table, "someone-else", 1)
    io.arm(Fault("read_bytes", SNAPSHOT_2, times=1))
    with pytest.raises(CommitStateUnknownError, match="spark-batch"):
        committed_since(table, "spark-batch", 1)
