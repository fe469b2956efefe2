"""TableCommit: the user-facing committer of one table (wraps the file-store commit)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

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
               properties: Mapping[str, str] | None = None, watermark: int | None = None) -> CommitResult:
        """Publish the messages; a replayed (user, identifier) is skipped. Outcomes: a result (the
        snapshots published, and any work after the commit that failed: `callback_failures`, or a
        compaction that did not follow its published batch: `compaction_failure`, after which a
        writer kept for more commits must be replaced); an error after which nothing was published;
        or CommitStateUnknownError (every file kept)."""
        self._check_open()
        return self._committed(messages, identifier, lambda: self._commit.commit(
            messages, identifier, dict(properties or {}) or None, watermark))

    def overwrite(self, messages: Sequence[CommitMessage], partition: Mapping[str, Any] | None = None,
                  identifier: int = BATCH_COMMIT_IDENTIFIER, dynamic: bool = False,
                  properties: Mapping[str, str] | None = None) -> CommitResult:
        """Replace a static partition (`partition`), the partitions the data touches (`dynamic`),
        or, with neither, the whole table."""
        self._check_open()
        targets: list[bytes] | None = None
        if partition is not None:
            targets = [self._partition_bytes(partition)]
            self._check_in_partition(messages, targets[0], partition)
        elif dynamic:
            targets = sorted({m.partition for m in messages})
            if not targets:
                return CommitResult()
        return self._committed(messages, identifier, lambda: self._commit.overwrite(
            messages, targets, identifier, dict(properties or {}) or None))

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
                   run: Callable[[], CommitResult]) -> CommitResult:
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
        return run_commit_callbacks(self.callbacks(log_commit), result, self._commit.metric_table)

    def last_committed_identifier(self) -> int | None:
        return self._commit.last_committed_identifier()

    def replay_of(self, identifier: int) -> CommitResult | None:
        """The skipped result of a replay of an identifier this commit user published, or None."""
        return self._commit.replay_of(identifier)

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
