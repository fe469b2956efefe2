"""Finding, reading and publishing snapshots of one table (SnapshotManager).

Publishing has three outcomes (ARCHITECTURE decision 9): ``publish`` returns True (published) or
False (definitely not: the id is taken, or its parent was replaced), raises
``NothingPublishedError`` when it failed before writing anything, and lets an ``OSError`` of the
write itself through: that one is ambiguous (the PUT may have landed and lost its reply), and
``read_back`` settles it. The LATEST/EARLIEST hints are best effort after a durable publish.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterator

from strata.errors import CorruptMetadataError, SnapshotNotFoundError, StrataError
from strata.fs import FileIO
from strata.fs.file_io import read_back
from strata.fs.prefetch import fetch_pool
from strata.snapshot.snapshot import Snapshot

log = logging.getLogger(__name__)

PUBLISH_LOCK = ".publish.lock"  # not a snapshot-N name: Paimon's readers and our listings skip it
_SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)$")
WALK_WINDOW = 16  # snapshots a walk back reads at once from an object store
TIME_SEARCH_ATTEMPTS = 3  # binary searches by time before a walk, when snapshots vanish under them


class NothingPublishedError(StrataError):
    """A publish attempt failed before it wrote anything (a check could not be made, the lock
    database was unavailable): definitely not published, so its files may be cleaned up and the
    attempt retried."""


class SnapshotManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.table_path = table_path.rstrip("/")
        self.dir = f"{self.table_path}/snapshot"
        # the snapshot a commit about to be published was built on (set by the committer): a
        # fast-forward may have replaced or removed it meanwhile, and then the commit must retry
        self.expected_parent: Snapshot | None = None
        self._earliest_hinted = False  # EARLIEST seen or written here: a publish need not read it again

    def path(self, snapshot_id: int) -> str:
        return f"{self.dir}/snapshot-{snapshot_id}"

    def snapshot(self, snapshot_id: int) -> Snapshot:
        path = self.path(snapshot_id)
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            raise SnapshotNotFoundError(f"snapshot {snapshot_id} does not exist ({path})") from None
        if not data:
            raise CorruptMetadataError(f"snapshot file {path} is empty")
        return Snapshot.from_json(data, where=path)

    def exists(self, snapshot_id: int) -> bool:
        # a file probe only (one HEAD on an object store; FileIO.exists also lists, for directories)
        try:
            self.file_io.file_size(self.path(snapshot_id))
            return True
        except FileNotFoundError:
            return False

    def _hint(self, name: str) -> int | None:
        try:
            return int(self.file_io.read_bytes(f"{self.dir}/{name}").decode().strip())
        except (FileNotFoundError, ValueError):
            return None

    def _listed_ids(self) -> list[int]:
        ids = []
        for status in self.file_io.list_status(self.dir):
            m = _SNAPSHOT_FILE.match(status.path.rsplit("/", 1)[-1])
            if m:
                ids.append(int(m.group(1)))
        return sorted(ids)

    def latest_id(self) -> int | None:
        """LATEST hint, then probe forward; list the directory if the hint is missing or stale."""
        hint = self._hint("LATEST")
        if hint is not None and self.exists(hint):
            latest = hint
            while self.exists(latest + 1):
                latest += 1
            return latest
        ids = self._listed_ids()
        return ids[-1] if ids else None

    def earliest_id(self) -> int | None:
        hint = self._hint("EARLIEST")
        self._earliest_hinted |= hint is not None
        if hint is not None and self.exists(hint):
            earliest = hint
            while earliest > 1 and self.exists(earliest - 1):
                earliest -= 1
            return earliest
        ids = self._listed_ids()
        return ids[0] if ids else None

    def latest(self, known: Snapshot | None = None) -> Snapshot | None:
        """The newest snapshot. `known`: one the caller has just read or published; it is the
        answer when its successor is absent (one request). Whoever builds on the answer checks
        the parent again at publish (``parent_unchanged``), so a `known` rolled back meanwhile
        costs a retry, never a wrong parent."""
        if known is not None and not self.exists(known.id + 1):
            return known
        # the common case in three requests: the hint, its snapshot (which proves it exists) and
        # the absence of the next one
        hint = self._hint("LATEST")
        if hint is not None:
            try:
                found = self.snapshot(hint)
            except SnapshotNotFoundError:
                found = None
            if found is not None and not self.exists(hint + 1):
                return found
        latest = self.latest_id()
        return self.snapshot(latest) if latest is not None else None

    def newest_first(self, start: int, stop: int) -> Iterator[Snapshot]:
        """Snapshots `start`, `start` - 1, ... down to `stop` (exclusive), skipping expired ones.
        On an object store WALK_WINDOW are read at once, so a walk back over many snapshots
        costs round trips / WALK_WINDOW (a caller that stops early wastes at most a window)."""
        window = WALK_WINDOW if self.file_io.is_object_store else 1
        while start > stop:
            ids = range(start, max(stop, start - window), -1)
            found = fetch_pool().map(self._if_exists, ids) if window > 1 else map(self._if_exists, ids)
            yield from (snapshot for snapshot in found if snapshot is not None)
            start = ids[-1] - 1

    def _if_exists(self, snapshot_id: int) -> Snapshot | None:
        try:
            return self.snapshot(snapshot_id)
        except SnapshotNotFoundError:
            return None  # expired meanwhile

    def snapshots(self) -> Iterator[Snapshot]:
        """All live snapshots, oldest first."""
        earliest, latest = self.earliest_id(), self.latest_id()
        if earliest is None or latest is None:
            return
        for sid in range(earliest, latest + 1):
            try:
                yield self.snapshot(sid)
            except SnapshotNotFoundError:
                continue  # expired concurrently

    def publish(self, snapshot: Snapshot, ready: Callable[[], bool] | None = None) -> bool:
        """Atomically create snapshot-N; False if that id is taken, if snapshot N-1 is no longer
        `expected_parent` (a fast-forward replaced it), or if `ready` (asked after those reads,
        right before the write: a lock holder's lease check) says no. Updates the hints (best
        effort). An OSError of the write is ambiguous (see ``read_back``); a failed check before
        it raises NothingPublishedError."""
        with self.publish_lock() or contextlib.nullcontext():
            try:
                if not self.parent_unchanged(snapshot):
                    return False
            except OSError as exc:
                raise NothingPublishedError(f"snapshot {snapshot.id} of {self.table_path} not written: its "
                                            f"parent could not be checked ({exc})") from exc
            if ready is not None and not ready():
                return False
            if not self.file_io.write_new(self.path(snapshot.id), snapshot.to_json().encode()):
                return False
        self.commit_hints(snapshot.id)
        return True

    def put_again(self, snapshot: Snapshot) -> None:
        """Write snapshot-N over whatever is there; an OSError is ambiguous again. Only for the
        holder of the table's lock after an ambiguous publish: N was absent when it checked, and
        nobody else writes N while it holds the lock, so anything at N is this very commit."""
        self.file_io.write_bytes(self.path(snapshot.id), snapshot.to_json().encode())
        self.commit_hints(snapshot.id)

    def publish_lock(self) -> contextlib.AbstractContextManager[object] | None:
        """On local disk, every publish of this snapshot directory holds a file lock, so that a
        fast-forward, which replaces snapshots, can exclude main's committers (an object store has
        none: there the catalog's table lock does it)."""
        return self.file_io.exclusive_lock(f"{self.dir}/{PUBLISH_LOCK}")

    def read_back(self, snapshot: Snapshot) -> bool:
        """After an ambiguous publish of `snapshot`: is snapshot-N this very commit? True: it
        landed; False: N is absent or another commit's (a definite answer). Reads with retries
        of its own; the last OSError escapes when no read succeeds (the outcome is unknown)."""
        try:
            landed = read_back(lambda: self.snapshot(snapshot.id))
        except SnapshotNotFoundError:
            return False
        return landed.same_commit(snapshot)

    def parent_unchanged(self, snapshot: Snapshot) -> bool:
        parent = self.expected_parent
        if parent is None or parent.id != snapshot.id - 1:
            return True
        try:
            return self.snapshot(parent.id) == parent
        except SnapshotNotFoundError:
            return False

    def commit_hints(self, snapshot_id: int) -> bool:
        """Point LATEST (and a missing EARLIEST) at a published snapshot. Best effort: readers
        probe past a stale hint and list without one, so a failed write is logged, never raised
        (the snapshot is durable). False when a hint could not be written."""
        try:
            self.file_io.write_bytes(f"{self.dir}/LATEST", str(snapshot_id).encode())
            if snapshot_id == 1 or (not self._earliest_hinted and self._hint("EARLIEST") is None):
                self.file_io.write_bytes(f"{self.dir}/EARLIEST", str(self.earliest_id() or snapshot_id).encode())
            self._earliest_hinted = True
        except OSError as exc:
            log.warning("%s: snapshot %d is published; its LATEST/EARLIEST hint was not updated (%s)",
                        self.dir, snapshot_id, exc)
            return False
        return True

    def earliest_at_or_after(self, time_millis: int) -> Snapshot | None:
        """The oldest live snapshot committed at or after `time_millis`, None if there is none."""
        return self._time_boundary(lambda snap: snap.time_millis < time_millis)[1]

    def latest_at_or_before(self, time_millis: int) -> Snapshot | None:
        """The newest live snapshot committed at or before `time_millis`, None if there is none."""
        return self._time_boundary(lambda snap: snap.time_millis <= time_millis)[0]

    def _time_boundary(self, before: Callable[[Snapshot], bool]) -> tuple[Snapshot | None, Snapshot | None]:
        """The last live snapshot for which `before` holds and the first for which it does not.
        A commit stamps its time as it builds on the latest snapshot, so times grow with ids and
        `before` (a time bound) holds on a prefix of them: a binary search reads O(log n)
        snapshots, as Paimon's SnapshotManager does, where a walk read every older one. A
        snapshot expired or rolled back during the search restarts it on the new live range;
        if that keeps happening, the walk decides."""
        for _ in range(TIME_SEARCH_ATTEMPTS):
            earliest, latest = self.earliest_id(), self.latest_id()
            if earliest is None or latest is None:
                return None, None
            last_before: Snapshot | None = None
            first_after: Snapshot | None = None
            low, high = earliest, latest
            try:
                while low <= high:
                    mid = (low + high) // 2
                    snap = self.snapshot(mid)
                    if before(snap):
                        last_before, low = snap, mid + 1
                    else:
                        first_after, high = snap, mid - 1
            except SnapshotNotFoundError:
                continue
            return last_before, first_after
        last_before = first_after = None
        for snap in self.snapshots():
            if not before(snap):
                first_after = snap
                break
            last_before = snap
        return last_before, first_after
