"""The commit protocol (FileStoreCommitImpl): messages -> manifests -> snapshot-N, atomically.

One commit publishes an APPEND (or OVERWRITE) snapshot for new files and, when there are
compaction results, a COMPACT snapshot. Publishing never overwrites: a taken id means retry
against the new latest snapshot. A replayed (commitUser, commitIdentifier) is a no-op. A COMPACT
that fails after its APPEND published does not fail the commit: the batch is in, and the result
says why its compaction is not (``CommitResult.compaction_failure``).

Each publish attempt ends one of three ways (ARCHITECTURE decision 9):
* published: snapshot-N is ours (also when an ambiguous write is read back and found ours);
* not published, definitely: N is another commit's, or the attempt failed before writing; its
  manifest lists are deleted and the commit retries on the new latest snapshot. An attempt whose
  write was ambiguous and whose read-back found N absent keeps its files (a delayed write could
  still land; orphan cleanup removes them otherwise); later attempts read snapshot N once it
  exists, and it is ours only if it names that attempt's delta manifest list (a name no other
  attempt uses: another job with the same commit user and identifier is not us). If such an
  attempt is still unsettled when the retries run out, the outcome is unknown;
* unknown: the write was ambiguous and snapshot-N could not be read back either. Nothing is
  deleted and ``CommitStateUnknownError`` says how to resolve it.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from strata import metrics
from strata.errors import CommitFailedError, CommitStateUnknownError, SnapshotNotFoundError
from strata.fs import FileIO
from strata.index.bucket_assigner import HashClaim, MergedIndexFiles, check_hash_claims, merge_bucket_index_files
from strata.index.hash_index import hash_index_path, read_hashes, write_hash_index
from strata.io.paths import PathFactory
from strata.manifest.commit_message import CommitMessage
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS, INDEX_TYPE_HASH, IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry
from strata.manifest.manifest_store import ManifestStore
from strata.operation.conflicts import apply_index_changes, check_conflicts, check_deletion_vector_conflicts
from strata.options import CoreOptions
from strata.schema.table_schema import TableSchema
from strata.snapshot.branches import branch_path
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER, CommitKind, Snapshot
from strata.snapshot.snapshot_manager import NothingPublishedError, SnapshotManager

log = logging.getLogger(__name__)


@dataclass
class CommitResult:
    snapshot_ids: list[int] = field(default_factory=list)  # the snapshots this commit published
    skipped_as_duplicate: bool = False  # a replay of a (user, identifier) already published
    attempts: int = 0
    read_backs: int = 0  # ambiguous writes settled by reading the snapshot back
    # work after the commit (strata.operation.callbacks) that failed: callback name -> error; the
    # commit itself stands
    callback_failures: dict[str, str] = field(default_factory=dict)
    # the writer's compaction, when it failed after the APPEND snapshot published (the batch is in;
    # its compaction is not): why
    compaction_failure: str | None = None

    @property
    def published(self) -> bool:
        return bool(self.snapshot_ids)


_PUBLISHED, _TAKEN, _NOT_LANDED = "published", "taken", "not-landed"  # outcomes of one attempt


@dataclass
class _Change:
    kind: str
    entries: list[ManifestEntry]
    overwrite_partitions: list[bytes] | None = None  # None: not an overwrite; []: whole table
    changelog: list[ManifestEntry] = field(default_factory=list)
    index: list[IndexManifestEntry] = field(default_factory=list)  # deletion-vector files ADDed / DELETEd
    hash_claims: list[HashClaim] = field(default_factory=list)  # new keys of dynamic-bucket index files


def _touched_partitions(change: _Change) -> set[bytes] | None:
    """The partitions a change adds to, deletes from, marks rows in or overwrites; None when it
    overwrites the whole table."""
    if change.overwrite_partitions is not None and not change.overwrite_partitions:
        return None
    return ({e.partition for e in change.entries} | {e.partition for e in change.index}
            | set(change.overwrite_partitions or ()))


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
        # tables with deletion vectors: each data file's vector is checked at commit (primary-key
        # tables too: a writer's compaction marks rows of files a concurrent compaction may rewrite)
        self.deletion_vectors = bool(self.core.get("deletion-vectors.enabled"))
        # append tables carry deletion-vector changes in APPEND snapshots too (deletes by predicate)
        self.append_vectors = not schema.primary_keys and self.deletion_vectors
        self.metric_table = metrics.table_label(table_path)  # the `table` label; TableCommit gives db.table
        self._attempt_index_manifest: str | None = None  # written by the current attempt
        # the replay cache: the snapshot a walk for this user's newest identifier started at, and
        # the identifier it found (the snapshot is compared again, so a rollback voids the answer)
        self._user_scan: tuple[Snapshot | None, int | None] = (None, None)
        self._may_have_published = False  # this call published, or an attempt of it may still land
        self._known_latest: Snapshot | None = None  # the newest snapshot this commit call read or published
        # computes a snapshot's properties from the snapshot it builds on (e.g. the log store's
        # per-bucket offsets, carried forward); None keeps the given properties
        self.properties_hook: Callable[[Snapshot | None, dict[str, str] | None], dict[str, str] | None] | None = None

    # -- public API --------------------------------------------------------------------------
    def commit(self, messages: Sequence[CommitMessage], identifier: int = BATCH_COMMIT_IDENTIFIER,
               properties: dict[str, str] | None = None, watermark: int | None = None) -> CommitResult:
        self._known_latest, self._may_have_published = None, False
        replay = self.replay_of(identifier)
        if replay is not None:
            return replay
        merged = self._merge_hash_index_files(messages)
        with self._settling(merged):
            return self._commit_messages(merged.messages, identifier, properties, watermark)

    def _commit_messages(self, messages: Sequence[CommitMessage], identifier: int,
                         properties: dict[str, str] | None, watermark: int | None) -> CommitResult:
        changes = []
        append = [e for m in messages for e in _entries(m, m.new_files, FileKind.ADD)]
        append_log = [e for m in messages for e in _entries(m, m.changelog_files, FileKind.ADD)]
        append_index = [e for m in messages for e in m.index_changes]
        if append or append_log or append_index:
            changes.append(_Change(CommitKind.APPEND, append, changelog=append_log, index=append_index,
                                   hash_claims=[c for m in messages for c in m.hash_claims]))
        changes.extend(_compaction_changes(messages))
        if not changes and identifier == BATCH_COMMIT_IDENTIFIER:
            return CommitResult()
        if not changes:  # streaming: an empty commit still records progress of this identifier
            changes.append(_Change(CommitKind.APPEND, []))
        return self._commit_changes(changes, identifier, properties, watermark)

    def overwrite(self, messages: Sequence[CommitMessage], partitions: list[bytes] | None,
                  identifier: int = BATCH_COMMIT_IDENTIFIER,
                  properties: dict[str, str] | None = None) -> CommitResult:
        """Replace the given partitions (None: the whole table) with the messages' new files, then
        publish the writer's compaction of them (a COMPACT, as Paimon's overwrite does): readers
        of deletion-vector and first-row tables skip the level-0 files the OVERWRITE adds."""
        self._known_latest, self._may_have_published = None, False
        replay = self.replay_of(identifier)
        if replay is not None:
            return replay
        # dynamic-bucket tables: the replaced partitions' hash index gives way to the writers' new one
        merged = self._merge_hash_index_files(messages)
        messages = merged.messages
        entries = [e for m in messages for e in _entries(m, m.new_files, FileKind.ADD)]
        changelog = [e for m in messages for e in _entries(m, m.changelog_files, FileKind.ADD)]
        hash_files = [e for m in messages for e in m.index_changes
                      if e.index_type == INDEX_TYPE_HASH and e.kind == FileKind.ADD]
        change = _Change(CommitKind.OVERWRITE, entries, overwrite_partitions=partitions or [], changelog=changelog,
                         index=hash_files, hash_claims=[c for m in messages for c in m.hash_claims])
        with self._settling(merged):
            return self._commit_changes([change, *_compaction_changes(messages)], identifier, properties, None)

    def _merge_hash_index_files(self, messages: Sequence[CommitMessage]) -> MergedIndexFiles:
        """Dynamic buckets: several writers' index files of one bucket become one (their union)."""
        if not any(m.hash_claims for m in messages):
            return MergedIndexFiles(list(messages))

        def read(entry: IndexManifestEntry):
            return read_hashes(self.file_io, self.table_path, entry)

        def write(partition: bytes, bucket: int, hashes) -> IndexManifestEntry:
            return write_hash_index(self.file_io, self.table_path, self.paths.new_index_file_name(), partition,
                                    bucket, hashes)

        return merge_bucket_index_files(messages, read, write)

    @contextlib.contextmanager
    def _settling(self, merged: MergedIndexFiles) -> Iterator[None]:
        """Deletes the index files a merge made obsolete, by the commit's outcome: the writers'
        replaced files once it is published (a replay of the original messages is then skipped),
        the merged files once it definitely is not; after an unknown outcome, none. An error after
        a snapshot of the commit published (or while an attempt may still land) keeps the merged
        files: that snapshot names them."""
        try:
            yield
        except BaseException:
            if not self._may_have_published:
                self._delete_quietly(hash_index_path(self.table_path, e) for e in merged.written)
            raise
        self._delete_quietly(hash_index_path(self.table_path, e) for e in merged.replaced)

    def last_committed_identifier(self) -> int | None:
        """The newest identifier this commit user published. Walks back from the latest snapshot
        to the first of this user (to the earliest if there is none: a new user costs one read
        per retained snapshot, once). Later calls on this committer walk only down to the snapshot
        the previous walk started at and keep its answer if that snapshot is unchanged; a rollback
        that replaced it (or went below it) voids the answer, and the walk goes on."""
        latest = self.snapshots.latest_id()
        if latest is None:
            return None
        earliest = self.snapshots.earliest_id() or 1
        walked, known = self._user_scan
        if walked is None or walked.id > latest:  # nothing remembered, or rolled back below it
            walked, known = None, None
        # an expired start snapshot cannot be compared (nor replaced): its answer stands
        stop = walked.id - 1 if walked is not None and walked.id >= earliest else earliest - 1
        head, found, voided = None, known, False
        for snap in self.snapshots.newest_first(latest, stop):
            head = head or snap
            if snap.commit_user == self.commit_user:
                found = snap.commit_identifier
                break
            if walked is not None and snap.id == walked.id:
                voided = snap != walked  # rolled back and committed over since: the answer is void
                break
        if voided:
            found = next((s.commit_identifier for s in self.snapshots.newest_first(stop, earliest - 1)
                          if s.commit_user == self.commit_user), None)
        if head is not None and head.id == latest:
            self._known_latest = head  # the commit that follows builds on it
        self._user_scan = (head if head is not None and head.id == latest else None, found)
        return found

    def replay_of(self, identifier: int) -> CommitResult | None:
        """The (skipped) result of a replay of a published identifier, or None."""
        if not self._already_committed(identifier):
            return None
        metrics.commit_duplicate(self.metric_table)
        return CommitResult(skipped_as_duplicate=True)

    # -- internals --------------------------------------------------------------------------
    def _already_committed(self, identifier: int) -> bool:
        """Whether this commit user already published `identifier` (or a later one)."""
        if identifier == BATCH_COMMIT_IDENTIFIER:
            return False
        last = self.last_committed_identifier()
        return last is not None and identifier <= last

    def _commit_changes(self, changes: list[_Change], identifier: int,
                        properties: dict[str, str] | None, watermark: int | None) -> CommitResult:
        result = CommitResult()
        for change in changes:
            try:
                self._commit_change(change, identifier, properties, watermark, result)
            except Exception as exc:
                if not result.snapshot_ids:
                    raise
                # the batch is published: whatever fails after it (a conflict, an unknown outcome,
                # a lock timeout, a bad option, an unreadable snapshot) must not fail the commit
                self._abandon_compaction(result, identifier, exc)
        return result

    def _commit_change(self, change: _Change, identifier: int, properties: dict[str, str] | None,
                       watermark: int | None, result: CommitResult) -> None:
        delta_metas = self.manifests.write_manifests(change.entries, self.paths) \
            if change.overwrite_partitions is None else None
        with metrics.observe_commit(self.metric_table, change.kind, result):
            snapshot_id = self._try_commit(change, delta_metas, identifier, properties, watermark, result)
            if snapshot_id is not None:
                result.snapshot_ids.append(snapshot_id)

    def _abandon_compaction(self, result: CommitResult, identifier: int, exc: BaseException) -> None:
        """The writer's compaction failed after its batch's APPEND was published: the batch is
        committed, so the commit succeeds (a replay would count on that APPEND snapshot still being
        retained). Its compaction files are kept for orphan cleanup (the outcome may be unknown)."""
        result.compaction_failure = f"{type(exc).__name__}: {exc}"
        log.warning("%s: commit of user %r identifier %s published snapshot(s) %s, but not its compaction "
                    "(%s); the writer restores its buckets from the latest snapshot before it goes on",
                    self.table_path, self.commit_user, identifier, result.snapshot_ids, result.compaction_failure)

    def _try_commit(self, change: _Change, delta_metas: list | None, identifier: int,
                    properties: dict[str, str] | None, watermark: int | None,
                    result: CommitResult) -> int | None:
        max_retries = int(self.core.get("commit.max-retries"))
        min_wait = int(self.core.get("commit.min-retry-wait"))
        max_wait = int(self.core.get("commit.max-retry-wait"))
        timeout = self.core.get("commit.timeout")
        started = time.monotonic()
        unsettled: list[Snapshot] = []  # ambiguous attempts read back as absent: each may still land
        last_failure = "snapshot ids kept being taken; there may be commit conflicts between multiple jobs"
        for attempt in range(max_retries + 1):
            result.attempts += 1
            with self._unknown_on_failure(bool(unsettled), identifier):
                latest = self.snapshots.latest(self._known_latest if attempt == 0 else None)
                landed = self._late_landing(unsettled, latest, identifier)
                if landed is not None:
                    return landed
                snapshot = self._build_snapshot(change, delta_metas, latest, identifier, properties, watermark)
            if snapshot is None:
                return None
            self.snapshots.expected_parent = latest  # publish fails if a fast-forward replaced it
            try:
                outcome = self._publish(snapshot, identifier, result)
            except NothingPublishedError as exc:
                outcome, last_failure = _TAKEN, str(exc)
            if outcome == _PUBLISHED:
                metrics.commit_published(self.metric_table, change.kind, snapshot, self._attempt_entries)
                self._known_latest = snapshot
                return snapshot.id
            metrics.commit_retry(self.metric_table, change.kind)
            if outcome == _TAKEN:
                self._cleanup_attempt(snapshot)
            else:
                unsettled.append(snapshot)
            if timeout is not None and (time.monotonic() - started) * 1000 > timeout:
                break
            wait = min(max_wait, min_wait * (2 ** attempt)) * (0.5 + random.random())
            time.sleep(wait / 1000)
        if unsettled:  # an ambiguous write may have landed since, or land yet (a delayed request)
            with self._unknown_on_failure(True, identifier):
                landed = self._late_landing(unsettled, self.snapshots.latest(), identifier)
            if landed is not None:
                return landed
            if unsettled:
                raise self._unknown_error(identifier, f"the write of snapshot {unsettled[-1].id} failed ambiguously "
                                                      "and it was absent when read back; a delayed write may still "
                                                      "publish it")
        self._may_have_published = bool(result.snapshot_ids)  # every attempt of this change is settled
        raise CommitFailedError(
            f"commit to {self.table_path} failed after {result.attempts} attempts, nothing published: {last_failure}")

    @contextlib.contextmanager
    def _unknown_on_failure(self, unsettled: bool, identifier: int) -> Iterator[None]:
        """After an ambiguous write of an earlier attempt, a read that fails leaves the outcome
        unknown: that attempt may still be the one published."""
        try:
            yield
        except OSError as exc:
            if not unsettled:
                raise
            raise self._unknown_error(identifier, f"an earlier attempt's write was ambiguous and the table cannot "
                                                  f"be read to learn whether it landed ({exc})") from exc

    def _unknown_error(self, identifier: int, why: str) -> CommitStateUnknownError:
        metrics.commit_state_unknown(self.metric_table)
        return CommitStateUnknownError(
            f"commit to {self.table_path}: {why}. Every file of the commit is kept; read the table again (a "
            f"snapshot of commit user {self.commit_user!r} with identifier {identifier} means it landed; a replay "
            "with the same user and identifier is then skipped).")

    def _publish(self, snapshot: Snapshot, identifier: int, result: CommitResult) -> str:
        """Publish one attempt: _PUBLISHED, _TAKEN (definitely not, and nothing of ours is at N)
        or _NOT_LANDED (an ambiguous write read back as absent or another's). Raises
        CommitStateUnknownError when an ambiguous write cannot be read back."""
        try:
            published = self.publish(self.snapshots, snapshot)
        except OSError as exc:
            write_error = exc  # the write may have landed and lost its reply: read it back
        except BaseException as exc:
            # an error is raised before the write (a check, the lock): nothing published; an
            # interrupt may come mid-write
            self._may_have_published |= not isinstance(exc, Exception)
            raise
        else:
            self._may_have_published |= published
            return _PUBLISHED if published else _TAKEN
        self._may_have_published = True  # until the read-back or a later attempt settles it
        result.read_backs += 1
        try:
            landed = self.snapshots.read_back(snapshot)
        except OSError as exc:
            metrics.commit_state_unknown(self.metric_table)
            raise CommitStateUnknownError(self._unknown_message(snapshot, identifier, result, write_error, exc)) \
                from write_error
        metrics.commit_read_back(self.metric_table, landed)
        if landed:
            self.snapshots.commit_hints(snapshot.id)
            return _PUBLISHED
        log.info("%s: snapshot %d was not published by an ambiguous write (%s); retrying", self.table_path,
                 snapshot.id, write_error)
        return _NOT_LANDED

    def _unknown_message(self, snapshot: Snapshot, identifier: int, result: CommitResult,
                         write_error: OSError, read_error: OSError) -> str:
        published = f" (this commit already published snapshot(s) {result.snapshot_ids})" if result.snapshot_ids else ""
        if identifier == BATCH_COMMIT_IDENTIFIER:
            replay = ("a batch commit is not deduplicated, so write its data again only if no snapshot of that "
                      "commit user holds it")
        else:
            replay = (f"replaying the commit with the same commit user {self.commit_user!r} and identifier "
                      f"{identifier} skips it if it landed and commits it if it did not")
        return (f"commit to {self.table_path}: unknown whether snapshot {snapshot.id} is published{published}: "
                f"its write failed ambiguously ({write_error}) and reading it back failed too ({read_error}). "
                f"Every file of the commit is kept. To resolve, read the table again: snapshot {snapshot.id} with "
                f"commit user {self.commit_user!r} means it landed; {replay}; orphan-file cleanup removes the "
                "files of a commit that did not land.")

    def _late_landing(self, unsettled: list[Snapshot], latest: Snapshot | None, identifier: int) -> int | None:
        """The id at which an ambiguous attempt of this call (`unsettled`) landed after all, if one
        did. An attempt can only have landed at its own id, and only it names its delta manifest
        list: one read per attempt whose id is now taken. An attempt whose id another commit took
        is settled (not ours) and leaves `unsettled`; its files stay for orphan cleanup."""
        for attempt in list(unsettled):
            if latest is None or attempt.id > latest.id:
                continue  # its id is still free: it may yet land
            try:
                found = latest if attempt.id == latest.id else self.snapshots.snapshot(attempt.id)
            except SnapshotNotFoundError:
                raise self._unknown_error(identifier, f"snapshot {attempt.id}, where an ambiguous write of this "
                                                      "commit may have landed, expired before it could be "
                                                      "read") from None
            if found.same_commit(attempt):
                return attempt.id
            unsettled.remove(attempt)
        return None

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
            live = self._live_entries(base_metas, change)
            if change.overwrite_partitions is not None:
                entries = self._overwrite_entries(live, change)
            check_conflicts(live, entries, self.key_order, self.table_path)
            if self.deletion_vectors and change.overwrite_partitions is None:
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
        if kind == CommitKind.APPEND and (deleted or any(e.index_type != INDEX_TYPE_HASH for e in change.index)):
            # rows removed (files or deletion vectors): not a plain append. A dynamic-bucket append
            # replacing its buckets' HASH index files removes no row and stays an APPEND, as in
            # Paimon, whose streaming readers (and Iceberg's incremental ones) skip overwrites
            kind = CommitKind.OVERWRITE
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

    def _live_entries(self, base_metas: list, change: _Change) -> list[ManifestEntry]:
        """The live files of the latest snapshot in the partitions `change` touches (all of them
        for an overwrite of the whole table): a commit conflicts only where it changes files, so
        its checks cost what those partitions hold, not the table. Should a file the change
        deletes be missing there (partition stats that do not cover their manifest's entries),
        the whole table is read before calling it a conflict."""
        from strata.manifest.manifest_entry import live_files

        partitions = _touched_partitions(change)
        if partitions is not None:
            live = live_files(self.manifests.read_entries_in(base_metas, partitions))
            present = {e.identifier() for e in live}
            if all(e.identifier() in present for e in change.entries if e.kind == FileKind.DELETE):
                return live
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

    def _cleanup_attempt(self, snapshot: Snapshot) -> None:
        """Delete the manifest lists of an attempt that is definitely not published (delta
        manifests are reused by the next attempt). Best effort: orphan cleanup takes the rest."""
        names = (snapshot.base_manifest_list, snapshot.delta_manifest_list, snapshot.changelog_manifest_list,
                 self._attempt_index_manifest)
        self._delete_quietly(self.manifests.path(name) for name in names if name is not None)

    def _delete_quietly(self, paths: Iterable[str]) -> None:
        for path in paths:
            try:
                self.file_io.delete(path)
            except OSError as exc:
                log.info("%s: could not delete %s (%s); orphan cleanup removes it", self.table_path, path, exc)


def key_decoder(schema: TableSchema) -> Callable[[bytes], tuple]:
    """Decodes a serialized key BinaryRow into a comparable tuple."""
    from strata.format import binary_row

    types = [f.type.to_arrow() for f in schema.key_fields()]
    return lambda data: tuple(binary_row.deserialize(data, types))


def _compaction_changes(messages: Sequence[CommitMessage]) -> list[_Change]:
    """The messages' compaction as one COMPACT change, or none."""
    compact = [e for m in messages for e in (*_entries(m, m.compact_before, FileKind.DELETE),
                                             *_entries(m, m.compact_after, FileKind.ADD))]
    compact_log = [e for m in messages for e in _entries(m, m.compact_changelog_files, FileKind.ADD)]
    compact_index = [e for m in messages for e in m.compact_index_changes]
    if not (compact or compact_log or compact_index):
        return []
    return [_Change(CommitKind.COMPACT, compact, changelog=compact_log, index=compact_index)]


def _entries(message: CommitMessage, files: list, kind: FileKind) -> list[ManifestEntry]:
    return [ManifestEntry(kind, message.partition, message.bucket, message.total_buckets, f) for f in files]


def _avro_codec(name: str) -> str:
    return {"zstd": "zstandard", "null": "null", "deflate": "deflate", "snappy": "snappy"}[name]
