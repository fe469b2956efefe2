"""A table's changes for the Python user: an iterator of change batches that follows new snapshots.

    for batch in table.stream(consumer_id="mirror"):      # blocks for new snapshots
        apply(batch)                                       # a `_ROW_KIND` column: +I/-U/+U/-D

Snapshot N's changes are what the Spark streaming source reads for it (``TableScan.plan_changes``:
the changelog files with a changelog producer, else what APPEND commits wrote). With a
`consumer_id` the position is saved in Paimon's consumer file (``{"nextSnapshot": N}``, see
``Table.consumers``) once every batch of a snapshot has been handed out and the next one is asked
for: snapshot expiry keeps every snapshot from there on, and a stream started again with the same id
resumes there (at least once: a snapshot being read when the process stopped is read again).
Changes come from the snapshots' files; the Kafka log store is not read here.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

from strata.errors import SnapshotNotFoundError
from strata.scan.planner import TableScan
from strata.store import FileStore, HasStore, store_of
from strata.table.read import TableRead


class ChangeStream:
    """Change batches from snapshot `from_snapshot` on (default: the consumer's saved position,
    else the snapshot after the latest: only changes committed from now on)."""

    def __init__(self, table: FileStore | HasStore, from_snapshot: int | None = None,
                 consumer_id: str | None = None, columns: Sequence[str] | None = None,
                 poll_interval: float = 1.0, follow: bool = True):
        self.store = store_of(table)
        self.consumer_id = consumer_id
        self.columns = columns
        self.poll_interval = poll_interval
        self.follow = follow
        saved = self.store.consumers.consumer(consumer_id) if consumer_id is not None else None
        if from_snapshot is not None and from_snapshot < 1:
            raise ValueError(f"a stream of {self.store.identifier} starts at snapshot 1 or later, not {from_snapshot}")
        self.next_snapshot = from_snapshot or saved or (self.store.snapshot_manager.latest_id() or 0) + 1
        self.schema = TableRead(self.store, columns)._schema(True)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            latest = self.store.snapshot_manager.latest_id() or 0
            if self.next_snapshot > latest:
                if not self.follow:
                    return
                time.sleep(self.poll_interval)
                continue
            yield from self._snapshot_changes(self.next_snapshot)
            self.next_snapshot += 1
            self._save()

    def _snapshot_changes(self, snapshot_id: int) -> Iterator[pa.RecordBatch]:
        earliest = self.store.snapshot_manager.earliest_id()
        if earliest is not None and snapshot_id < earliest:
            raise SnapshotNotFoundError(
                f"the stream of {self.store.identifier} is at snapshot {snapshot_id}, which has expired (the "
                f"earliest is {earliest}); a consumer id keeps the snapshots a stream has not read")
        read = TableRead(self.store, self.columns)
        for split in TableScan(self.store).plan_changes(snapshot_id):
            for data in read.read_split(split):
                yield from data.cast(self.schema).to_batches()

    def _save(self) -> None:
        if self.consumer_id is not None:
            self.store.consumers.reset(self.consumer_id, self.next_snapshot)
