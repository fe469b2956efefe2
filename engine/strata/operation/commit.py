"""The commit protocol (FileStoreCommitImpl): messages -> manifests -> snapshot-N, atomically.

One commit publishes an APPEND (or OVERWRITE) snapshot for new files and, when there are
compaction results, a COMPACT snapshot. Publishing never overwrites: a taken id means retry
against the new latest snapshot. A replayed (commitUser, commitIdentifier) is a no-op.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from strata import metrics
from strata.errors import CommitFailedError
from strata.fs import FileIO
from strata.index.bucket_assigner import HashClaim, check_hash_claims, merge_bucket_index_files
from strata.index.hash_index import hash_index_path, read_hashes, write_hash_index
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, INDEX_TYPE_HASH, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry
from strata.operation.conflicts import apply_index_changes, check_conflicts, check_deletion_vector_conflicts
from strata.operation.manifests import ManifestStore
from strata.options import CoreOptions
from strata.schema.table_schema import TableSchema
from strata.snapshot.branches import branch_path
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.table.commit_message import CommitMessage
from strata.table.paths import PathFactory

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    snapshot_ids: list[int] = field(default_factory=list)
    skipped_as_duplicate: bool = False
    attempts: int = 0


@dataclass
class _Change:
    kind: str
    entries: list[ManifestEntry]
    overwrite_partitions: list[bytes] | None = None  # None: not an overwrite; []: whole table
    changelog: list[ManifestEntry] = field(default_factory=list)
    index: list[IndexManifestEntry] = field(default_factory=list)  # deletion-vector files ADDed / DELETEd
    hash_claims: list[HashClaim] = field(default_factory=list)  # new keys of dynamic-bucket index files


class FileStoreCommit:
    def __init__(self, file_io: FileIO, table_path: str, schema: TableSchema, commit_user: str,
                 publish: Callable[[SnapshotManager, Snapshot], bool] | None = None, branch: str | None = None):
        """`branch` picks whose snapshot/ the commit publishes to (files stay under `table_path`)."""
        self.file_io = file_io
        self.table_path = table_path
        self.schema = schema
        self.commit_user = commit_user
        self.core = CoreOptions(schema.options)
        self.snapshots = SnapshotManager(file_io, branch_path(table_path, branch))
        self.manifests = ManifestStore(
            file_io, table_path, schema, int(self.core.get("manifest.target-file-size")),
            int(self.core.get("manifest.merge-min-count")),
            _avro_codec(str(self.core.get("manifest.compression"))))
        self.paths = PathFactory(table_path)
        self.publish = publish or (lambda manager, snap: manager.publish(snap))
        self.key_order = key_decoder(schema) if schema.primary_keys else None
        # append tables with deletion vectors: each data file's vector is checked at commit
        self.append_vectors = not schema.primary_keys and bool(self.core.get("deletion-vectors.enabled"))
        self.metric_table = metrics.table_label(table_path)  # the `table` label; TableCommit gives db.table
        # computes a snapshot's properties from the snapshot it builds on (e.g. the log store's
        # per-bucket offsets, carried forward); None keeps the given properties
        self._attempt_index_manifest: str | None = None  # written by the current attempt
        self.properties_hook: Callable[[Snapshot | None, dict[str, str] | None], dict[str, str] | None] | None = None

    # -- public API --------------------------------------------------------------------------
    def commit(self, messages: Sequence[CommitMessage], identifier: int = BATCH_COMMIT_IDENTIFIER,
               properties: dict[str, str] | None = None, watermark: int | None = None) -> CommitResult:
        if self._already_committed(identifier):
            metrics.commit_duplicate(self.metric_table)
            return CommitResult(skipped_as_duplicate=True)
        if any(m.hash_claims for m in messages):
            self._merge_hash_index_files(messages)
        changes = []
        append = [e for m in messages for e in _entries(m, m.new_files, FileKind.ADD)]
        append_log = [e for m in messages for e in _entries(m, m.changelog_files, FileKind.ADD)]
        append_index = [e for m in messages for e in m.index_changes]
        if append or append_log or append_index:
            changes.append(_Change(CommitKind.APPEND, append, changelog=append_log, index=append_index,
                                   hash_claims=[c for m in messages for c in m.hash_claims]))
        compact = [e for m in messages for e in (*_entries(m, m.compact_before, FileKind.DELETE),
                                                 *_entries(m, m.compact_after, FileKind.ADD))]
        compact_log = [e for m in messages for e in _entries(m, m.compact_changelog_files, FileKind.ADD)]
        compact_index = [e for m in messages for e in m.compact_index_changes]
        if compact or compact_log or compact_index:
            changes.append(_Change(CommitKind.COMPACT, compact, changelog=compact_log, index=compact_index))
        if not changes and identifier == BATCH_COMMIT_IDENTIFIER:
            return CommitResult()
        if not changes:  # streaming: an empty commit still records progress of this identifier
            changes.append(_Change(CommitKind.APPEND, []))
        return self._commit_changes(changes, identifier, properties, watermark)

    def overwrite(self, messages: Sequence[CommitMessage], partitions: list[bytes] | None,
                  identifier: int = BATCH_COMMIT_IDENTIFIER,
                  properties: dict[str, str] | None = None) -> CommitResult:
        """Replace the given partitions (None: the whole table) with the messages' new files."""
        if self._already_committed(identifier):
            metrics.commit_duplicate(self.metric_table)
            return CommitResult(skipped_as_duplicate=True)
        entries = [e for m in messages for e in _entries(m, m.new_files, FileKind.ADD)]
        changelog = [e for m in messages for e in _entries(m, m.changelog_files, FileKind.ADD)]
        # dynamic-bucket tables: the replaced partitions' hash index gives way to the writers' new one
        if any(m.hash_claims for m in messages):
            self._merge_hash_index_files(messages)
        hash_files = [e for m in messages for e in m.index_changes
                      if e.index_type == INDEX_TYPE_HASH and e.kind == FileKind.ADD]
        change = _Change(CommitKind.OVERWRITE, entries, overwrite_partitions=partitions or [], changelog=changelog,
                         index=hash_files, hash_claims=[c for m in messages for c in m.hash_claims])
        return self._commit_changes([change], identifier, properties, None)

    def _merge_hash_index_files(self, messages: Sequence[CommitMessage]) -> None:
        """Dynamic buckets: several writers' index files of one bucket become one (their union)."""
        def read(entry: IndexManifestEntry):
            return read_hashes(self.file_io, self.table_path, entry)

        def write(partition: bytes, bucket: int, hashes) -> IndexManifestEntry:
            return write_hash_index(self.file_io, self.table_path, self.paths.new_index_file_name(), partition,
                                    bucket, hashes)

        merge_bucket_index_files(messages, read, write,
                                 lambda e: self.file_io.delete(hash_index_path(self.table_path, e)))

    def last_committed_identifier(self) -> int | None:
        """The newest identifier this commit user published (walking back from the latest)."""
        latest, earliest = self.snapshots.latest_id(), self.snapshots.earliest_id()
        if latest is None or earliest is None:
            return None
        for sid in range(latest, earliest - 1, -1):
            try:
                snap = self.snapshots.snapshot(sid)
            except KeyError:
                continue
            if snap.commit_user == self.commit_user:
                return snap.commit_identifier
        return None

    # -- internals --------------------------------------------------------------------------
    def _already_committed(self, identifier: int) -> bool:
        if identifier == BATCH_COMMIT_IDENTIFIER:
            return False
        last = self.last_committed_identifier()
        return last is not None and identifier <= last

    def _commit_changes(self, changes: list[_Change], identifier: int,
                        properties: dict[str, str] | None, watermark: int | None) -> CommitResult:
        result = CommitResult()
        for change in changes:
            delta_metas = self.manifests.write_manifests(change.entries, self.paths) \
                if change.overwrite_partitions is None else None
            with metrics.observe_commit(self.metric_table, change.kind, result):
                snapshot_id = self._try_commit(change, delta_metas, identifier, properties, watermark, result)
                if snapshot_id is not None:
                    result.snapshot_ids.append(snapshot_id)
        return result

    def _try_commit(self, change: _Change, delta_metas: list | None, identifier: int,
                    properties: dict[str, str] | None, watermark: int | None,
                    result: CommitResult) -> int | None:
        max_retries = int(self.core.get("commit.max-retries"))
        min_wait = int(self.core.get("commit.min-retry-wait"))
        max_wait = int(self.core.get("commit.max-retry-wait"))
        timeout = self.core.get("commit.timeout")
        started = time.monotonic()
        seen_latest: int | None = None
        for attempt in range(max_retries + 1):
            result.attempts += 1
            latest = self.snapshots.latest()
            if attempt > 0 and self._published_meanwhile(seen_latest, latest, identifier, change.kind):
                return None
            seen_latest = latest.id if latest else 0
            snapshot = self._build_snapshot(change, delta_metas, latest, identifier, properties, watermark)
            if snapshot is None:
                return None
            self.snapshots.expected_parent = latest  # publish fails if a fast-forward replaced it
            if self._publish(snapshot):
                metrics.commit_published(self.metric_table, change.kind, snapshot, self._attempt_entries)
                return snapshot.id
            metrics.commit_retry(self.metric_table, change.kind)
            self._cleanup_attempt(snapshot, delta_metas)
            if timeout is not None and (time.monotonic() - started) * 1000 > timeout:
                break
            wait = min(max_wait, min_wait * (2 ** attempt)) * (0.5 + random.random())
            time.sleep(wait / 1000)
        raise CommitFailedError(
            f"commit to {self.table_path} failed after {result.attempts} attempts: snapshot ids kept "
            "being taken; there may be commit conflicts between multiple jobs")

    def _publish(self, snapshot: Snapshot) -> bool:
        try:
            return self.publish(self.snapshots, snapshot)
        except OSError:
            # ambiguous failure: the snapshot may have landed; identical content counts as success
            try:
                landed = self.snapshots.snapshot(snapshot.id)
            except Exception:
                return False
            if landed.same_commit(snapshot):
                self.snapshots.commit_hints(snapshot.id)
                return True
            return False

    def _published_meanwhile(self, seen: int | None, latest: Snapshot | None, identifier: int,
                             kind: str) -> bool:
        """After a failed attempt: did an earlier attempt of ours land after all?"""
        if latest is None or seen is None:
            return False
        for sid in range(seen + 1, latest.id + 1):
            snap = self.snapshots.snapshot(sid)
            if (snap.commit_user == self.commit_user and snap.commit_identifier == identifier
                    and snap.commit_kind == kind):
                return True
        return False

    def _build_snapshot(self, change: _Change, delta_metas: list | None, latest: Snapshot | None,
                        identifier: int, properties: dict[str, str] | None,
                        watermark: int | None) -> Snapshot | None:
        base_metas = []
        if latest is not None:
            base_metas = (self.manifests.read_manifest_list(latest.base_manifest_list)
                          + self.manifests.read_manifest_list(latest.delta_manifest_list))
        entries = change.entries
        if change.overwrite_partitions is not None or change.kind == CommitKind.COMPACT \
                or any(e.kind == FileKind.DELETE for e in entries) or (self.append_vectors and change.index):
            live = self._live_entries(base_metas)
            if change.overwrite_partitions is not None:
                entries = self._overwrite_entries(live, change)
            check_conflicts(live, entries, self.key_order, self.table_path)
            if self.append_vectors and change.overwrite_partitions is None:
                live_index = self.manifests.read_index_manifest(latest.index_manifest if latest else None)
                check_deletion_vector_conflicts(live, live_index, entries, change.index, self.table_path)
        self._attempt_entries = entries  # what the snapshot adds and deletes, for the metrics
        if delta_metas is None:
            delta_metas = self.manifests.write_manifests(entries, self.paths)
        merged_base = self.manifests.merge(base_metas, self.paths)
        base_name, base_size = self.manifests.write_manifest_list(merged_base, self.paths)
        delta_name, delta_size = self.manifests.write_manifest_list(delta_metas, self.paths)
        log_name = log_size = None
        if change.changelog:
            log_metas = self.manifests.write_manifests(change.changelog, self.paths)
            log_name, log_size = self.manifests.write_manifest_list(log_metas, self.paths)
        added = sum(e.file.row_count for e in entries if e.kind == FileKind.ADD)
        deleted = sum(e.file.row_count for e in entries if e.kind == FileKind.DELETE)
        kind = change.kind
        if kind == CommitKind.APPEND and (deleted or change.index):
            kind = CommitKind.OVERWRITE  # rows removed (files or deletion vectors): not a plain append
        index_manifest = self._index_manifest(latest, change)
        total = (latest.total_record_count if latest else 0) + added - deleted
        if self.properties_hook is not None:
            properties = self.properties_hook(latest, properties)
        return Snapshot(
            id=(latest.id + 1) if latest else 1, schema_id=self.schema.id,
            base_manifest_list=base_name, base_manifest_list_size=base_size,
            delta_manifest_list=delta_name, delta_manifest_list_size=delta_size,
            commit_user=self.commit_user, commit_identifier=identifier, commit_kind=kind,
            time_millis=int(time.time() * 1000), total_record_count=total,
            delta_record_count=added - deleted,
            changelog_manifest_list=log_name, changelog_manifest_list_size=log_size,
            changelog_record_count=sum(e.file.row_count for e in change.changelog),
            watermark=watermark if watermark is not None else (latest.watermark if latest else None),
            properties=properties or None, uuid=str(uuid.uuid4()),
            index_manifest=index_manifest)

    def _index_manifest(self, latest: Snapshot | None, change: _Change) -> str | None:
        """The snapshot's index manifest: the previous one, or it with the change's index files
        applied (an overwrite also drops the deletion vectors of the partitions it replaces)."""
        previous = latest.index_manifest if latest else None
        self._attempt_index_manifest = None
        if not change.index and change.overwrite_partitions is None:
            return previous
        live = self.manifests.read_index_manifest(previous)
        if change.overwrite_partitions is not None:
            doomed = set(change.overwrite_partitions)  # empty: the whole table
            live = [e for e in live if e.index_type not in (INDEX_TYPE_DELETION_VECTORS, INDEX_TYPE_HASH)
                    or (doomed and e.partition not in doomed)]
        if change.hash_claims or any(e.index_type == INDEX_TYPE_HASH for e in change.index):
            check_hash_claims(live, change.index, change.hash_claims,
                              lambda e: read_hashes(self.file_io, self.table_path, e), self.table_path)
        # primary-key tables keep one index file of a kind per bucket (dynamic buckets too)
        whole_bucket = self.core.bucket > 0 or bool(self.schema.primary_keys)
        entries = apply_index_changes(live, change.index, self.table_path, whole_bucket=whole_bucket)
        if not entries and previous is None:
            return None
        self._attempt_index_manifest = self.manifests.write_index_manifest(entries, self.paths)
        return self._attempt_index_manifest

    def _live_entries(self, base_metas: list) -> list[ManifestEntry]:
        from strata.manifest.manifest_entry import live_files

        return live_files(self.manifests.read_entries(base_metas))

    def _overwrite_entries(self, live: list[ManifestEntry], change: _Change) -> list[ManifestEntry]:
        targets = change.overwrite_partitions
        if targets:
            # dynamic overwrite: partitions named explicitly
            wanted = set(targets)
            doomed = [e for e in live if e.partition in wanted]
        else:
            doomed = list(live)
        deletes = [ManifestEntry(FileKind.DELETE, e.partition, e.bucket, e.total_buckets, e.file) for e in doomed]
        return deletes + change.entries

    def _cleanup_attempt(self, snapshot: Snapshot, delta_metas: list | None) -> None:
        """Delete the manifest lists of a lost attempt (delta manifests are reused)."""
        for name in (snapshot.base_manifest_list, snapshot.delta_manifest_list, snapshot.changelog_manifest_list,
                     self._attempt_index_manifest):
            if name is None:
                continue
            self.file_io.delete(self.manifests.path(name))


def key_decoder(schema: TableSchema) -> Callable[[bytes], tuple]:
    """Decodes a serialized key BinaryRow into a comparable tuple."""
    from strata.format import binary_row

    types = [f.type.to_arrow() for f in schema.key_fields()]
    return lambda data: tuple(binary_row.deserialize(data, types))


def _entries(message: CommitMessage, files: list, kind: FileKind) -> list[ManifestEntry]:
    return [ManifestEntry(kind, message.partition, message.bucket, message.total_buckets, f) for f in files]


def _avro_codec(name: str) -> str:
    return {"zstd": "zstandard", "null": "null", "deflate": "deflate", "snappy": "snappy"}[name]
