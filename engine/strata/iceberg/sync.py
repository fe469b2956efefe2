"""Iceberg metadata for a Paimon table, written after each snapshot as Paimon's Iceberg
compatibility (``metadata.iceberg.storage``) does, over the same Parquet files.

What an Iceberg reader sees: an append table's every file; a primary-key table's top level
(fully merged); a deletion-vector table's every file above level 0 plus, for each data file with a
deletion vector, the same positions: at format version 2 (``metadata.iceberg.format-version``) a
position-delete Parquet file per vector, at format 3 an Iceberg deletion vector (a
``deletion-vector-v1`` blob; one Puffin file per deletion-vector index file holds its vectors).
32-bit vectors are widened to the 64-bit blob at format 3 (Paimon exports vectors only for
``deletion-vectors.bitmap64`` tables; converting the positions is cheap).

Format 3 also carries row lineage: the table's ``next-row-id``, each snapshot's ``first-row-id`` and
``added-rows``, each data manifest's ``first_row_id`` (assigned once, kept while the manifest is
carried forward; a rewritten manifest gets a new range) and null ``first_row_id`` in data files
(inherited). A format-2 history is carried on into format 3 (an upgrade); going back to 2 starts
the Iceberg history anew.

Layout (``table-location``): ``<table>/metadata/v<N>.metadata.json`` for Paimon snapshot N and
``version-hint.text`` holding N (after a rollback, versions are numbered on past the current
one: strata.iceberg.versions); ``hadoop-catalog`` puts the same under
``<warehouse>/iceberg/<db>/<table>/``. Iceberg snapshot ids and sequence numbers equal Paimon's
snapshot ids, and each Paimon snapshot gets its Iceberg snapshot (a commit that also compacts
publishes two), so ``FOR VERSION AS OF n`` is Paimon's snapshot n. Data file paths are spelled as
Paimon's export spells them (the table path, no ``file://`` added), so Paimon and Strata can take
turns on one table's Iceberg history.

Cost: a snapshot that follows the previously synced one adds one manifest for its visible new
files and carries the previous manifests forward; those listing a file it removes (a compaction,
an overwrite) are rewritten without it, the rest unchanged. When its deletion vectors changed,
the delete manifest is written anew. A schema or format change, or a gap, rewrite the manifests
of every visible file. A position-delete file (a Puffin file) is written once per vector (per
index file) and reused while its index file lives.
Decoded manifests are kept per process (they are immutable), so a writer's syncs do not read
the manifests they carry again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from strata.errors import CommitConflictError, CommitStateUnknownError, SnapshotNotFoundError
from strata.format import binary_row
from strata.iceberg import manifests as im
from strata.iceberg import statistics, versions
from strata.iceberg.deletes import DeleteFiles
from strata.iceberg.layout import FileLayout, read_layouts
from strata.iceberg.location import enabled, latest_metadata_location, table_location
from strata.iceberg.metadata import COMMIT_MARKER, SCHEMA_ONLY_VERSION, MetadataBuilder
from strata.iceberg.status import report_failure, report_success
from strata.iceberg.types import as_iceberg_value, bound_bytes, iceberg_type
from strata.iceberg.versions import VERSION_HINT, current_id, current_snapshot, format_version_of
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.manifest_entry import FileKind, ManifestEntry, merge_entries
from strata.scan.planner import TableScan
from strata.schema.table_schema import TableSchema
from strata.snapshot.snapshot import CommitKind, Snapshot
from strata.store import FileStore, HasStore, store_of

log = logging.getLogger(__name__)

MANIFEST_CHUNK = 20_000  # entries per manifest of a full rewrite (bounds each file's size)
SPLIT_FROM = 1_000  # a rewritten manifest keeps the partitions a commit touched apart from this many others
MAX_CATCH_UP = 8  # unpublished snapshots a sync still publishes one by one before the latest
PUBLISH_ATTEMPTS = 5  # versions a sync tries while concurrent syncs keep taking the next one


def _existing(entry: im.Entry, manifest: im.ManifestFile) -> im.Entry:
    """An entry of a rewritten manifest as it was: its snapshot and sequence number explicit
    (they may have been inherited from `manifest`), its row ids those of the new manifest."""
    return im.Entry(im.EXISTING, entry.snapshot_id if entry.snapshot_id is not None else manifest.added_snapshot_id,
                    entry.sequence_number if entry.sequence_number is not None else manifest.sequence_number,
                    dataclasses.replace(entry.file, first_row_id=None))


def _split_touched(entries: list[im.Entry], touched: set[tuple[Any, ...]]) -> list[list[im.Entry]]:
    """A rewritten manifest's entries, those of the `touched` partitions apart from the others
    once there are SPLIT_FROM of those: compactions and overwrites come back to the same
    partitions, and then rewrite the small manifest, not again the large one."""
    hot = [e for e in entries if e.file.partition in touched]
    cold = [e for e in entries if e.file.partition not in touched]
    if hot and len(cold) >= SPLIT_FROM:
        return [cold, hot]
    return [entries] if entries else []


def sync_after_commit(table: FileStore | HasStore) -> None:
    """The commit's follow-up: publish Iceberg metadata for the latest snapshot, then statistics
    if due. Never raises: the commit is durable whatever happens here; a failure (an unknown
    outcome included) is counted, logged in one warning line and left in the table's error file,
    and the next commit or ``strata iceberg sync`` catches up."""
    store = store_of(table)
    if not enabled(store):
        return
    try:
        sync = IcebergSync(store)
        sync.sync()
    except Exception as exc:
        report_failure(store, exc)
        return
    try:
        report_success(store)
    except Exception as exc:  # only bookkeeping: the metadata is published
        log.warning("table %s: Iceberg metadata published; clearing its error record failed (%s: %s)",
                    store.identifier, type(exc).__name__, exc)
    statistics.refresh_after_commit(store, sync.dir, sync.published)  # never raises


def publish_schema(table: FileStore | HasStore) -> None:
    """Schema-only Iceberg metadata (no snapshot) for a table that has none yet, so that Iceberg
    readers see the table, empty, from its creation on; refreshed on a schema change before the
    first snapshot. A failure is recorded as a failed sync (the table's creation stands). A table
    with snapshots that has no metadata yet (the option was just set) gets its latest snapshot's."""
    store = store_of(table)
    if not enabled(store):
        return
    try:
        if store.snapshot_manager.latest() is not None:
            if latest_metadata_location(store) is None:
                sync_after_commit(store)
            return
        IcebergSync(store).publish_schema()
    except Exception as exc:
        report_failure(store, exc, "schema-only Iceberg metadata not published")


def drop_mirror(table: FileStore | HasStore) -> None:
    """Remove Iceberg metadata kept outside the table's directory (``hadoop-catalog``) with the
    table: a dropped table leaves no Iceberg table behind."""
    store = store_of(table)
    location = table_location(store)
    if enabled(store) and location != store.path:
        store.file_io.delete_dir(location)


def _statistics_sibling(location: str) -> str:
    """``v<N>.stats.metadata.json`` for ``v<N>.metadata.json`` and the other way round: the two
    files of one metadata version go together."""
    base, name = location.rsplit("/", 1)
    number = int(name[1:name.index(".")])
    sibling = versions.statistics_file(base, number)
    return sibling if sibling != location else versions.metadata_file(base, number)


def _describes(entry: dict[str, Any], snapshot: Snapshot) -> bool:
    """The Iceberg snapshot `entry` was made of `snapshot`, not of one of the same id that a
    rollback or a fast-forward replaced. Strata names the commit in the entry's summary
    (COMMIT_MARKER). Without it (Paimon's Java mirror, Strata before it): the entry's time, which
    Strata stamps with its snapshot's commit time and Java (1.3) with the time it wrote the
    metadata, just after that commit; either is at or after the snapshot's commit, and a
    rolled-back one's is before its successor's (not so after a fast-forward, whose snapshots
    were committed on their branch, maybe earlier)."""
    if entry["snapshot-id"] != snapshot.id:
        return False
    marker = entry.get("summary", {}).get(COMMIT_MARKER)
    if marker is not None:
        return bool(marker == snapshot.delta_manifest_list)
    return int(entry["timestamp-ms"]) >= snapshot.time_millis


def _shows(metadata: dict[str, Any], snapshot: Snapshot) -> bool:
    """The metadata's current snapshot is `snapshot` (not one of the same id a rollback removed)."""
    return current_id(metadata) == snapshot.id and _describes(current_snapshot(metadata), snapshot)


@dataclass
class SyncResult:
    snapshot_id: int | None
    metadata_location: str | None
    full_rewrite: bool = False
    data_files: int = 0
    delete_files: int = 0
    up_to_date: bool = False  # nothing written: the snapshot's metadata was already published


class IcebergSync:
    """Builds and publishes the Iceberg metadata of one table's latest snapshot."""

    def __init__(self, table: FileStore | HasStore):
        self.store = store = store_of(table)
        self.file_io = store.file_io
        self.metadata = MetadataBuilder(store)
        self.location, self.dir, self.spec = self.metadata.location, self.metadata.dir, self.metadata.spec
        self.format_version = self.metadata.format_version
        self.schema = store.schema
        self.primary_key = bool(store.schema.primary_keys)
        self.deletion_vectors = bool(store.core.get("deletion-vectors.enabled"))
        self.compression = str(store.core.get("metadata.iceberg.manifest-compression"))
        self.prefix = uuid.uuid4().hex
        self._written = 0
        self._written_paths: list[str] = []  # files under this sync's prefix (deleted if it loses)
        self.deletes = DeleteFiles(store, self.dir, self.spec, self.prefix, self._written_paths, self._path,
                                   self._partition)
        self.published: dict[str, Any] | None = None  # the metadata the last _sync wrote

    # -- entry point -------------------------------------------------------------------------------
    def sync(self) -> SyncResult:
        snapshot = self.store.snapshot_manager.latest()
        if snapshot is None:
            return SyncResult(None, None)
        head = versions.current(self.file_io, self.dir)
        for missed in self._missed(snapshot, head):
            self._sync(missed, head)
            head = versions.current(self.file_io, self.dir)
        return self._sync(snapshot, head)

    def publish_schema(self) -> str:
        """Write v0.metadata.json: the table's current schema, no snapshot (unless a snapshot's
        metadata is already published)."""
        location = versions.metadata_file(self.dir, SCHEMA_ONLY_VERSION)
        if (versions.read_hint(self.file_io, self.dir) or SCHEMA_ONLY_VERSION) != SCHEMA_ONLY_VERSION:
            return location
        self.file_io.mkdirs(self.dir)
        metadata = self.metadata.schema_only(self._load(SCHEMA_ONLY_VERSION))
        self.file_io.write_bytes(location, json.dumps(metadata, indent=1).encode())
        self.file_io.write_bytes(f"{self.dir}/{VERSION_HINT}", str(SCHEMA_ONLY_VERSION).encode())
        return location

    def _missed(self, latest: Snapshot, head: versions.Version | None) -> list[Snapshot]:
        """The snapshots after the published metadata (`head`) and before `latest`, each to get its
        own Iceberg snapshot first, as Paimon's per-snapshot commit callback gives it (a commit that
        also compacts publishes two). Before any metadata: the earlier snapshots of the latest's
        commit (same user and identifier). A gap longer than MAX_CATCH_UP publishes the latest only."""
        manager = self.store.snapshot_manager
        first = max(latest.id - MAX_CATCH_UP, manager.earliest_id() or latest.id)
        published = None if head is None else current_id(head.metadata) or SCHEMA_ONLY_VERSION
        if published is not None:
            if published < first - 1 or published >= latest.id:
                return []
            first = published + 1
        out: list[Snapshot] = []
        for snapshot_id in range(latest.id - 1, first - 1, -1):
            if not manager.exists(snapshot_id):
                break
            snapshot = manager.snapshot(snapshot_id)
            if published is None and (snapshot.commit_user, snapshot.commit_identifier) != \
                    (latest.commit_user, latest.commit_identifier):
                break
            out.append(snapshot)
        return out[::-1]

    def _sync(self, snapshot: Snapshot, head: versions.Version | None, attempts: int = PUBLISH_ATTEMPTS
              ) -> SyncResult:
        """Publish the metadata of `snapshot` as the version after `head` (the current one).
        Versions are numbered by their snapshot while the table only moves forward; after a
        rollback the numbers go on past `head`: a published version is never rewritten, and
        Iceberg's Hadoop readers look past the hint for newer ones."""
        base = head.metadata if head is not None else None
        if head is not None and base is not None and _shows(base, snapshot):
            return SyncResult(snapshot.id, head.location, up_to_date=True)
        previous = base
        if previous is not None and not self._builds_on(previous, snapshot):
            previous = self._without_rolled_back(previous, snapshot)
        if previous is not None and format_version_of(previous) > self.format_version:
            log.info("table %s: Iceberg metadata goes back from format %d to %d: its history starts anew",
                     self.store.identifier, format_version_of(previous), self.format_version)
            previous = None  # Iceberg has no downgrade (as Paimon: metadata created without a base)
        number = snapshot.id if head is None else max(snapshot.id, head.number + 1)
        location = versions.metadata_file(self.dir, number)
        logged = versions.metadata_file(self.dir, head.number) if head is not None and current_id(base) else None
        self.file_io.mkdirs(self.dir)
        manifest_list, full, counts, lineage = self._manifest_list(snapshot, previous)
        metadata = self.metadata.table_metadata(snapshot, previous, manifest_list, counts, lineage, logged)
        if not self._publish(location, json.dumps(metadata, indent=1).encode()):
            self._discard_written()  # definitely not ours: another sync published this version
            return self._taken(snapshot, number, attempts)
        self._written_paths.clear()  # published: from here on they are the metadata's files
        self._repair_hint(number)
        self.published = metadata
        if head is not None and base is not None and previous is not None:
            if not head.with_statistics:
                # statistics published for the previous version while this one was built: carry them on
                carried = statistics.carry_forward(self.store, self.dir, head.number, number, metadata)
                if carried is not None:
                    base, self.published = carried
            try:
                self._clean(base, self.published, head.number)
            except OSError as exc:  # files left are only unreferenced ones: the next sync's clean retries
                log.warning("table %s: Iceberg metadata of snapshot %d published; cleaning older files "
                            "failed (%s)", self.store.identifier, snapshot.id, exc)
        return SyncResult(snapshot.id, location, full, counts["total-data-files"], counts["total-delete-files"])

    def _taken(self, snapshot: Snapshot, number: int, attempts: int) -> SyncResult:
        """Version `number` was published by another sync: it shows this snapshot (its hint is
        repaired, in case that sync failed to write it) or a newer one (nothing left to do), or
        an older or rolled-back one, and then this snapshot goes into the version after it."""
        taken = versions.load(self.file_io, self.dir, number)
        if taken is None:  # taken, then removed by a later version's cleanup: the hint moved past it
            taken = versions.current(self.file_io, self.dir)
            if taken is None or taken.number < number:
                raise CommitStateUnknownError(f"Iceberg metadata version {number} of {self.store.identifier} was "
                                              "taken and is gone; the next sync (or `strata iceberg sync`) settles it")
        shown = taken.metadata
        if _shows(shown, snapshot):
            self._repair_hint(taken.number)
            return SyncResult(snapshot.id, taken.location, up_to_date=True)
        newer = current_id(shown)
        if newer is not None and newer > snapshot.id and self._is_live(current_snapshot(shown)):
            return SyncResult(snapshot.id, taken.location, up_to_date=True)  # a later snapshot's sync won
        if attempts <= 1:
            raise CommitConflictError(f"table {self.store.identifier}: Iceberg metadata of snapshot {snapshot.id} "
                                      f"not published: concurrent syncs took the versions up to {taken.number}")
        return self._sync(snapshot, taken, attempts - 1)

    def _publish(self, location: str, data: bytes) -> bool:
        """True: our metadata version is published; False: a concurrent sync's is (ours is not).
        CommitStateUnknownError (every file kept) when neither can be told."""
        return versions.publish(self.file_io, location, data)

    def _repair_hint(self, version: int) -> None:
        """Point the hint at `version` unless it names a newer one (a version whose own hint write
        failed gets it now)."""
        if (versions.read_hint(self.file_io, self.dir) or 0) < version:
            self.file_io.write_bytes(f"{self.dir}/{VERSION_HINT}", str(version).encode())

    def _discard_written(self) -> None:
        """Delete the manifests, manifest list and Puffin files this sync wrote under its own prefix
        (no other metadata names them: its version was definitely not published)."""
        for path in self._written_paths:
            self._delete(path)
        self._written_paths.clear()

    # -- rollback ----------------------------------------------------------------------------------
    def _is_live(self, entry: dict[str, Any]) -> bool:
        """The Iceberg snapshot `entry` is still the table's snapshot of its id (not one a rollback
        removed, nor one a later commit of the same id replaced); an expired one counts as live."""
        manager = self.store.snapshot_manager
        try:
            return _describes(entry, manager.snapshot(entry["snapshot-id"]))
        except SnapshotNotFoundError:
            earliest = manager.earliest_id()
            return earliest is not None and entry["snapshot-id"] < earliest

    def _builds_on(self, previous: dict[str, Any], snapshot: Snapshot) -> bool:
        """`snapshot` follows the current snapshot of `previous` (no rollback in between)."""
        shown = current_id(previous)
        if shown is None:
            return True
        return shown < snapshot.id and self._is_live(current_snapshot(previous))

    def _without_rolled_back(self, previous: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
        """`previous` without what a rollback removed: only the snapshots older than `snapshot`
        that the table still has, the newest of them current. A rollback removes the newest
        snapshots, so below the newest live one all are live. The table uuid, schemas, row ids
        and metadata log go on."""
        older = sorted((s for s in previous.get("snapshots") or [] if s["snapshot-id"] < snapshot.id),
                       key=lambda s: s["snapshot-id"], reverse=True)
        newest_live = next((i for i, s in enumerate(older) if self._is_live(s)), len(older))
        kept = older[newest_live:][::-1]
        log.info("table %s: rolled back past Iceberg snapshot %s; the mirror goes on from %s",
                 self.store.identifier, current_id(previous), kept[-1]["snapshot-id"] if kept else "no snapshot")
        return {**previous, "snapshots": kept, "current-snapshot-id": kept[-1]["snapshot-id"] if kept else -1}

    def _load(self, version: int | None) -> dict[str, Any] | None:
        loaded = versions.load(self.file_io, self.dir, version)
        return None if loaded is None else loaded.metadata

    # -- manifests ---------------------------------------------------------------------------------
    def _manifest_list(self, snapshot: Snapshot, previous: dict[str, Any] | None
                       ) -> tuple[str, bool, dict[str, int], tuple[int, int] | None]:
        carried = self._append_delta(snapshot, previous) or self._rewrite_delta(snapshot, previous)
        if carried is not None:
            manifests, added = carried
            full = False
        else:
            manifests, added = self._full(snapshot, previous), []
            full = True
        manifests = manifests + added
        counts = {"total-data-files": sum(m.added_files + m.existing_files for m in manifests if m.content == im.DATA),
                  "total-records": sum(m.added_rows + m.existing_rows for m in manifests if m.content == im.DATA),
                  "total-delete-files": sum(m.added_files + m.existing_files for m in manifests
                                            if m.content == im.DELETES),
                  "total-position-deletes": sum(m.added_rows + m.existing_rows for m in manifests
                                                if m.content == im.DELETES),
                  "added-data-files": sum(m.added_files for m in added) if not full else 0}
        parent = current_id(previous)
        lineage = self._assign_row_ids(manifests, previous) if self.format_version >= 3 else None
        path = f"{self.dir}/snap-{snapshot.id}-{self.prefix}.avro"
        self._written_paths.append(path)
        self.file_io.write_bytes(path, im.encode_manifest_list(manifests, snapshot.id, parent, snapshot.id,
                                                               self.compression, self.format_version,
                                                               lineage[0] if lineage else 0))
        return path, full, counts, lineage

    @staticmethod
    def _assign_row_ids(manifests: list[im.ManifestFile], previous: dict[str, Any] | None) -> tuple[int, int]:
        """Format 3 row lineage: each data manifest without a first_row_id gets the next range
        (its added and existing rows, the spec's simple valid approach), starting at the table's
        next-row-id (0 after an upgrade). Returns the snapshot's (first-row-id, added-rows)."""
        first = int((previous or {}).get("next-row-id") or 0)
        next_id = first
        for m in manifests:
            if m.content == im.DATA and m.first_row_id is None:
                m.first_row_id = next_id
                next_id += m.added_rows + m.existing_rows
        return first, next_id - first

    def _append_delta(self, snapshot: Snapshot, previous: dict[str, Any] | None
                      ) -> tuple[list[im.ManifestFile], list[im.ManifestFile]] | None:
        """An APPEND right after the previously synced snapshot: its visible new files in one new
        manifest, the previous manifests carried forward. None when a full rewrite is needed."""
        if snapshot.commit_kind != CommitKind.APPEND:
            return None
        base = self._delta_base(snapshot, previous)
        if base is None:
            return None
        delta, carried = base
        if any(e.kind != FileKind.ADD for e in delta):
            return None
        deletes_changed = self.deletion_vectors and self._index_changed(snapshot)
        return self._with_deletes(snapshot, previous, carried, deletes_changed), \
            self._added_manifest(snapshot, self._visible(delta))

    def _rewrite_delta(self, snapshot: Snapshot, previous: dict[str, Any] | None
                       ) -> tuple[list[im.ManifestFile], list[im.ManifestFile]] | None:
        """Any other snapshot right after the previously synced one (a compaction, an overwrite):
        the previous manifests that list none of the visible files it removes carried forward,
        those that do rewritten without them (their other files EXISTING, as they were), its
        visible new files in one new manifest, and on a deletion-vector table its delete files
        anew. A rewrite of every manifest cost a compaction commit time in proportion to the
        table's files. None when a full rewrite is needed, also when a removed file is not where
        the previous metadata should list it."""
        base = self._delta_base(snapshot, previous)
        if base is None:
            return None
        delta, carried = base
        removed = {self._path(e) for e in self._visible([e for e in delta if e.kind == FileKind.DELETE])}
        added = self._visible([e for e in delta if e.kind == FileKind.ADD])
        moved = removed & {self._path(e) for e in added}  # e.g. upgraded between two visible levels
        removed -= moved
        added = [e for e in added if self._path(e) not in moved]
        kept: list[im.ManifestFile] = []
        found = 0
        partitions = {self._partition(e.partition) for e in delta if e.kind == FileKind.DELETE
                      and self._path(e) in removed}
        for manifest in carried:
            listed = removed & im.live_paths(self.file_io, manifest, self.spec) \
                if manifest.content == im.DATA and removed and im.may_hold_partitions(manifest, self.spec, partitions) \
                else set()
            if not listed:
                kept.append(manifest)
                continue
            found += len(listed)
            entries = [e for e in im.read_entries(self.file_io, manifest, self.spec) if e.status != im.DELETED]
            touched = {e.file.partition for e in entries if e.file.path in listed}
            rest = [_existing(e, manifest) for e in entries if e.file.path not in listed]
            kept.extend(self._write_manifest(part, im.DATA, snapshot.id) for part in _split_touched(rest, touched))
        if found != len(removed):
            return None
        # a removed file's vector may stay in an index file a compaction kept: deletes are redone
        kept = self._with_deletes(snapshot, previous, kept, self.deletion_vectors)
        return kept, self._added_manifest(snapshot, added)

    def _with_deletes(self, snapshot: Snapshot, previous: dict[str, Any] | None, carried: list[im.ManifestFile],
                      recompute: bool) -> list[im.ManifestFile]:
        """The carried manifests, their delete manifests replaced by one of the snapshot's delete
        files when `recompute` (deletion vectors changed); the delete files of index files that
        did not change are reused, as a full rewrite reuses them."""
        if not recompute:
            return carried
        visible = self._visible(TableScan(self.store, snapshot_id=snapshot.id).plan_entries(snapshot))
        deletes = self.deletes.for_snapshot(snapshot, visible, previous, self.format_version)
        kept = [m for m in carried if m.content != im.DELETES]
        if deletes:
            entries = [im.Entry(im.ADDED, snapshot.id, snapshot.id, f) for f in deletes]
            kept.append(self._write_manifest(entries, im.DELETES, snapshot.id))
        return kept

    def _delta_base(self, snapshot: Snapshot, previous: dict[str, Any] | None
                    ) -> tuple[list[ManifestEntry], list[im.ManifestFile]] | None:
        """The snapshot's merged delta and the previous metadata's manifests, when the snapshot
        follows the previously synced one directly, under its schema and format version; else
        None."""
        if previous is None or current_id(previous) != snapshot.id - 1 or \
                snapshot.schema_id != previous["current-schema-id"] or \
                format_version_of(previous) != self.format_version:
            return None
        carried = im.read_manifest_list(self.file_io, current_snapshot(previous)["manifest-list"])
        if self.format_version >= 3 and "paimon.snapshot-id" not in previous.get("properties", {}) and \
                any(m.content == im.DELETES for m in carried):
            return None  # Paimon's format-3 deletes point into its index files: replaced by Puffin files
        store = self.store.manifest_store
        return merge_entries(store.read_entries(store.read_manifest_list(snapshot.delta_manifest_list))), carried

    def _added_manifest(self, snapshot: Snapshot, visible: list[ManifestEntry]) -> list[im.ManifestFile]:
        if not visible:
            return []
        entries = [im.Entry(im.ADDED, snapshot.id, snapshot.id, f) for f in self._data_files(visible, {})]
        return [self._write_manifest(entries, im.DATA, snapshot.id)]

    def _index_changed(self, snapshot: Snapshot) -> bool:
        manager = self.store.snapshot_manager
        if not manager.exists(snapshot.id - 1):
            return True  # expired already (the commit's expiry runs first): rewrite to be sure
        return manager.snapshot(snapshot.id - 1).index_manifest != snapshot.index_manifest

    def _full(self, snapshot: Snapshot, previous: dict[str, Any] | None) -> list[im.ManifestFile]:
        visible = self._visible(TableScan(self.store, snapshot_id=snapshot.id).plan_entries(snapshot))
        files = self._data_files(visible, self._known_layouts(previous))
        out = []
        for start in range(0, len(files), MANIFEST_CHUNK):
            entries = [im.Entry(im.ADDED, snapshot.id, snapshot.id, f) for f in files[start:start + MANIFEST_CHUNK]]
            out.append(self._write_manifest(entries, im.DATA, snapshot.id))
        if self.deletion_vectors:
            deletes = self.deletes.for_snapshot(snapshot, visible, previous, self.format_version)
            if deletes:
                out.append(self._write_manifest([im.Entry(im.ADDED, snapshot.id, snapshot.id, f) for f in deletes],
                                                im.DELETES, snapshot.id))
        return out

    def _visible(self, entries: Sequence[ManifestEntry]) -> list[ManifestEntry]:
        """The files an Iceberg reader may read without merging."""
        if not self.primary_key:
            return list(entries)
        if self.deletion_vectors:
            return [e for e in entries if e.file.level > 0]
        top = self.store.core.num_levels - 1
        return [e for e in entries if e.file.level == top]

    def _write_manifest(self, entries: list[im.Entry], content: int, snapshot_id: int) -> im.ManifestFile:
        self._written += 1
        path = f"{self.dir}/{self.prefix}-s{snapshot_id}-m{self._written}.avro"
        self._written_paths.append(path)
        data = im.encode_manifest(entries, self.spec, self.metadata.spec_json(), self.metadata.iceberg_schema, content,
                                  self.compression, self.format_version)
        self.file_io.write_bytes(path, data)
        im.DECODED_ENTRIES.put(path, entries, len(entries))  # entries come back from a read as written
        added = [e for e in entries if e.status == im.ADDED]
        existing = [e for e in entries if e.status == im.EXISTING]
        return im.ManifestFile(path, len(data), content, snapshot_id, min(e.sequence_number for e in entries),
                               snapshot_id, len(added), len(existing), sum(e.file.record_count for e in added),
                               sum(e.file.record_count for e in existing), self._summaries(entries))

    def _summaries(self, entries: list[im.Entry]) -> list[dict[str, Any]]:
        out = []
        for i, p in enumerate(self.spec):
            values = [e.file.partition[i] for e in entries]
            present = [v for v in values if v is not None]
            out.append({"contains_null": len(present) < len(values), "contains_nan": False,
                        "lower_bound": bound_bytes(min(present), p.iceberg_type) if present else None,
                        "upper_bound": bound_bytes(max(present), p.iceberg_type) if present else None})
        return out

    # -- files -------------------------------------------------------------------------------------
    def _partition(self, partition: bytes) -> tuple[Any, ...]:
        fields = self.schema.partition_fields()
        if not fields:
            return ()
        types = [f.type.to_arrow() for f in fields]
        values = binary_row.deserialize(partition, types)
        return tuple(as_iceberg_value(v, t) for v, t in zip(values, types, strict=True))

    def _path(self, entry: ManifestEntry) -> str:
        """A data file's path spelled as Paimon's Iceberg export spells it: the table path as the
        catalog has it (no file:// added), so that a Paimon writer committing after this sync finds
        the entries of the files its compaction removes (it matches paths as strings)."""
        if entry.file.external_path:
            return entry.file.external_path
        fields = self.schema.partition_fields()
        values = binary_row.deserialize(entry.partition, [f.type.to_arrow() for f in fields]) if fields else []
        bucket_dir = self.store.paths.bucket_dir(self.store.partition_dir(values), entry.bucket)
        return f"{bucket_dir}/{entry.file.file_name}"

    def _data_files(self, entries: Sequence[ManifestEntry], known: dict[str, FileLayout]) -> list[im.DataFile]:
        """The Iceberg data files of `entries`, with the layouts `known` (path -> layout) and the
        footers of the others read now."""
        paths = [self._path(e) for e in entries]
        read = read_layouts(self.file_io, [p for p in paths if p not in known])
        return [self._data_file(e, p, known.get(p) or read.get(p)) for e, p in zip(entries, paths, strict=True)]

    def _known_layouts(self, previous: dict[str, Any] | None) -> dict[str, FileLayout]:
        """The layouts the previous metadata's data manifests hold (a rewrite carries them on)."""
        if previous is None or current_id(previous) is None:
            return {}
        files = im.listed_files(self.file_io, current_snapshot(previous)["manifest-list"], self.spec, im.DATA)
        return {f.path: FileLayout(f.column_sizes, f.split_offsets or []) for f in files
                if f.column_sizes or f.split_offsets}

    def _data_file(self, entry: ManifestEntry, path: str, layout: FileLayout | None) -> im.DataFile:
        f = entry.file
        null_counts, lower, upper = self._stats(f)
        return im.DataFile(0, path, self._partition(entry.partition), f.row_count, f.file_size, null_counts, lower,
                           upper, column_sizes=layout.column_sizes if layout else {},
                           value_counts=dict.fromkeys(null_counts, f.row_count),
                           split_offsets=(layout.split_offsets or None) if layout else None)

    def _stats(self, f: DataFileMeta) -> tuple[dict[int, int], dict[int, bytes], dict[int, bytes]]:
        """Column null counts and bounds by field id, for the columns whose type is unchanged."""
        if f.value_stats.is_empty():
            return {}, {}, {}
        file_schema: TableSchema = self.store.schema_at(f.schema_id)
        names = f.value_stats_cols if f.value_stats_cols is not None else file_schema.field_names
        fields = [file_schema.field(n) for n in names]
        types = [fd.type.to_arrow() for fd in fields]
        try:
            mins = binary_row.deserialize(f.value_stats.min_values, types)
            maxs = binary_row.deserialize(f.value_stats.max_values, types)
        except ValueError:  # collections have no min/max slots: keep only the null counts
            mins = maxs = [None] * len(fields)
        current = {fd.id: fd for fd in self.schema.fields}
        null_counts: dict[int, int] = {}
        lower: dict[int, bytes] = {}
        upper: dict[int, bytes] = {}
        for fd, arrow_type, low, high, nulls in zip(fields, types, mins, maxs, f.value_stats.null_counts,
                                                    strict=True):
            now = current.get(fd.id)
            if now is None or now.type.root != fd.type.root or now.type.to_arrow() != arrow_type or now.type.is_nested:
                continue  # Iceberg's metrics are of primitive columns (a collection's are of its leaves)
            if nulls is not None:
                null_counts[fd.id] = nulls
            if low is not None and high is not None:
                kind = iceberg_type(now.type, now.name)
                low, high = as_iceberg_value(low, arrow_type), as_iceberg_value(high, arrow_type)
                if kind in ("float", "double"):  # a zero bound covers both zeros, as Parquet's writers do
                    low, high = (-0.0 if low == 0 else low), (0.0 if high == 0 else high)
                lower[fd.id] = bound_bytes(low, kind)
                upper[fd.id] = bound_bytes(high, kind)
        return null_counts, lower, upper

    # -- expiry ------------------------------------------------------------------------------------
    def _clean(self, previous: dict[str, Any], metadata: dict[str, Any], previous_version: int | None) -> None:
        """Files only expired or rolled-back Iceberg snapshots used, and metadata versions past the
        kept ones (`previous_version`: the v<N> of `previous`; 0 for the schema-only metadata). A
        manifest is carried forward over a contiguous run of snapshots, so one that neither the
        oldest kept snapshot, nor the newest kept before the current one, nor the current one lists
        is used by no kept snapshot."""
        kept_lists = {s["manifest-list"] for s in metadata["snapshots"]}
        for path in statistics.unreferenced(previous, metadata, self.dir):
            self._delete(path)
        dropped = [s for s in previous.get("snapshots", []) if s["manifest-list"] not in kept_lists]
        if dropped:
            kept = sorted(metadata["snapshots"], key=lambda s: s["snapshot-id"])
            still_used: set[str] = set()
            for manifest_list in {kept[0]["manifest-list"], kept[max(len(kept) - 2, 0)]["manifest-list"],
                                  kept[-1]["manifest-list"]}:
                still_used |= self._referenced(manifest_list)
            for snap in dropped:
                for path in self._referenced(snap["manifest-list"]) - still_used:
                    self._delete(path)
                self._delete(snap["manifest-list"])
        if self.store.core.get("metadata.iceberg.delete-after-commit.enabled"):
            logged = {e["metadata-file"] for e in metadata["metadata-log"]}
            for entry in [*previous.get("metadata-log", []),
                          {"metadata-file": versions.metadata_file(self.dir, previous_version or 0)}]:
                if entry["metadata-file"] not in logged:
                    self._delete(entry["metadata-file"])
                    self._delete(_statistics_sibling(entry["metadata-file"]))

    def _referenced(self, manifest_list: str) -> set[str]:
        """The manifests and the delete files of ours (position-delete or Puffin files in the
        metadata directory; not Paimon's deletion-vector index files, which its format-3 export
        names as Puffin deletes) one manifest list reaches."""
        try:
            manifests = im.read_manifest_list(self.file_io, manifest_list)
        except FileNotFoundError:
            return set()
        out = {m.path for m in manifests}
        for m in manifests:
            if m.content == im.DELETES:
                out |= {e.file.path for e in im.read_entries(self.file_io, m, self.spec)
                        if e.file.path.startswith(f"{self.dir}/")}
        return out

    def _delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.file_io.delete(path)
