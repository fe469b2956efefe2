"""Rollback of a table to an earlier snapshot or tag (Paimon's ``rollback_to``).

The target becomes the latest snapshot: every snapshot after it is deleted, and so is every tag
of a later snapshot. When the target is a tag whose snapshot has expired, the tag's snapshot is
written back as ``snapshot-<id>`` and becomes the earliest (and latest) snapshot.

Files: unlike current Paimon (which leaves them for ``remove_orphan_files``), the data files,
changelog files and manifests that only the deleted snapshots and tags used are deleted too. Data
files are matched by (partition, bucket, file name), so a file the deleted snapshots merely moved
to another level stays.

Order: the target snapshot file (if restored) and the ``LATEST`` hint first, then the later
snapshot files from the newest down (so the live ids stay one contiguous range ending at the
target), then the tags, and only then their files. Writers of the table must be stopped during a
rollback, as with Paimon: a commit built on a deleted snapshot would publish after the gap.
Last, a table with the Iceberg mirror publishes a new metadata version showing the target.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from strata.errors import SnapshotNotFoundError
from strata.iceberg import sync_after_commit
from strata.manifest.manifest_entry import FileKind, ManifestEntry, merge_entries
from strata.operation.expire import FileKey, TableFiles, file_key, other_branches_files
from strata.snapshot.snapshot import Snapshot
from strata.store import FileStore, HasStore, store_of

log = logging.getLogger(__name__)


@dataclass
class RollbackResult:
    snapshot_id: int
    deleted_snapshots: list[int] = field(default_factory=list)
    deleted_tags: list[str] = field(default_factory=list)
    data_files_deleted: int = 0
    metadata_files_deleted: int = 0


def resolve_target(table: FileStore | HasStore, target: int | str) -> tuple[Snapshot, bool]:
    """(the target snapshot, whether its snapshot file exists). An int is a snapshot id (or, if
    that snapshot expired, a tag of it, as Paimon); a str is a tag name."""
    table = store_of(table)
    manager = table.snapshot_manager
    if isinstance(target, str) and not target.isdigit():
        snapshot = table.tags.info(target).snapshot
        return snapshot, manager.exists(snapshot.id)
    sid = int(target)
    try:
        return manager.snapshot(sid), True
    except SnapshotNotFoundError:
        for tag in table.tags.list_all():
            if tag.snapshot.id == sid:
                return tag.snapshot, False
        raise SnapshotNotFoundError(f"cannot roll table {table.identifier} back to snapshot {sid}: "
                                    "no such snapshot or tag") from None


def rollback_to(table: FileStore | HasStore, target: int | str) -> RollbackResult:
    table = store_of(table)
    snapshot, exists = resolve_target(table, target)
    manager = table.snapshot_manager
    latest = manager.latest_id()
    earliest = manager.earliest_id()
    result = RollbackResult(snapshot.id)
    doomed_ids = [] if latest is None else [
        sid for sid in range(max(snapshot.id + 1, earliest or 1), latest + 1)]
    doomed: list[Snapshot] = []
    for sid in doomed_ids:
        try:
            doomed.append(manager.snapshot(sid))
        except SnapshotNotFoundError:
            continue
    tags = table.tags.list_all()
    doomed_tags = [t for t in tags if t.snapshot.id > snapshot.id]
    kept_tags = [t.snapshot for t in tags if t.snapshot.id <= snapshot.id]

    # 1. plan: files of the deleted snapshots and tags that the target does not have
    files = TableFiles(table)
    shared = other_branches_files(table, files)  # a branch may have started after the target
    keep_data = files.live_keys(snapshot) | shared.data
    keep_metadata = files.metadata_names(snapshot) | shared.metadata
    for kept in kept_tags:
        keep_metadata |= files.metadata_names(kept)
    candidates: list[ManifestEntry] = []
    first = True
    for snap in doomed:
        if first and not exists:
            # the target is an expired tag: the first remaining snapshot's whole content is suspect
            candidates.extend(e for e in merge_entries(files.entries(snap.base_manifest_list)
                                                       + files.entries(snap.delta_manifest_list))
                              if e.kind == FileKind.ADD)
        else:
            candidates.extend(files.added_in_delta(snap))
        candidates.extend(files.changelog_files(snap))
        first = False
    doomed_snapshot_ids = {s.id for s in doomed}
    for tag in doomed_tags:
        if tag.snapshot.id not in doomed_snapshot_ids:  # a tag of an expired snapshot
            candidates.extend(e for e in merge_entries(files.entries(tag.snapshot.base_manifest_list)
                                                       + files.entries(tag.snapshot.delta_manifest_list))
                              if e.kind == FileKind.ADD)
    seen: set[FileKey] = set()
    doomed_data = []
    for e in candidates:
        key = file_key(e)
        if key not in keep_data and key not in seen:
            seen.add(key)
            doomed_data.append(e)

    # 2. unpublish
    if not exists:
        snapshot = _without_expired_changelog(table, snapshot)
        manager.file_io.write_bytes(manager.path(snapshot.id), snapshot.to_json().encode())
        manager.file_io.write_bytes(f"{manager.dir}/EARLIEST", str(snapshot.id).encode())
    manager.file_io.write_bytes(f"{manager.dir}/LATEST", str(snapshot.id).encode())
    for snap in reversed(doomed):
        manager.file_io.delete(manager.path(snap.id))
        result.deleted_snapshots.append(snap.id)
    for tag in doomed_tags:
        table.tags.delete(tag.name)
        result.deleted_tags.append(tag.name)

    # 3. their files
    result.data_files_deleted = files.delete_data_files(doomed_data)
    for snap in [*doomed, *(t.snapshot for t in doomed_tags)]:
        result.metadata_files_deleted += files.delete_metadata(snap, keep_metadata)
    result.deleted_snapshots.sort()
    log.info("table %s: rolled back to snapshot %d (%d snapshots, %d tags, %d data files deleted)",
             table.identifier, snapshot.id, len(result.deleted_snapshots), len(result.deleted_tags),
             result.data_files_deleted)
    sync_after_commit(table)  # Iceberg readers see the rolled-back table now, not at the next commit
    return result


def _without_expired_changelog(table: FileStore, snapshot: Snapshot) -> Snapshot:
    """A tag's snapshot to publish again, without its changelog if expiry deleted any of it: a
    tag keeps its snapshot's data files, not its changelog (as in Paimon), and a published
    snapshot must not name a missing file."""
    listed = snapshot.changelog_manifest_list
    if listed is None or _changelog_intact(TableFiles(table), listed):
        return snapshot
    return replace(snapshot, changelog_manifest_list=None, changelog_manifest_list_size=None,
                   changelog_record_count=None)


def _changelog_intact(files: TableFiles, list_name: str) -> bool:
    """Whether the changelog's list, its manifests and its files all exist. Expiry deletes them
    one by one, files first: an expiry that stopped part way (a failed delete) leaves a list
    whose manifests or files are gone."""
    io, store = files.file_io, files.store
    if not io.exists(store.path(list_name)):
        return False
    metas = store.read_manifest_list(list_name)
    if not all(io.exists(store.path(m.file_name)) for m in metas):
        return False
    added = (e for e in merge_entries(store.read_entries(metas)) if e.kind == FileKind.ADD)
    return all(io.exists(path) for e in added for path in files.data_paths(e))
