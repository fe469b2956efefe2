"""A table's changes for the Python user: an iterator of change batches that follows new snapshots.

    for batch in table.stream(consumer_id="mirror"):      # blocks for new snapshots
        apply(batch)                                       # a `_ROW_KIND` column: +I/-U/+U/-D

Snapshot N's changes are what the Spark streaming source reads for it (``TableScan.plan_changes``:
the changelog files with a changelog producer, else what APPEND commits wrote). With a
`consumer_id` the position is saved in Paimon's consumer file (``{"nextSnapshot": N}``, see
``Table.consumers``) once every batch of a snapshot has been handed out and the next one is asked
for: snapshot expiry keeps every snapshot from there on, and a stream started again with the same id
resumes there (at least once: a snapshot being read when the process stopped is read again).

A table with a Kafka log store (``log.system=kafka``) is read from the log by default (`log=False`
reads the files): Kafka, read_committed, from the per-bucket offsets the snapshot before the start
recorded (``strata.log.hybrid.HybridReader``), so records arrive as soon as Kafka has them: when
their snapshot commits (``log.consistency=transactional``) or at once (eventual, before any
snapshot holds them). The log holds every row as written (a key written twice in one commit is two
records, where the files hold the merged row). The position saved is still a snapshot: snapshot N
counts as read once every partition's records up to the offsets N recorded were handed out. When
the snapshot before the start has expired, the start snapshot's changes come from the files and the
log follows from its offsets. When Kafka's retention has dropped records the stream needs when it
starts, it reads the files for good (a warning, counted as the hybrid reader's fallbacks); records
dropped while it runs fail it with ``LogSystemError`` (started again, it resumes from the saved
position, from the files if the log no longer has it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

from strata.errors import SnapshotNotFoundError
from strata.log.hybrid import HybridReader
from strata.log.kafka import snapshot_log_offsets
from strata.log.options import log_enabled
from strata.scan.planner import TableScan
from strata.store import FileStore, HasStore, store_of
from strata.table.read import TableRead


class ChangeStream:
    """Change batches from snapshot `from_snapshot` on (default: the consumer's saved position,
    else the snapshot after the latest: only changes committed from now on)."""

    def __init__(self, table: FileStore | HasStore, from_snapshot: int | None = None,
                 consumer_id: str | None = None, columns: Sequence[str] | None = None,
                 poll_interval: float = 1.0, follow: bool = True, log: bool | None = None):
        self.store = store_of(table)
        self.consumer_id = consumer_id
        self.columns = columns
        self.poll_interval = poll_interval
        self.follow = follow
        has_log = log_enabled(self.store)
        if log and not has_log:
            raise ValueError(f"a stream of {self.store.identifier} cannot read a log: the table has no log store "
                             "(log.system=kafka)")
        self.reads_log = has_log if log is None else log
        saved = self.store.consumers.consumer(consumer_id) if consumer_id is not None else None
        if from_snapshot is not None and from_snapshot < 1:
            raise ValueError(f"a stream of {self.store.identifier} starts at snapshot 1 or later, not {from_snapshot}")
        self.next_snapshot = from_snapshot or saved or (self.store.snapshot_manager.latest_id() or 0) + 1
        self.schema = TableRead(self.store, columns)._schema(True)
        self._offsets: dict[int, dict[int, int]] = {}  # log offsets of the snapshots not yet read through

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self.reads_log:
            yield from self._log_changes()
        else:
            yield from self._file_changes()

    # -- from the snapshots' files -------------------------------------------------------------
    def _file_changes(self) -> Iterator[pa.RecordBatch]:
        while True:
            latest = self.store.snapshot_manager.latest_id() or 0
            if self.next_snapshot > latest:
                if not self.follow:
                    return
                time.sleep(self.poll_interval)
                continue
            yield from self._snapshot_changes(self.next_snapshot)
            self._advance_to(self.next_snapshot + 1)

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

    # -- from the Kafka log --------------------------------------------------------------------
    def _log_changes(self) -> Iterator[pa.RecordBatch]:
        reader = None
        try:
            while reader is None:
                latest = self.store.snapshot_manager.latest_id() or 0
                if self.next_snapshot > latest + 1 or latest == 0:  # nothing to start from yet
                    if not self.follow:
                        return
                    time.sleep(self.poll_interval)
                    continue
                if self.next_snapshot > 1 and not self.store.snapshot_manager.exists(self.next_snapshot - 1):
                    # the offsets to start from are gone with their snapshot: this one from the files
                    yield from self._snapshot_changes(self.next_snapshot)
                    self._advance_to(self.next_snapshot + 1)
                    continue
                reader = HybridReader(self.store, self.next_snapshot - 1, self.columns)
                reader.open()
                if reader.fell_back:
                    reader.close()
                    yield from self._file_changes()
                    return
            yield from self._follow_log(reader)
        finally:
            if reader is not None:
                reader.close()

    def _follow_log(self, reader: HybridReader) -> Iterator[pa.RecordBatch]:
        while True:
            if self.follow:
                yield from self._batches(reader.poll(timeout=self.poll_interval))
                self._advance_log(reader)
                continue
            latest = self.store.snapshot_manager.latest_id() or 0
            if self.next_snapshot <= latest:  # exactly up to the latest snapshot's offsets
                yield from self._batches(reader.read_until(latest))
                self._advance_to(latest + 1)
            return

    def _batches(self, changes: pa.Table) -> Iterator[pa.RecordBatch]:
        if changes.num_rows:
            yield from changes.cast(self.schema).to_batches()

    def _advance_log(self, reader: HybridReader) -> None:
        """Move the position past every snapshot whose records the reader has handed out."""
        latest = self.store.snapshot_manager.latest_id() or 0
        position = self.next_snapshot
        while position <= latest:
            offsets = self._offsets.get(position)
            if offsets is None:  # a snapshot never changes: read once
                offsets = self._offsets[position] = snapshot_log_offsets(self.store.snapshot_manager.snapshot(position))
            if any(reader.positions.get(p, 0) < offset for p, offset in offsets.items()):
                break
            del self._offsets[position]
            position += 1
        if position > self.next_snapshot:
            self._advance_to(position)

    def _advance_to(self, next_snapshot: int) -> None:
        self.next_snapshot = next_snapshot
        if self.consumer_id is not None:
            self.store.consumers.reset(self.consumer_id, next_snapshot)
