"""Snapshot expiry, tag deletion and tag expiry: removing metadata and the files only it needed.

Which snapshots expire (Paimon's ``ExpireSnapshotsImpl``), with ``latest`` and ``earliest`` ids:

* every snapshot below ``latest - snapshot.num-retained.max + 1`` expires;
* no snapshot at or above ``latest - snapshot.num-retained.min + 1`` expires, nor one at or above
  the smallest ``nextSnapshot`` of the consumers, nor more than ``snapshot.expire.limit`` per run;
* between these bounds snapshot N expires only if snapshot N+1 is older than
  ``snapshot.time-retained`` (so every snapshot that was current within that time is kept).

Which files go, when snapshots ``[begin, end)`` expire and ``end`` is the new earliest:

* data files deleted by the deltas of snapshots ``(begin, end]`` (they were live before, and no
  snapshot from ``end`` on has them), unless the nearest tag before that delta still has them
  (a file's life is an interval of snapshots, so the nearest earlier tag is the only one that can)
  and unless the same delta re-adds the same file (a level upgrade moves a file without rewriting);
* changelog files of the expired snapshots;
* manifest lists, manifests, index manifests, index files and statistics of the expired snapshots
  that neither ``end`` nor any tag references.

Order, unlike Paimon (FORMAT.md pain point 6, apache/paimon#6978): everything is planned first,
then the snapshot files are deleted (oldest first, so the live ids stay one contiguous range) and
the ``EARLIEST`` hint moves, and only then are data files and manifests deleted. A reader that
starts from ``EARLIEST`` (or lists the directory) therefore never picks a snapshot whose files are
being removed. If the process dies between the two steps, the files it did not delete are orphans
for ``remove_orphan_files``; nothing live is ever lost.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from strata import metrics
from strata.errors import CorruptMetadataError, SnapshotNotFoundError
from strata.format import binary_row
from strata.fs.file_io import FileIO, LocalFileIO
from strata.manifest import codec
from strata.manifest.index_manifest import IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry, merge_entries
from strata.manifest.manifest_file_meta import ManifestFileMeta
from strata.operation.partition_expire import maybe_expire_partitions
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.snapshot.tags import TagManager
from strata.store import FileStore, HasStore, store_of

log = logging.getLogger(__name__)

FileKey = tuple[bytes, int, str]  # (partition, bucket, file name): how Paimon matches data files


@dataclass
class ExpireResult:
    expired: list[int] = field(default_factory=list)  # snapshot ids whose files were deleted
    data_files_deleted: int = 0
    metadata_files_deleted: int = 0

    def __bool__(self) -> bool:
        return bool(self.expired)


def file_key(entry: ManifestEntry) -> FileKey:
    return entry.partition, entry.bucket, entry.file.file_name


class TableFiles:
    """Paths and contents of one table's snapshots, for the cleaners."""

    def __init__(self, table: FileStore | HasStore):
        self.table = table = store_of(table)
        self.file_io = table.file_io
        self.store = table.manifest_store
        self._partition_dirs: dict[bytes, str] = {}
        self._partition_types = [f.type.to_arrow() for f in table.schema.partition_fields()]
        self.deleted_buckets: set[tuple[bytes, int]] = set()

    # -- paths ---------------------------------------------------------------------------------
    def partition_dir(self, partition: bytes) -> str:
        cached = self._partition_dirs.get(partition)
        if cached is None:
            values = binary_row.deserialize(partition, self._partition_types) if self._partition_types else []
            cached = self.table.partition_dir(values)
            self._partition_dirs[partition] = cached
        return cached

    def bucket_dir(self, partition: bytes, bucket: int) -> str:
        return self.table.paths.bucket_dir(self.partition_dir(partition), bucket)

    def data_paths(self, entry: ManifestEntry) -> list[str]:
        """The file and its extra files (file indexes), as Paimon places them."""
        f = entry.file
        main = f.external_path or f"{self.bucket_dir(entry.partition, entry.bucket)}/{f.file_name}"
        base = main.rsplit("/", 1)[0]
        return [main, *(f"{base}/{extra}" for extra in f.extra_files)]

    def index_path(self, entry: IndexManifestEntry) -> str:
        return entry.external_path or f"{self.table.path}/index/{entry.file_name}"

    def statistics_path(self, name: str) -> str:
        return f"{self.table.path}/statistics/{name}"

    # -- reading (strict: for what must be kept) -------------------------------------------------
    def manifest_list(self, name: str | None) -> list[ManifestFileMeta]:
        return self.store.read_manifest_list(name) if name else []

    def entries(self, list_name: str | None) -> list[ManifestEntry]:
        return self.store.read_entries(self.manifest_list(list_name))

    def live_keys(self, snapshot: Snapshot) -> set[FileKey]:
        """Data files of the snapshot (base merged with delta)."""
        entries = self.entries(snapshot.base_manifest_list) + self.entries(snapshot.delta_manifest_list)
        return {file_key(e) for e in merge_entries(entries) if e.kind == FileKind.ADD}

    def index_entries(self, name: str | None) -> list[IndexManifestEntry]:
        if not name:
            return []
        path = f"{self.store.dir}/{name}"
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            raise CorruptMetadataError(f"index manifest {path} is missing") from None
        return codec.decode_index_manifest(data)

    def metadata_names(self, snapshot: Snapshot) -> set[str]:
        """Manifest lists, manifests, index manifest, index files and statistics the snapshot uses
        (not its changelog: changelogs die with their snapshot, as in Paimon)."""
        names = {snapshot.base_manifest_list, snapshot.delta_manifest_list}
        for list_name in (snapshot.base_manifest_list, snapshot.delta_manifest_list):
            names.update(m.file_name for m in self.manifest_list(list_name))
        if snapshot.index_manifest:
            names.add(snapshot.index_manifest)
            names.update(e.file_name for e in self.index_entries(snapshot.index_manifest))
        if snapshot.statistics:
            names.add(snapshot.statistics)
        return names

    # -- reading (tolerant: for what is about to go; an earlier, interrupted run may have removed it)
    def _tolerant_entries(self, list_name: str | None) -> list[ManifestEntry] | None:
        try:
            return self.entries(list_name)
        except CorruptMetadataError as exc:
            log.warning("table %s: %s; skipping the files it lists", self.table.identifier, exc)
            return None

    def deleted_in_delta(self, snapshot: Snapshot) -> list[ManifestEntry]:
        """DELETE entries of the snapshot's delta whose file the same delta does not re-add."""
        entries = self._tolerant_entries(snapshot.delta_manifest_list)
        if entries is None:
            return []
        doomed: dict[FileKey, ManifestEntry] = {}
        for e in entries:
            if e.kind == FileKind.DELETE:
                doomed[file_key(e)] = e
            else:
                doomed.pop(file_key(e), None)  # upgraded in place: still live
        return list(doomed.values())

    def added_in_delta(self, snapshot: Snapshot) -> list[ManifestEntry]:
        entries = self._tolerant_entries(snapshot.delta_manifest_list)
        return [e for e in entries or [] if e.kind == FileKind.ADD]

    def changelog_files(self, snapshot: Snapshot) -> list[ManifestEntry]:
        if not snapshot.changelog_manifest_list:
            return []
        entries = self._tolerant_entries(snapshot.changelog_manifest_list)
        return [e for e in entries or [] if e.kind == FileKind.ADD]

    # -- deleting --------------------------------------------------------------------------------
    def delete_data_files(self, entries: Iterable[ManifestEntry]) -> int:
        paths: dict[str, None] = {}
        for e in entries:
            for p in self.data_paths(e):
                paths[p] = None
            self.deleted_buckets.add((e.partition, e.bucket))
        for p in paths:
            self.file_io.delete(p)
        return len(paths)

    def delete_metadata(self, snapshot: Snapshot, keep: set[str], changelog: bool = True) -> int:
        """Delete the snapshot's manifest lists, manifests, index and statistics files that are
        not in `keep` (adding what it deletes to `keep`, so nothing is deleted twice)."""
        doomed: list[str] = []

        def take(name: str | None, path: str) -> None:
            if name and name not in keep:
                keep.add(name)
                doomed.append(path)

        lists = [snapshot.base_manifest_list, snapshot.delta_manifest_list]
        if changelog and snapshot.changelog_manifest_list:
            lists.append(snapshot.changelog_manifest_list)
        for list_name in lists:
            try:
                metas = self.manifest_list(list_name)
            except CorruptMetadataError:
                metas = []
            for m in metas:
                take(m.file_name, self.store.path(m.file_name))
            take(list_name, self.store.path(list_name))
        if snapshot.index_manifest and snapshot.index_manifest not in keep:
            try:
                index = self.index_entries(snapshot.index_manifest)
            except CorruptMetadataError:
                index = []
            for e in index:
                take(e.file_name, self.index_path(e))
            take(snapshot.index_manifest, self.store.path(snapshot.index_manifest))
        if snapshot.statistics:
            take(snapshot.statistics, self.statistics_path(snapshot.statistics))
        for path in doomed:
            self.file_io.delete(path)
        return len(doomed)

    def clean_empty_directories(self) -> None:
        """Remove bucket and partition directories emptied by the deletions (local disks only:
        an object store has no directories)."""
        if not isinstance(self.file_io, LocalFileIO):
            return
        parents: set[str] = set()
        for partition, bucket in self.deleted_buckets:
            if try_delete_empty_dir(self.file_io, self.bucket_dir(partition, bucket)):
                part = self.partition_dir(partition)
                while part:
                    parents.add(f"{self.table.path}/{part}")
                    part = part.rsplit("/", 1)[0] if "/" in part else ""
        for path in sorted(parents, key=lambda p: -p.count("/")):  # deepest first
            try_delete_empty_dir(self.file_io, path)
        self.deleted_buckets.clear()


@dataclass
class SharedFiles:
    """What the table's other branches (main included) still reference: their snapshots and tags
    may share data files, changelog files and manifests with this branch's."""

    data: set[FileKey] = field(default_factory=set)
    metadata: set[str] = field(default_factory=set)


def other_branches_files(table: FileStore | HasStore, files: TableFiles) -> SharedFiles:
    """Every file a snapshot or tag of another branch of `table` uses (nothing without branches).
    A branch's files are those of its earliest snapshot and tags plus what its later deltas add.
    What each snapshot and tag contributes is kept per process (``_RefFiles``), so an expiry reads
    only the snapshots a branch gained since the last one, not the branch's whole history."""
    table = store_of(table)
    shared = SharedFiles()
    for ref in table.branches.ref_paths(exclude=table.branch):
        with _REF_LOCK:
            cached = _REF_FILES.pop(ref, None)
        ref_files = _RefFiles.refreshed(cached, files, ref)
        with _REF_LOCK:
            _REF_FILES[ref] = ref_files
        shared.data |= ref_files.earliest_live
        for data, metadata in ref_files.per_snapshot.values():
            shared.data |= data
            shared.metadata |= metadata
        for tag in TagManager(table.file_io, ref).tagged_snapshots():
            data, metadata = _tag_files(files, ref, tag)
            shared.data |= data
            shared.metadata |= metadata
    return shared


@dataclass
class _RefFiles:
    """What one branch's live snapshots contribute to `SharedFiles`: per snapshot, the data and
    changelog files its delta adds and the metadata files it names; and the data files of its
    earliest snapshot. Valid while `latest` is unchanged on disk: snapshots form a chain, so a
    rollback or fast-forward that replaced an older one replaced (or removed) the latest too."""

    latest: Snapshot | None = None
    earliest: Snapshot | None = None
    earliest_live: set[FileKey] = field(default_factory=set)
    per_snapshot: dict[int, tuple[frozenset[FileKey], frozenset[str]]] = field(default_factory=dict)

    @classmethod
    def refreshed(cls, cached: _RefFiles | None, files: TableFiles, ref: str) -> _RefFiles:
        manager = SnapshotManager(files.file_io, ref)
        earliest_id, latest_id = manager.earliest_id(), manager.latest_id()
        if earliest_id is None or latest_id is None:
            return cls()
        if cached is None or cached.latest is None or not _still(manager, cached.latest) or \
                cached.latest.id > latest_id:
            cached = cls()
        out = cls(latest=cached.latest, earliest=cached.earliest,
                  per_snapshot={sid: c for sid, c in cached.per_snapshot.items() if sid >= earliest_id})
        for sid in range(earliest_id, latest_id + 1):
            if sid in out.per_snapshot:
                continue
            try:
                snap = manager.snapshot(sid)
            except SnapshotNotFoundError:
                continue  # expired concurrently
            out.per_snapshot[sid] = _snapshot_files(files, snap)
            if out.latest is None or sid >= out.latest.id:
                out.latest = snap
        if cached.earliest is not None and cached.earliest.id == earliest_id and _still(manager, cached.earliest):
            out.earliest_live = cached.earliest_live
        else:
            with contextlib.suppress(SnapshotNotFoundError):
                out.earliest = manager.snapshot(earliest_id)
                out.earliest_live = files.live_keys(out.earliest)
        return out


def _still(manager: SnapshotManager, snapshot: Snapshot) -> bool:
    """Snapshot `snapshot.id` on disk is still `snapshot` (one read)."""
    try:
        return manager.snapshot(snapshot.id) == snapshot
    except SnapshotNotFoundError:
        return False


def _snapshot_files(files: TableFiles, snap: Snapshot) -> tuple[frozenset[FileKey], frozenset[str]]:
    data = {file_key(e) for e in files.added_in_delta(snap)} | {file_key(e) for e in files.changelog_files(snap)}
    metadata = files.metadata_names(snap)
    if snap.changelog_manifest_list:
        metadata.add(snap.changelog_manifest_list)
        metadata.update(m.file_name for m in files.manifest_list(snap.changelog_manifest_list))
    return frozenset(data), frozenset(metadata)


def _tag_files(files: TableFiles, ref: str, tag: Snapshot) -> tuple[frozenset[FileKey], frozenset[str]]:
    """A tag's data and metadata files, kept per process (a tag names one immutable snapshot)."""
    key = (ref, tag.id, tag.time_millis, tag.base_manifest_list, tag.delta_manifest_list)
    with _REF_LOCK:
        found = _TAG_FILES.get(key)
    if found is None:
        found = frozenset(files.live_keys(tag)), frozenset(files.metadata_names(tag))
        with _REF_LOCK:
            _TAG_FILES[key] = found
    return found


_REF_LOCK = threading.Lock()
_REF_FILES: dict[str, _RefFiles] = {}  # by branch path
_TAG_FILES: dict[tuple[str, int, int, str | None, str | None], tuple[frozenset[FileKey], frozenset[str]]] = {}


def try_delete_empty_dir(file_io: FileIO, path: str) -> bool:
    """Fails, harmlessly, if a concurrent writer put a file there meanwhile."""
    return file_io.delete_empty_dir(path)


# -- snapshot expiry ------------------------------------------------------------------------------


@metrics.expiry_run
def expire_snapshots(table: FileStore | HasStore, retain_min: int | None = None, retain_max: int | None = None,
                     time_retained_ms: int | None = None, max_deletes: int | None = None,
                     now_millis: int | None = None, latest_id: int | None = None) -> ExpireResult:
    """Expire snapshots by the table's options (``snapshot.num-retained.min/max``,
    ``snapshot.time-retained``, ``snapshot.expire.limit``), or the given overrides. `latest_id`
    (a snapshot just committed) saves looking the latest up; a stale one only expires less."""
    table = store_of(table)
    core = table.core
    retain_min = int(core.get("snapshot.num-retained.min")) if retain_min is None else retain_min
    retain_max = int(core.get("snapshot.num-retained.max")) if retain_max is None else retain_max
    time_retained_ms = int(core.get("snapshot.time-retained")) if time_retained_ms is None else time_retained_ms
    max_deletes = int(core.get("snapshot.expire.limit")) if max_deletes is None else max_deletes
    if retain_min < 1:
        raise ValueError(f"snapshot.num-retained.min must be at least 1, got {retain_min}")
    if retain_max < retain_min:
        raise ValueError(f"snapshot.num-retained.max ({retain_max}) must not be less than "
                         f"snapshot.num-retained.min ({retain_min})")
    now = int(time.time() * 1000) if now_millis is None else now_millis
    manager = table.snapshot_manager
    latest = manager.latest_id() if latest_id is None else latest_id
    earliest = manager.earliest_id()
    if latest is None or earliest is None:
        return ExpireResult()
    end = latest - retain_min + 1  # exclusive; protected by num-retained.min
    if end <= earliest:
        return ExpireResult()  # the common case after a commit: nothing to read
    low = max(latest - retain_max + 1, earliest)  # below this: over num-retained.max
    consumer_min = table.consumers.min_next_snapshot()
    if consumer_min is not None:
        end = min(end, consumer_min)
    end = min(end, earliest + max_deletes)
    older_than = now - time_retained_ms
    for sid in range(low, end):
        try:
            following = manager.snapshot(sid + 1)
        except SnapshotNotFoundError:
            continue  # expired concurrently
        if following.time_millis >= older_than:
            end = sid
            break
    return expire_until(table, earliest, end)


def expire_until(table: FileStore | HasStore, earliest: int, end: int) -> ExpireResult:
    """Expire the snapshots in [earliest, end); snapshot `end` must exist and becomes the earliest."""
    table = store_of(table)
    manager = table.snapshot_manager
    if end <= earliest:
        return ExpireResult()
    snapshots: list[Snapshot] = []
    for sid in range(earliest, end + 1):
        try:
            snapshots.append(manager.snapshot(sid))
        except SnapshotNotFoundError:
            continue  # already expired by a concurrent run
    if not snapshots or snapshots[-1].id != end:
        return ExpireResult()  # the end itself is gone: a concurrent run went further
    begin = snapshots[0].id
    expiring = snapshots[:-1]
    if not expiring:
        return ExpireResult()
    files = TableFiles(table)
    tags = table.tags.tagged_snapshots()
    shared = other_branches_files(table, files)

    # 1. plan (nothing is deleted yet): data files deleted in the deltas of (begin, end]
    doomed_data: list[ManifestEntry] = []
    tag_files: dict[int, set[FileKey]] = {}
    for snap in snapshots[1:]:
        previous_tags = [t for t in tags if t.id < snap.id]
        keep: set[FileKey] = set()
        if previous_tags:
            tag = previous_tags[-1]
            if tag.id not in tag_files:
                tag_files[tag.id] = files.live_keys(tag)
            keep = tag_files[tag.id]
        doomed_data.extend(e for e in files.deleted_in_delta(snap)
                           if file_key(e) not in keep and file_key(e) not in shared.data)
    doomed_changelog = [e for snap in expiring for e in files.changelog_files(snap)
                        if file_key(e) not in shared.data]
    keep_metadata = files.metadata_names(snapshots[-1]) | shared.metadata
    for tag in tags:
        keep_metadata |= files.metadata_names(tag)

    # 2. unpublish: snapshot files first (oldest first), then the EARLIEST hint
    for snap in expiring:
        manager.file_io.delete(manager.path(snap.id))
    manager.file_io.write_bytes(f"{manager.dir}/EARLIEST", str(end).encode())

    # 3. the files nothing references any more
    result = ExpireResult(expired=[s.id for s in expiring])
    result.data_files_deleted = files.delete_data_files(doomed_data) + files.delete_data_files(doomed_changelog)
    for snap in expiring:
        result.metadata_files_deleted += files.delete_metadata(snap, keep_metadata)
    if table.core.raw.get("snapshot.clean-empty-directories", "false").lower() == "true":
        files.clean_empty_directories()
    log.info("table %s: expired snapshots [%d, %d): %d data files, %d metadata files deleted",
             table.identifier, begin, end, result.data_files_deleted, result.metadata_files_deleted)
    return result


# -- tags -------------------------------------------------------------------------------------------


def create_tag(table: FileStore | HasStore, name: str, snapshot_id: int | None = None,
               time_retained_ms: int | None = None, ignore_if_exists: bool = False) -> Snapshot:
    """Tag a snapshot (the latest by default). Without `time_retained_ms` the table's
    ``tag.default-time-retained`` applies, if set. Then ``tag.num-retained-max`` is enforced."""
    table = store_of(table)
    if snapshot_id is None:
        snapshot = table.snapshot_manager.latest()
        if snapshot is None:
            raise SnapshotNotFoundError(f"table {table.identifier} has no snapshot to tag")
    else:
        snapshot = table.snapshot_manager.snapshot(snapshot_id)
    if time_retained_ms is None:
        default = table.core.get("tag.default-time-retained")
        time_retained_ms = int(default) if default is not None else None
    table.tags.create(name, snapshot, time_retained_ms, ignore_if_exists)
    expire_tags(table, time_based=False)
    return snapshot


def delete_tag(table: FileStore | HasStore, name: str) -> bool:
    """Delete a tag and the files only it kept alive (Paimon's ``TagManager.deleteTag``): when its
    snapshot expired, files the tag has but neither the previous tag nor the nearest later tag or
    snapshot has. False if there was no such tag."""
    table = store_of(table)
    tags = table.tags.list_all()
    mine = next((t for t in tags if t.name == name), None)
    if mine is None:
        return False
    snapshot = mine.snapshot
    manager = table.snapshot_manager
    if manager.exists(snapshot.id) or any(t.snapshot.id == snapshot.id for t in tags if t.name != name):
        table.tags.delete(name)  # the snapshot or another tag still holds every file
        return True
    tagged = sorted({t.snapshot.id: t.snapshot for t in tags}.values(), key=lambda s: s.id)
    neighbours: list[Snapshot] = []
    earlier = [s for s in tagged if s.id < snapshot.id]
    if earlier:
        neighbours.append(earlier[-1])
    later = [s for s in tagged if s.id > snapshot.id]
    earliest = manager.earliest_id()
    candidates = [*later[:1]]
    if earliest is not None:
        with contextlib.suppress(SnapshotNotFoundError):
            candidates.append(manager.snapshot(earliest))
    if candidates:
        neighbours.append(min(candidates, key=lambda s: s.id))
    files = TableFiles(table)
    shared = other_branches_files(table, files)
    keep_data, keep_metadata = shared.data, shared.metadata
    for n in neighbours:
        keep_data |= files.live_keys(n)
        keep_metadata |= files.metadata_names(n)
    mine_entries = merge_entries(files.entries(snapshot.base_manifest_list)
                                 + files.entries(snapshot.delta_manifest_list))
    table.tags.delete(name)
    files.delete_data_files(e for e in mine_entries if e.kind == FileKind.ADD and file_key(e) not in keep_data)
    files.delete_metadata(snapshot, keep_metadata, changelog=False)
    return True


def expire_tags(table: FileStore | HasStore, now: dt.datetime | None = None, time_based: bool = True) -> list[str]:
    """Delete tags past their ``tagTimeRetained`` and, with ``tag.num-retained-max``, the oldest
    tags beyond that count. Strata creates no tags automatically, so the count covers every tag,
    as Paimon's batch tag creation does."""
    table = store_of(table)
    now = now or dt.datetime.now()
    expired: list[str] = []
    tags = table.tags.list_all()
    if time_based:
        for tag in tags:
            expires = tag.expires_at()
            if expires is not None and now > expires:
                delete_tag(table, tag.name)
                expired.append(tag.name)
    max_tags = table.core.get("tag.num-retained-max")
    if max_tags is not None:
        remaining = [t for t in tags if t.name not in expired]
        for tag in remaining[:max(0, len(remaining) - int(max_tags))]:  # by snapshot id: oldest first
            delete_tag(table, tag.name)
            expired.append(tag.name)
    return expired


# -- after every commit -------------------------------------------------------------------------------


def maintain_after_commit(table: FileStore | HasStore, snapshot_id: int | None = None) -> None:
    """What a committer does after a successful commit unless the table is ``write-only``, in
    Paimon's order: tag expiry, partition expiry, consumer expiry, snapshot expiry. A failure is
    logged, not raised: the commit itself is durable."""
    table = store_of(table)
    if table.core.get("write-only"):
        return
    try:
        if table.file_io.list_status(table.tags.dir):
            expire_tags(table)
        maybe_expire_partitions(table)
        consumer_expiry = table.core.get("consumer.expiration-time")
        if consumer_expiry is not None:
            table.consumers.expire(int(consumer_expiry))
        expire_snapshots(table, latest_id=snapshot_id)
    except Exception:
        log.warning("table %s: maintenance after commit failed", table.identifier, exc_info=True)
