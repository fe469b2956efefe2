"""TableCommit: the user-facing committer of one table (wraps the file-store commit)."""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from strata import metrics
from strata.errors import WriterClosedError
from strata.format import binary_row
from strata.iceberg import sync_after_commit
from strata.log.kafka import LogCommit, log_commit_for
from strata.manifest.commit_message import CommitMessage
from strata.operation.callbacks import CommitCallback, run_commit_callbacks
from strata.operation.commit import CommitResult, FileStoreCommit
from strata.operation.expire import maintain_after_commit
from strata.snapshot.branches import MAIN_BRANCH
from strata.snapshot.snapshot import BATCH_COMMIT_IDENTIFIER
from strata.store import FileStore, HasStore, store_of
from strata.table.write import level0_compaction, moves_level0_at_commit

log = logging.getLogger(__name__)


@dataclass
class TableCommitResult(CommitResult):
    """A commit's result, with what became of a compaction abandoned after its batch published
    (`compaction_failure`) in a table whose readers skip level 0 (deletion vectors, first-row) or
    whose changelog comes from moving it up (lookup): the commit compacts the batch's level-0
    files again on the latest snapshot (`commit.compaction-retry-timeout`)."""

    # the snapshots of that compaction done again (its COMPACT), once it landed
    retried_compaction_ids: list[int] = field(default_factory=list)
    # set when it did not land in time: the batch is durable but its rows are not visible to
    # readers (nor its lookup changelog written) until the bucket's next commit or compaction; why
    not_yet_visible: str | None = None
    # the first snapshot that shows the batch to readers: the last one this commit published, or
    # the compaction done again, or (when another committer moved the level-0 files up first) the
    # latest snapshot the retry found them moved in; None when not yet visible or a skipped replay
    visible_from: int | None = None

    @property
    def visible(self) -> bool:
        return self.not_yet_visible is None


class TableCommit:
    """Commits messages as snapshots. With a stable `commit_user` and increasing identifiers a
    replayed commit (same user, identifier <= the last committed one) is skipped."""

    def __init__(self, table: FileStore | HasStore, commit_user: str | None = None):
        self.store = store = store_of(table)
        prefix = store.options.get("commit.user-prefix")
        self.commit_user = commit_user or (f"{prefix}-" if prefix else "") + str(uuid.uuid4())
        self._commit = FileStoreCommit(store.file_io, store.path, store.schema, self.commit_user,
                                       publish=store.snapshot_publisher(), branch=store.branch)
        self._commit.metric_table = str(store.identifier)
        self._added_callbacks: list[CommitCallback] = []
        self.closed = False

    def commit(self, messages: Sequence[CommitMessage], identifier: int = BATCH_COMMIT_IDENTIFIER,
               properties: Mapping[str, str] | None = None, watermark: int | None = None) -> TableCommitResult:
        """Publish the messages; a replayed (user, identifier) is skipped. Outcomes: a result (the
        snapshots published, and any work after the commit that failed: `callback_failures`, or a
        compaction that did not follow its published batch: `compaction_failure`, after which the
        writer that prepared the messages restores its buckets before going on, and the batch's
        level-0 files are compacted again: `retried_compaction_ids`, or `not_yet_visible`); an
        error after which nothing was published; or CommitStateUnknownError (every file kept)."""
        self._check_open()
        result = self._committed(messages, identifier, lambda: self._commit.commit(
            messages, identifier, dict(properties or {}) or None, watermark))
        self._settle_visibility(messages, result)
        return result

    def overwrite(self, messages: Sequence[CommitMessage], partition: Mapping[str, Any] | None = None,
                  identifier: int = BATCH_COMMIT_IDENTIFIER, dynamic: bool = False,
                  properties: Mapping[str, str] | None = None) -> TableCommitResult:
        """Replace a static partition (`partition`), the partitions the data touches (`dynamic`),
        or, with neither, the whole table. The writer's compaction of the new files follows the
        OVERWRITE (a COMPACT), with the outcomes of `commit` when it fails after it."""
        self._check_open()
        targets: list[bytes] | None = None
        if partition is not None:
            targets = [self._partition_bytes(partition)]
            self._check_in_partition(messages, targets[0], partition)
        elif dynamic:
            targets = sorted({m.partition for m in messages})
            if not targets:
                return TableCommitResult()
        result = self._committed(messages, identifier, lambda: self._commit.overwrite(
            messages, targets, identifier, dict(properties or {}) or None))
        self._settle_visibility(messages, result)
        return result

    def callbacks(self, log_commit: LogCommit | None = None) -> list[CommitCallback]:
        """The work after a commit, in its order (each failure is reported, never raised):
        1. ``log-commit``: the log store's Kafka transactions (log.system=kafka) commit; after a
           replay they abort and the published commit's log is repaired (strata.log.kafka);
        2. ``expiry``: tag, partition, consumer and snapshot expiry, unless write-only
           (strata.operation.expire.maintain_after_commit);
        3. ``iceberg-sync``: the Iceberg metadata of the new snapshot and its statistics
           (metadata.iceberg.storage; main branch only);
        4. the callbacks given to ``add_callback``, in the order given."""
        store = self.store
        steps = [CommitCallback("log-commit", log_commit.finish, always=True)] if log_commit is not None else []
        steps.append(CommitCallback("expiry", lambda result: maintain_after_commit(store, max(result.snapshot_ids))))
        if store.branch == MAIN_BRANCH:  # Iceberg metadata mirrors main only
            steps.append(CommitCallback("iceberg-sync", lambda result: sync_after_commit(store)))
        return steps + self._added_callbacks

    def add_callback(self, callback: CommitCallback) -> None:
        """Run `callback` after each commit of this committer, after the table's own steps
        (Paimon's ``commit.callbacks``); its failures are reported, never raised."""
        self._added_callbacks.append(callback)

    def _committed(self, messages: Sequence[CommitMessage], identifier: int,
                   run: Callable[[], CommitResult]) -> TableCommitResult:
        """Run the file-store commit, then the callbacks. With a log store (log.system=kafka) the
        snapshot records the log offsets, and a commit that raises aborts the log transaction
        (after CommitStateUnknownError too: if the snapshot landed, the replay that finds it
        repairs its log, see strata.log.kafka)."""
        log_commit = log_commit_for(self.store, messages, self.commit_user, identifier)
        if log_commit is not None:
            self._commit.properties_hook = log_commit.snapshot_properties
        try:
            result = run()
        except BaseException:
            if log_commit is not None:
                log_commit.fail()
            raise
        finally:
            self._commit.properties_hook = None
        outcome = _table_result(result)
        run_commit_callbacks(self.callbacks(log_commit), outcome, self._commit.metric_table)
        return outcome

    def _settle_visibility(self, messages: Sequence[CommitMessage], result: TableCommitResult) -> None:
        """Set `visible_from`, after compacting the batch again if its compaction was abandoned."""
        if result.snapshot_ids:
            result.visible_from = max(result.snapshot_ids)
        if result.compaction_failure is not None:
            self._after_abandoned_compaction(messages, result)

    def _after_abandoned_compaction(self, messages: Sequence[CommitMessage], result: TableCommitResult) -> None:
        """The batch published, its compaction did not. Tell the writer that prepared the messages
        (its levels are now ahead of the table) and, where readers skip level 0, compact the
        batch's level-0 files again on the latest snapshot until it lands or the retry timeout
        passes; nothing here fails the durable commit."""
        for message in messages:
            if message.feedback is not None:
                message.feedback.compaction_abandoned = True
        store = self.store
        buckets = sorted({(m.partition, m.bucket) for m in messages if m.new_files})
        if not buckets or not moves_level0_at_commit(store.core, bool(store.schema.primary_keys)):
            metrics.commit_compaction_abandoned(self._commit.metric_table, "none")
            return
        failure = self._retry_level0_compaction(buckets, result)
        if failure is None:
            metrics.commit_compaction_abandoned(self._commit.metric_table, "recovered")
            return
        result.visible_from = None
        result.not_yet_visible = (
            f"snapshot(s) {result.snapshot_ids} of table {store.identifier} hold the batch durably, but its rows in "
            f"{len(buckets)} bucket(s) stay at level 0 (which readers of deletion-vector and first-row tables skip; "
            "a lookup changelog is written when it moves up) until the bucket's next commit or compaction: its "
            f"compaction failed ({result.compaction_failure}) and so did compacting it again until "
            f"commit.compaction-retry-timeout ({failure})")
        metrics.commit_compaction_abandoned(self._commit.metric_table, "not_visible")
        log.warning("%s", result.not_yet_visible)

    def _retry_level0_compaction(self, buckets: list[tuple[bytes, int]], result: TableCommitResult) -> str | None:
        """Compact the level-0 files of `buckets` as the latest snapshot holds them and commit that
        (a COMPACT of a commit user of its own), again after each failure, with the commit's
        back-off, until it lands or finds nothing left at level 0 (None) or the timeout passes
        (the last failure). A failed attempt's files are kept: its outcome may be unknown, and
        orphan cleanup removes them. Nothing left means another committer (a maintenance job)
        moved them up: the batch is visible from the latest snapshot, read after the scan found
        them gone, not from this commit's own snapshots."""
        snapshots = self.store.snapshot_manager
        core = self.store.core
        deadline = time.monotonic() + int(core.get("commit.compaction-retry-timeout")) / 1000
        wait, max_wait = int(core.get("commit.min-retry-wait")), int(core.get("commit.max-retry-wait"))
        failure = "commit.compaction-retry-timeout is 0"
        while time.monotonic() < deadline:
            try:
                messages = level0_compaction(self.store, buckets)
                if messages:
                    landed = TableCommit(self.store).commit(messages)
                    result.retried_compaction_ids.extend(landed.snapshot_ids)
                    result.visible_from = landed.visible_from
                else:
                    result.visible_from = snapshots.latest_id()
                return None
            except Exception as exc:  # the batch is in: no failure here may fail its commit
                failure = f"{type(exc).__name__}: {exc}"
                log.info("table %s: compacting the level-0 files of a published batch again failed (%s)",
                         self.store.identifier, failure, exc_info=True)
            time.sleep(max(0.0, min(wait * (0.5 + random.random()) / 1000, deadline - time.monotonic())))
            wait = min(wait * 2, max_wait)
        return failure

    def last_committed_identifier(self) -> int | None:
        return self._commit.last_committed_identifier()

    def replay_of(self, identifier: int) -> TableCommitResult | None:
        """The skipped result of a replay of an identifier this commit user published, or None."""
        replay = self._commit.replay_of(identifier)
        return _table_result(replay) if replay is not None else None

    def _partition_bytes(self, partition: Mapping[str, Any]) -> bytes:
        schema = self.store.schema
        if set(partition) != set(schema.partition_keys):
            raise ValueError(f"overwrite partition of table {self.store.identifier} must give every "
                             f"partition key {schema.partition_keys}, got {sorted(partition)}")
        fields = schema.partition_fields()
        return binary_row.serialize([partition[f.name] for f in fields], [f.type.to_arrow() for f in fields])

    def _check_in_partition(self, messages: Sequence[CommitMessage], target: bytes,
                            partition: Mapping[str, Any]) -> None:
        """Rows outside the overwritten partition would survive the overwrite: refuse them."""
        stray = [m.partition for m in messages if m.partition != target]
        if stray:
            fields = self.store.schema.partition_fields()
            values = binary_row.deserialize(stray[0], [f.type.to_arrow() for f in fields])
            found = dict(zip([f.name for f in fields], values, strict=True))
            raise ValueError(f"overwrite of partition {dict(partition)} of table {self.store.identifier} "
                             f"got rows of partition {found}")

    def _check_open(self) -> None:
        if self.closed:
            raise WriterClosedError(f"commit of table {self.store.identifier} is closed")

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> TableCommit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _table_result(result: CommitResult) -> TableCommitResult:
    return TableCommitResult(**{f.name: getattr(result, f.name) for f in dataclasses.fields(CommitResult)})
