"""Finding, reading and publishing snapshots of one table (SnapshotManager)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from strata.errors import CorruptMetadataError, SnapshotNotFoundError
from strata.fs import FileIO
from strata.snapshot.snapshot import Snapshot

_SNAPSHOT_FILE = re.compile(r"^snapshot-(\d+)$")


class SnapshotManager:
    def __init__(self, file_io: FileIO, table_path: str):
        self.file_io = file_io
        self.table_path = table_path.rstrip("/")
        self.dir = f"{self.table_path}/snapshot"
        # the snapshot a commit about to be published was built on (set by the committer): a
        # fast-forward may have replaced or removed it meanwhile, and then the commit must retry
        self.expected_parent: Snapshot | None = None

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
        if hint is not None and self.exists(hint):
            earliest = hint
            while earliest > 1 and self.exists(earliest - 1):
                earliest -= 1
            return earliest
        ids = self._listed_ids()
        return ids[0] if ids else None

    def latest(self) -> Snapshot | None:
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

    def publish(self, snapshot: Snapshot) -> bool:
        """Atomically create snapshot-N; False if that id is taken, or if snapshot N-1 is no longer
        `expected_parent` (a fast-forward replaced it). Updates the hints."""
        if not self.parent_unchanged(snapshot):
            return False
        if not self.file_io.write_new(self.path(snapshot.id), snapshot.to_json().encode()):
            return False
        self.commit_hints(snapshot.id)
        return True

    def parent_unchanged(self, snapshot: Snapshot) -> bool:
        parent = self.expected_parent
        if parent is None or parent.id != snapshot.id - 1:
            return True
        try:
            return self.snapshot(parent.id) == parent
        except SnapshotNotFoundError:
            return False

    def commit_hints(self, snapshot_id: int) -> None:
        self.file_io.write_bytes(f"{self.dir}/LATEST", str(snapshot_id).encode())
        if snapshot_id == 1 or self._hint("EARLIEST") is None:
            self.file_io.write_bytes(f"{self.dir}/EARLIEST", str(self.earliest_id() or snapshot_id).encode())

    def earliest_at_or_after(self, time_millis: int) -> Snapshot | None:
        for snap in self.snapshots():
            if snap.time_millis >= time_millis:
                return snap
        return None

    def latest_at_or_before(self, time_millis: int) -> Snapshot | None:
        found = None
        for snap in self.snapshots():
            if snap.time_millis <= time_millis:
                found = snap
            else:
                break
        return found
