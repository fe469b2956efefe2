"""Writers of one (partition, bucket): a sorted LSM writer for primary-key tables, an appender
for append tables. Both buffer rows in memory and flush them to level-0 files."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from strata import metrics
from strata.deletionvectors import BucketDeletionVectors
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter, RollingWrite
from strata.manifest.commit_message import CommitMessage
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.compact.manager import CompactManager
from strata.mergetree.compact.task import ChangelogOutput, CompactResult, FileReader, Upgrades, run_compaction
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.dv_compaction import DeletionVectorCompaction, PositionedReader, Purged
from strata.mergetree.lookup import LevelLookup
from strata.mergetree.merge_function import DeduplicateMerge, FirstRowMerge, MergeFunction
from strata.mergetree.merge_reader import merge_runs
from strata.mergetree.sections import sections_apply
from strata.mergetree.sorting import group_ends, sort_by_key
from strata.mergetree.spill import SpilledRuns
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema


class BucketWriter:
    """Buffers the rows of one bucket; flush() turns the buffer into files."""

    def __init__(self, schema: TableSchema, partition: bytes, bucket: int, total_buckets: int,
                 file_writer: DataFileWriter, next_sequence: int):
        self.schema = schema
        self.partition = partition
        self.bucket = bucket
        self.total_buckets = total_buckets
        self.file_writer = file_writer
        self.next_sequence = next_sequence
        self.buffer: list[pa.Table] = []
        self.buffered_bytes = 0
        self.new_files: list[DataFileMeta] = []
        self.changelog_files: list[DataFileMeta] = []
        self.compacted = CompactResult()

    def write(self, rows: pa.Table, kinds: np.ndarray | None) -> None:
        table = self._to_file_layout(rows, kinds)
        self.buffer.append(table)
        self.buffered_bytes += table.nbytes
        self.next_sequence += rows.num_rows

    def _to_file_layout(self, rows: pa.Table, kinds: np.ndarray | None) -> pa.Table:
        return rows

    def flush(self) -> None:
        if not self.has_pending():
            return
        files = self._flush_table(self._take_buffer())
        self.new_files.extend(files)
        self._after_flush(files)

    def has_pending(self) -> bool:
        """Whether a flush for the commit has rows to write."""
        return bool(self.buffer)

    def flush_for_commit(self) -> None:
        """The flush before a commit: every file the commit takes is complete after it."""
        self.flush()

    def _take_buffer(self) -> pa.Table | None:
        """The buffered rows as one table (None if there are none); the buffer is emptied."""
        if not self.buffer:
            return None
        table = pa.concat_tables(self.buffer) if len(self.buffer) > 1 else self.buffer[0]
        self.buffer, self.buffered_bytes = [], 0
        return table

    def _flush_table(self, table: pa.Table | None) -> list[DataFileMeta]:
        assert table is not None
        return self.file_writer.write(table, level=0, first_sequence=self.next_sequence - table.num_rows)

    def _after_flush(self, files: list[DataFileMeta]) -> None:
        """Hook for compaction."""

    def take_over(self, old: BucketWriter) -> None:
        """Go on with the uncommitted work of `old`, a writer of the same bucket whose state the
        table no longer matches (this one restored the bucket anew): its buffered rows, their
        sequence numbers, and the level-0 files it flushed since its last commit."""
        self.buffer, self.buffered_bytes = old.buffer, old.buffered_bytes
        self.next_sequence = max(self.next_sequence, old.next_sequence)
        self.changelog_files = old.changelog_files
        if old.new_files:
            self.new_files = list(old.new_files)
            self._after_flush(self.new_files)

    def compact(self, full: bool, wait: bool = True) -> None:
        """Hook for compaction on demand; `wait=False` only starts it (see finish_compaction)."""

    def finish_compaction(self) -> None:
        """Hook: wait for a compaction compact(wait=False) started."""

    @property
    def waits_at_commit(self) -> bool:
        """Whether prepare_commit waits for compaction work (level 0 moved up at every commit)."""
        return False

    def prepare_commit(self, wait_compaction: bool = False) -> CommitMessage:
        self.flush()
        self._collect_compaction(wait_compaction)
        message = CommitMessage(self.partition, self.bucket, self.total_buckets, new_files=self.new_files,
                                compact_before=self.compacted.before, compact_after=self.compacted.after,
                                changelog_files=self.changelog_files,
                                compact_changelog_files=self.compacted.changelog)
        self.new_files = []
        self.changelog_files = []
        self.compacted = CompactResult()
        return message

    def _collect_compaction(self, blocking: bool) -> None:
        """Hook for compaction."""

    def close(self) -> None:
        """Hook for compaction."""


class AppendBucketWriter(BucketWriter):
    """Append tables: rows keep their arrival order within the bucket. A full buffer is written
    into the bucket's open file, which rolls at target-file-size and closes at the commit."""

    files: RollingWrite | None = None  # the open file(s) of the flushes since the last commit

    def flush(self) -> None:
        if self.buffer:
            table = self._take_buffer()
            assert table is not None
            if self.files is None:
                self.files = self.file_writer.rolling()
            self.files.write(table, self.next_sequence - table.num_rows)

    def has_pending(self) -> bool:
        return bool(self.buffer) or self.files is not None

    def flush_for_commit(self) -> None:
        self.flush()
        if self.files is not None:
            files, self.files = self.files, None
            self.new_files.extend(files.close())

    def prepare_commit(self, wait_compaction: bool = False) -> CommitMessage:
        self.flush_for_commit()
        return super().prepare_commit(wait_compaction)

    def take_over(self, old: BucketWriter) -> None:
        super().take_over(old)
        if isinstance(old, AppendBucketWriter):
            self.files, old.files = old.files, None

    def close(self) -> None:
        """An open file is closed as it is: uncommitted, it is left to orphan cleanup."""
        if self.files is not None:
            files, self.files = self.files, None
            files.close()


@dataclass
class CompactionContext:
    """What a primary-key writer needs to compact its bucket and produce its changelog."""

    manager: CompactManager | None  # None: write-only
    read: FileReader
    changelog_producer: str = "none"  # none | input | full-compaction | lookup
    changelog_writer: DataFileWriter | None = None
    row_deduplicate: bool = False
    # Paimon readers skip level 0 of first-row tables: their writers compact it at every commit
    compact_level0_at_commit: bool = False
    # merge-on-write tables: the bucket's deletion vectors (level 0 also moves up at every commit)
    deletion_vectors: BucketDeletionVectors | None = None
    read_positioned: PositionedReader | None = None  # reads a file with each row's position
    # merge-on-write: a file whose vector marks more than this share of its rows is rewritten
    # without them, in the background between commits (compaction.delete-ratio-threshold)
    delete_ratio_threshold: float | None = None


class KeyValueBucketWriter(BucketWriter):
    """Primary-key tables: each flush is one sorted, merged run at level 0, compacted in the
    background by universal compaction. With the lookup changelog producer (and for first-row
    tables) every commit first moves its level-0 files up (see mergetree/lookup.py). With
    `spilled`, a full buffer can spill to local disk (spill()), and the next flush merges the
    spilled runs and the buffer into its one run."""

    def __init__(self, schema: TableSchema, partition: bytes, bucket: int, total_buckets: int,
                 file_writer: DataFileWriter, next_sequence: int, merge_function: MergeFunction,
                 compaction: CompactionContext, spilled: SpilledRuns | None = None):
        super().__init__(schema, partition, bucket, total_buckets, file_writer, next_sequence)
        self.merge_function = merge_function
        self.spilled = spilled
        self.key_names = [KEY_PREFIX + f.name for f in schema.key_fields()]
        self.compaction = compaction
        self.lookup: LevelLookup | None = None
        manager = compaction.manager
        if manager is not None:
            manager.runner = self._run_unit
            # level-0 data must move up before a commit: the lookup changelog is produced then,
            # and first-row readers skip level 0 (Paimon's ForceUpLevel0Compaction)
            manager.force_level0_up = compaction.changelog_producer == "lookup" or compaction.compact_level0_at_commit
            manager.force_level0_up |= compaction.deletion_vectors is not None
            if compaction.deletion_vectors is not None:
                manager.drop_delete_always = True
                manager.has_deletions = compaction.deletion_vectors.has_deletions
                manager.deleted_rows = compaction.deletion_vectors.deleted_count
                manager.delete_ratio = compaction.delete_ratio_threshold
                manager.strategy.deleted_rows = compaction.deletion_vectors.deleted_count
            if manager.force_level0_up:
                self.lookup = LevelLookup(compaction.read, self.key_names, schema.field_names, merge_function,
                                          manager.levels.key_order, compaction.row_deduplicate,
                                          insert_only=isinstance(merge_function, FirstRowMerge))
        self._at_commit = False  # in prepare_commit, moving level 0 up (see _prepare_commit)
        self.dv_compaction: DeletionVectorCompaction | None = None
        self.purge: Future[list[Purged]] | None = None  # a background purge (see _start_purge)
        if compaction.deletion_vectors is not None:
            assert compaction.read_positioned is not None
            lookup = self.lookup if compaction.changelog_producer == "lookup" else None
            self.dv_compaction = DeletionVectorCompaction(
                compaction.deletion_vectors, compaction.read, compaction.read_positioned, file_writer, self.key_names,
                merge_function, lookup, compaction.changelog_writer, schema.file_arrow_schema(),
                manager.levels.key_order if manager is not None else None)

    def write(self, rows: pa.Table, kinds: np.ndarray | None) -> None:
        if kinds is not None:  # refuse row kinds the merge engine rejects now, not at flush time
            self.merge_function.check_kinds(kinds, rows.column_names)
        super().write(rows, kinds)

    def _to_file_layout(self, rows: pa.Table, kinds: np.ndarray | None) -> pa.Table:
        n = rows.num_rows
        seq = pa.array(np.arange(self.next_sequence, self.next_sequence + n, dtype=np.int64))
        kind = pa.array(kinds if kinds is not None else np.zeros(n, dtype=np.int8), pa.int8())
        keys = [rows.column(f.name) for f in self.schema.key_fields()]
        columns = [*keys, seq, kind, *rows.columns]
        names = [*self.key_names, SEQUENCE_NUMBER, VALUE_KIND, *rows.column_names]
        return pa.Table.from_arrays(columns, names=names)

    def spill(self) -> int:
        """Write the buffer, sorted and merged, to local disk: it joins the next flush's run.
        The bytes written."""
        assert self.spilled is not None
        table = self._take_buffer()
        if table is None:
            return 0
        return self.spilled.add(self._merged(table), lambda runs: merge_runs(runs, self.key_names, self.merge_function))

    def has_pending(self) -> bool:
        return bool(self.buffer) or bool(self.spilled)

    def _flush_table(self, table: pa.Table | None) -> list[DataFileMeta]:
        merged = None if table is None else self._merged(table)
        if self.spilled:
            runs = self.spilled.runs() + ([iter([merged])] if merged is not None else [])
            try:
                return self.file_writer.write_stream(merge_runs(runs, self.key_names, self.merge_function), level=0)
            finally:
                self.spilled.close()
        assert merged is not None
        files = self.file_writer.write(merged, level=0)
        if self.dv_compaction is not None and self.compaction.manager is not None:
            self.dv_compaction.flushed(files, merged)  # moved up by this commit's compaction
        return files

    def _merged(self, table: pa.Table) -> pa.Table:
        """The buffered `table` sorted by key, each key's records merged into one (with the input
        changelog producer, every record goes to a changelog file first)."""
        # rows are buffered in sequence order and the sort is stable, so ties keep that order
        order = sort_by_key(table, self.key_names, None)
        context = self.compaction
        if context.changelog_producer == "input" and context.changelog_writer is not None:
            # the input is already a complete changelog: keep every record, in key order
            ordered = table.take(order)
            self.changelog_files.extend(context.changelog_writer.write(ordered, level=0))
            return self.merge_function.merge(ordered, self.key_names)
        if _latest_wins(self.merge_function):
            # each key's last record wins: choose the winners from the keys, gather the rows once
            # (not at all when they came sorted and unique, as in a bulk load from sorted data)
            sorted_input = _is_identity(order)
            keys = table.select(self.key_names) if sorted_input else \
                pa.table({k: table.column(k).take(order) for k in self.key_names})
            winners = order[group_ends(keys, self.key_names)]
            return table if sorted_input and len(winners) == len(order) else table.take(pa.array(winners))
        return self.merge_function.merge(table.take(order), self.key_names)

    @property
    def waits_at_commit(self) -> bool:
        return self.compaction.manager is not None and self.compaction.manager.force_level0_up

    def prepare_commit(self, wait_compaction: bool = False) -> CommitMessage:
        message = self._prepare_commit(wait_compaction)
        if self.compaction.deletion_vectors is not None:
            message.compact_index_changes = self.compaction.deletion_vectors.prepare_commit()
            if not wait_compaction:
                self._start_purge()
        return message

    def _prepare_commit(self, wait_compaction: bool) -> CommitMessage:
        manager = self.compaction.manager
        if manager is not None and manager.force_level0_up:
            self._at_commit = True  # the commit waits for this flush's compaction: run it here
            try:
                self.flush()
                self._push_level0_up()
            finally:
                self._at_commit = False
            if self.dv_compaction is not None:
                self._finish_purge(blocking=wait_compaction)
                if wait_compaction:  # the end of the input: what is left above the threshold, now
                    manager.submit(manager.purge_unit(), inline=True)
                    self._collect_compaction(blocking=True)
        elif manager is not None and wait_compaction:
            # Paimon's flushWriteBuffer(waitForLatestCompaction): collect the running compaction,
            # then pick again on the bucket as it now is (its newest run included), and wait for
            # that pick below. Otherwise the flush's run waits for the next commit's compaction.
            self.flush()
            self._collect_compaction(blocking=True)
            manager.trigger()
        return super().prepare_commit(wait_compaction)

    def _push_level0_up(self) -> None:
        """Paimon's lookup-wait: the commit waits until its level-0 files have moved to a level
        >= 1, by as many forced picks as needed (a universal pick may leave some behind)."""
        manager = self.compaction.manager
        assert manager is not None
        self._collect_compaction(blocking=True)
        while manager.levels.level0:
            manager.trigger(inline=True)
            if not manager.running:
                return
            self._collect_compaction(blocking=True)

    # -- purges of deleted rows (merge-on-write) ---------------------------------------------------
    def _start_purge(self) -> None:
        """Rewrite the files whose vectors mark more than compaction.delete-ratio-threshold of
        their rows without those rows, in the background: commits do not wait for it (level-0
        compactions go on marking rows meanwhile); a later commit applies it (_finish_purge).
        Called when no compaction runs, so the vectors it starts from are stable."""
        manager = self.compaction.manager
        if self.purge is not None or manager is None or self.dv_compaction is None or manager.running:
            return
        unit = manager.purge_unit()
        if unit is None:
            return
        marked = self.dv_compaction.snapshot(unit)
        self.purge = manager.purge_executor.submit(self.dv_compaction.purge_in_background, unit, marked)

    def _finish_purge(self, blocking: bool) -> None:
        """Apply a finished background purge (no compaction may run: it moves marks made since
        the purge started to the rewritten files); `blocking`: wait for a running one."""
        manager = self.compaction.manager
        if self.purge is None or manager is None or self.dv_compaction is None \
                or (not blocking and not self.purge.done()):
            return
        future, self.purge = self.purge, None
        live = {f.file_name for f in manager.levels.all_files()}
        bucket_dir = self.file_writer.bucket_dir
        result = self.dv_compaction.apply_purge(
            future.result(), live, lambda f: self.file_writer.file_io.delete(f"{bucket_dir}/{f.file_name}"))
        manager.levels.update(result.before, result.after)
        self._absorb(result)

    # -- compaction ------------------------------------------------------------------------------
    def _run_unit(self, unit: CompactUnit, drop_delete: bool) -> CompactResult:
        context = self.compaction
        if self.dv_compaction is not None:
            return self.dv_compaction.run(unit)
        if self.lookup is not None and unit.output_level > 0 and any(f.level == 0 for f in unit.files):
            return self._run_lookup_unit(self.lookup, unit, drop_delete)
        changelog = None
        full = context.manager is not None and unit.output_level == context.manager.levels.max_level
        if full and context.changelog_producer == "full-compaction" and context.changelog_writer:
            changelog = ChangelogOutput(context.changelog_writer, self.schema.field_names, context.row_deduplicate)
        return run_compaction(unit, context.read, self.file_writer, self.key_names, self.merge_function,
                              drop_delete, changelog, upgrades=self._upgrades())

    def _upgrades(self) -> Upgrades | None:
        manager = self.compaction.manager
        if manager is None or not sections_apply(self.schema):
            return None
        return Upgrades(manager.levels.key_order, self.file_writer.config.target_file_size // 10 * 7)

    def _run_lookup_unit(self, lookup: LevelLookup, unit: CompactUnit, drop_delete: bool) -> CompactResult:
        """Compact a unit that moves level-0 files up, with a lookup of their keys above: it gives
        the changelog (lookup producer) and, for first-row, drops keys that already exist."""
        context, manager = self.compaction, self.compaction.manager
        read = context.read
        level0 = {f.file_name: list(read(f)) for f in unit.files if f.level == 0}
        records = [t for tables in level0.values() for t in tables]
        found = lookup.lookup(unit, records)
        if found is None:
            return run_compaction(unit, read, self.file_writer, self.key_names, self.merge_function, drop_delete)
        if manager is not None and unit.others and lookup.needs_full_merge(records):
            unit, drop_delete = CompactUnit(manager.levels.max_level, [*unit.runs, *unit.others]), True
        rewrite = False
        if lookup.insert_only:
            kept = {name: [lookup.without_known_keys(found, t) for t in tables] for name, tables in level0.items()}
            rewrite = sum(t.num_rows for ts in kept.values() for t in ts) < found.new.num_rows
            level0 = kept

        def cached_read(f: DataFileMeta) -> Iterator[pa.Table]:  # level-0 files: read once, for lookup and merge
            return iter(level0[f.file_name]) if f.level == 0 and f.file_name in level0 else read(f)

        result = run_compaction(unit, cached_read, self.file_writer, self.key_names, self.merge_function,
                                drop_delete, rewrite=rewrite, upgrades=self._upgrades())
        if context.changelog_producer == "lookup" and context.changelog_writer is not None:
            changes = lookup.changelog(found)
            if changes is not None:
                result.changelog = context.changelog_writer.write(changes, level=0, file_source=FILE_SOURCE_COMPACT)
        return result

    def _after_flush(self, files: list[DataFileMeta]) -> None:
        manager = self.compaction.manager
        if manager is None:
            return
        for f in files:
            manager.levels.add_level0(f)
        self._collect_compaction(blocking=False)
        while manager.should_stall() and manager.running:
            manager.stalls += 1
            with metrics.write_stall(manager.table):
                self._collect_compaction(blocking=True)
            manager.trigger()
        manager.trigger(inline=self._at_commit)

    def compact(self, full: bool, wait: bool = True) -> None:
        manager = self.compaction.manager
        if manager is None:
            return
        self.flush()
        self._collect_compaction(blocking=True)
        manager.trigger(full=full)
        if wait:
            self._collect_compaction(blocking=True)

    def finish_compaction(self) -> None:
        self._collect_compaction(blocking=True)

    def _collect_compaction(self, blocking: bool) -> None:
        manager = self.compaction.manager
        if manager is None:
            return
        blocking = blocking or manager.levels.number_of_sorted_runs() > manager.stop_trigger + 1
        result = manager.collect(blocking)
        if result is None:
            return
        self._absorb(result)

    def _absorb(self, result: CompactResult) -> None:
        """Fold a compaction result into what the next commit reports. Outputs of earlier
        compactions that no commit saw are intermediate: dropped, and deleted unless still in
        use. New files stay new even once compacted away (as in Java's MergeTreeWriter): the
        APPEND snapshot must hold every change, for time travel and incremental readers, which
        skip COMPACT snapshots."""
        intermediate = {f.file_name for f in self.compacted.after}
        upgraded = {f.file_name for f in result.after}
        for f in result.before:
            if f.file_name in intermediate:
                self.compacted.after = [a for a in self.compacted.after if a.file_name != f.file_name]
                committed = f.file_name in {b.file_name for b in self.compacted.before}  # an upgrade
                if f.file_name not in upgraded and not committed:
                    self.file_writer.file_io.delete(f"{self.file_writer.bucket_dir}/{f.file_name}")
            else:
                self.compacted.before.append(f)
        self.compacted.after.extend(result.after)
        self.compacted.changelog.extend(result.changelog)

    def take_over(self, old: BucketWriter) -> None:
        super().take_over(old)
        if isinstance(old, KeyValueBucketWriter) and old.spilled:
            if self.spilled is not None:
                self.spilled.close()
            self.spilled, old.spilled = old.spilled, None

    def close(self) -> None:
        manager = self.compaction.manager
        if manager is not None and manager.future is not None:
            manager.future.cancel()
        if self.purge is not None:
            self.purge.cancel()
        if self.spilled is not None:
            self.spilled.close()  # unflushed rows are discarded, as the buffer's are


def _is_identity(order: np.ndarray) -> bool:
    return bool(np.array_equal(order, np.arange(len(order), dtype=order.dtype)))


def _latest_wins(merge_function: MergeFunction) -> bool:
    """Deduplicate without sequence field or ignore-delete: a key's last record is its merge."""
    return isinstance(merge_function, DeduplicateMerge) and merge_function.sequence is None \
        and not merge_function.ignore_delete
