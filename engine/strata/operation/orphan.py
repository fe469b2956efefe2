"""Orphan file removal (Paimon's ``remove_orphan_files``): files under the table directory that no
snapshot and no tag references, left by failed commits, killed writers or interrupted expiry.

Candidates are the files of ``manifest/``, ``index/``, ``statistics/``, the bucket directories
(``<k>=<v>/.../bucket-<n>/``), plus anything in ``snapshot/`` that is not a snapshot file or a
hint and the temporary files (``.*.tmp``) of ``tag/``, ``consumer/`` and ``schema/``. A candidate
is deleted only if it is older than the guard (`older_than_millis`, by default now minus one
day): a writer's new files, not committed yet, are unreferenced but young.

The candidates are listed *before* the used set is read, so a commit that lands meanwhile can only
reference files that are young (new) or that a snapshot read afterwards also references.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from strata import metrics
from strata.errors import CorruptMetadataError, SnapshotNotFoundError
from strata.fs import FileIO
from strata.fs.file_io import FileStatus
from strata.manifest.manifest_entry import FileKind, merge_entries
from strata.operation.expire import TableFiles, try_delete_empty_dir
from strata.snapshot.snapshot import Snapshot
from strata.snapshot.snapshot_manager import PUBLISH_LOCK
from strata.store import FileStore, HasStore, store_of

if TYPE_CHECKING:
    from strata.snapshot.snapshot_manager import SnapshotManager
    from strata.snapshot.tags import TagManager

log = logging.getLogger(__name__)

DEFAULT_OLDER_THAN_MS = 24 * 3600 * 1000
_SNAPSHOT_FILE = re.compile(r"^snapshot-\d+$")


@dataclass
class OrphanResult:
    deleted: list[str] = field(default_factory=list)  # paths (or, in a dry run, would-be deleted)
    deleted_bytes: int = 0
    kept_young: int = 0  # unreferenced but younger than the guard


def _name(status: FileStatus) -> str:
    return status.path.rstrip("/").rsplit("/", 1)[-1]


def _files(file_io: FileIO, directory: str) -> list[FileStatus]:
    return [s for s in file_io.list_status(directory) if not s.is_dir]


def _bucket_dirs(file_io: FileIO, directory: str, depth: int, mtimes: dict[str, int]) -> list[str]:
    """Bucket directories under `depth` levels of ``key=value`` partition directories (recording
    every directory's modification time in `mtimes`)."""
    children = [s for s in file_io.list_status(directory) if s.is_dir]
    if depth == 0:
        children = [s for s in children if _name(s).startswith("bucket-")]
        mtimes.update((s.path, s.mtime_millis) for s in children)
        return [s.path for s in children]
    out = []
    for s in children:
        if "=" in _name(s):
            mtimes[s.path] = s.mtime_millis
            out.extend(_bucket_dirs(file_io, s.path, depth - 1, mtimes))
    return out


def _is_temp(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")


def candidates(table: FileStore | HasStore) -> tuple[list[FileStatus], list[str], dict[str, int]]:
    """(candidate files, the bucket directories they were listed from, directory mtimes)."""
    table = store_of(table)
    io, root = table.file_io, table.path
    found: list[FileStatus] = []
    for sub in ("manifest", "index", "statistics"):
        found.extend(_files(io, f"{root}/{sub}"))
    mtimes: dict[str, int] = {}
    buckets = _bucket_dirs(io, root, len(table.schema.partition_keys), mtimes)
    for bucket in buckets:
        found.extend(_files(io, bucket))
    for s in _files(io, f"{root}/snapshot"):
        name = _name(s)
        if not _SNAPSHOT_FILE.match(name) and name not in ("EARLIEST", "LATEST", PUBLISH_LOCK):
            found.append(s)
    for sub in ("tag", "consumer", "schema"):
        found.extend(s for s in _files(io, f"{root}/{sub}") if _is_temp(_name(s)))
    return found, buckets, mtimes


def used_files(table: FileStore | HasStore) -> set[str]:
    """Names of every file a snapshot or tag of any branch references (manifest lists, manifests,
    index manifests and files, statistics, data files with their extra files, changelog files)."""
    table = store_of(table)
    from strata.snapshot.snapshot_manager import SnapshotManager
    from strata.snapshot.tags import TagManager

    files = TableFiles(table)
    used: set[str] = set()
    for ref in table.branches.ref_paths():
        used |= _used_by(files, SnapshotManager(table.file_io, ref), TagManager(table.file_io, ref))
    return used


def _used_by(files: TableFiles, manager: SnapshotManager, tag_manager: TagManager) -> set[str]:
    """The files one branch's snapshots and tags use."""
    snapshots: list[Snapshot] = []
    for sid in manager._listed_ids():
        try:
            snapshots.append(manager.snapshot(sid))
        except SnapshotNotFoundError:
            continue
    live_ids = {s.id for s in snapshots}
    # a tag's changelog dies with its snapshot (as in Paimon), so only live snapshots' count
    tags = [t for t in tag_manager.tagged_snapshots() if t.id not in live_ids]
    used: set[str] = set()
    for snap in [*snapshots, *tags]:
        try:
            used |= files.metadata_names(snap)
            for meta in files.manifest_list(snap.delta_manifest_list):
                used.add(meta.file_name)
            # the files live in the snapshot: a name only in a DELETE entry (a file an expired
            # snapshot had, left over by an interrupted expiry) is not used
            entries = files.entries(snap.base_manifest_list) + files.entries(snap.delta_manifest_list)
            for e in merge_entries(entries):
                if e.kind == FileKind.ADD:
                    used.add(e.file.file_name)
                    used.update(e.file.extra_files)
            if snap.changelog_manifest_list and snap.id in live_ids:
                used.add(snap.changelog_manifest_list)
                for meta in files.manifest_list(snap.changelog_manifest_list):
                    used.add(meta.file_name)
                    for e in files.store.read_manifest(meta.file_name):
                        used.add(e.file.file_name)
                        used.update(e.file.extra_files)
        except CorruptMetadataError:
            if snap.id not in live_ids or manager.exists(snap.id):
                raise  # a live snapshot or a tag with unreadable metadata: never guess, delete nothing
            continue  # expired while we read it
    return used


@metrics.orphan_cleanup_run
def remove_orphan_files(table: FileStore | HasStore, older_than_millis: int | None = None,
                        dry_run: bool = False) -> OrphanResult:
    """Delete unreferenced files last modified before `older_than_millis` (epoch millis; default
    now minus one day). Returns what was (or, with `dry_run`, would be) deleted."""
    table = store_of(table)
    now = int(time.time() * 1000)
    cutoff = now - DEFAULT_OLDER_THAN_MS if older_than_millis is None else older_than_millis
    if cutoff > now:
        raise ValueError("older_than must not be in the future: files being written now would be deleted")
    found, buckets, dir_mtimes = candidates(table)
    used = used_files(table)
    result = OrphanResult()
    for status in found:
        name = _name(status)
        if name in used:
            continue
        if status.mtime_millis >= cutoff:
            result.kept_young += 1
            continue
        result.deleted.append(status.path)
        result.deleted_bytes += status.size
        if not dry_run:
            table.file_io.delete(status.path)
    if not dry_run:
        # empty bucket and partition directories (local disks; rmdir fails if not empty), only
        # those older than the guard: a writer may have just created a new one for its first file
        depth = len(table.schema.partition_keys)
        for bucket in buckets:
            path = bucket
            for _ in range(depth + 1):
                if dir_mtimes.get(path, cutoff) >= cutoff or not try_delete_empty_dir(table.file_io, path):
                    break
                path = path.rsplit("/", 1)[0]
    log.info("table %s: %s %d orphan files (%d bytes); %d unreferenced files younger than the guard kept",
             table.identifier, "would delete" if dry_run else "deleted", len(result.deleted),
             result.deleted_bytes, result.kept_young)
    return result


def cutoff_millis(older_than: object, now_millis: int | None = None) -> int | None:
    """The age guard as epoch millis: a datetime (naive = local time), a timedelta or a duration
    string ('2 h', '1 d': files older than that), a timestamp string ('2024-05-01 12:00:00'), or
    epoch millis; None: the default (one day)."""
    import datetime as dt

    from strata.options import parse_duration_ms

    now = int(time.time() * 1000) if now_millis is None else now_millis
    if older_than is None:
        return None
    if isinstance(older_than, dt.datetime):
        return int(older_than.timestamp() * 1000)
    if isinstance(older_than, dt.timedelta):
        return now - int(older_than.total_seconds() * 1000)
    if isinstance(older_than, (int, float)):
        return int(older_than)
    if isinstance(older_than, str):
        try:
            return now - parse_duration_ms(older_than)
        except ValueError:
            return int(dt.datetime.fromisoformat(older_than.strip()).timestamp() * 1000)
    raise TypeError(f"older_than must be a datetime, timedelta, duration string or epoch millis, "
                    f"got {older_than!r}")
