"""TableRead: turn splits into Arrow record batches, merging sorted runs of primary-key buckets."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.deletionvectors import deleted_positions
from strata.errors import SnapshotNotFoundError
from strata.expressions import Predicate, integer_range, only_fields
from strata.expressions.literals import bind
from strata.fs import FileIO
from strata.fs.prefetch import PrefetchedFileIO, prefetching
from strata.io.arrays import to_numpy
from strata.io.data_file_reader import ColumnMapping, ReadStats, filter_rows, read_file
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.anti_join import anti_join_applies, integer_like, precedence_from_ranges
from strata.mergetree.merge_function import FirstRowMerge, live_rows_mask, merge_function_for
from strata.mergetree.merge_reader import merge_runs
from strata.mergetree.sections import key_sections, sections_apply
from strata.operation.commit import key_decoder
from strata.scan.planner import DataSplit, TableScan
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from strata.store import FileStore, HasStore, store_of

ROW_KIND_COLUMN = "_ROW_KIND"
KIND_NAMES = ("+I", "-U", "+U", "-D")  # by row-kind code; an Arrow array here would import pandas at import

# decodes one data file of a split: (file, columns, row-group pruning predicate) -> its batches
Decode = Callable[[DataFileMeta, list[str], "Predicate | None"], Iterator[pa.Table]]


class TableRead:
    def __init__(self, table: FileStore | HasStore, columns: Sequence[str] | None = None,
                 filter: Predicate | None = None):
        self.store = table = store_of(table)
        self.schema = table.schema
        self.columns = list(columns) if columns is not None else self.schema.field_names
        for name in self.columns:
            self.schema.field(name)  # clear error for an unknown column
        self.filter = filter = bind(filter, self.schema)  # typed literals, as the scan's
        needed = set(self.columns) | (filter.fields() if filter else set())
        self.value_columns = [n for n in self.schema.field_names if n in needed]
        self.output_schema = pa.schema([self.schema.field(n).to_arrow() for n in self.columns])
        self.key_names = [KEY_PREFIX + f.name for f in self.schema.key_fields()] if self.schema.primary_keys else []
        self.merge_function = merge_function_for(self.schema.options, self.schema) if self.schema.primary_keys else None
        key_fields = set(self.schema.trimmed_primary_keys)
        self.key_order = key_decoder(self.schema) if self.schema.primary_keys else None
        self.by_key_sections = bool(self.schema.primary_keys) and sections_apply(self.schema)
        self.key_filter = only_fields(filter, key_fields) if self.schema.primary_keys else filter
        # a filter on key columns only selects whole keys: each run is filtered before its merge,
        # and the merged rows need no second pass
        self.filter_in_runs = filter is not None and bool(self.schema.primary_keys) and filter.fields() <= key_fields
        self.key_range = _sorted_key_range(self.schema, self.key_filter)
        self._mappings: dict[tuple[int, tuple[str, ...]], ColumnMapping] = {}
        self.stats = ReadStats()  # files and row groups this read decoded, over all its calls

    # -- public ----------------------------------------------------------------------------------
    def to_batches(self, splits: Sequence[DataSplit]) -> Iterator[pa.RecordBatch]:
        """Batches split after split; the next split is read ahead on another thread, so at
        most two splits are in flight (bounded memory)."""
        if len(splits) < 2:
            for split in splits:
                for table in self.read_split(split):
                    yield from table.to_batches()
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-read") as pool:
            ahead = pool.submit(_listed, self.read_split, splits[0])
            for nxt in [*splits[1:], None]:
                tables = ahead.result()
                if nxt is not None:
                    ahead = pool.submit(_listed, self.read_split, nxt)
                for table in tables:
                    yield from table.to_batches()

    def to_arrow(self, splits: Sequence[DataSplit]) -> pa.Table:
        workers = min(sum(len(s.files) for s in splits), os.cpu_count() or 1)
        if workers > 1:
            tables = self._read_in_parallel(splits, workers)
        else:
            tables = [t for s in splits for t in self.read_split(s)]
        with_kinds = any(self._labels_kinds(s) for s in splits)
        schema = self._schema(with_kinds)
        return pa.concat_tables(tables) if tables else schema.empty_table()

    def _read_in_parallel(self, splits: Sequence[DataSplit], workers: int) -> list[pa.Table]:
        """Every file decodes as a task of its own, largest first, then each split merges from
        its decoded files: uneven splits (one bucket with more sorted runs than the others) still
        keep every core busy. pyarrow releases the GIL while decoding, filtering and gathering;
        each task decodes on one thread (pyarrow's column threads on top only contend). Decoded
        files wait for their merge: memory is the result to_arrow returns anyway, plus the
        records the merge drops."""
        reads = [(i, f, wanted, prune) for i, split in enumerate(splits)
                 for f, wanted, prune in self._file_reads(split)]
        io = self._prefetching_io((splits[i], f, prune) for i, f, _, prune in reads)
        # raw (deletion-vector) files need no merge: a large one decodes as several tasks of
        # consecutive row groups, so that the last large file does not leave a core idle. Not on
        # an object store, where each file arrives in one GET
        parts = [(i, f, wanted, prune, k, part) for i, f, wanted, prune in reads
                 for k, part in enumerate(_row_ranges(f.row_count) if self._raw(splits[i])
                                          and not self.store.file_io.is_object_store else [None])]
        parts.sort(key=lambda r: -r[1].file_size * _share(r[5], r[1].row_count))  # largest first
        try:
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="strata-read") as pool:
                futures = {(i, f.file_name, k): pool.submit(_listed, self._read, splits[i], f, wanted, prune, io,
                                                            False, part)
                           for i, f, wanted, prune, k, part in parts}
                decoded: list[dict[str, list[Future[list[pa.Table]]]]] = [defaultdict(list) for _ in splits]
                for i, name, k in sorted(futures):  # each file's parts in row order
                    decoded[i][name].append(futures[(i, name, k)])
                # queued behind every decode: a merge only ever waits for decodes already running
                merged = [pool.submit(_listed, self._read_split, split, _from_futures(decoded[i]))
                          for i, split in enumerate(splits)]
                return [t for part in merged for t in part.result()]
        finally:
            if isinstance(io, PrefetchedFileIO):
                io.close()

    def to_pandas(self, splits: Sequence[DataSplit]):
        return self.to_arrow(splits).to_pandas()

    def to_record_batch_reader(self, splits: Sequence[DataSplit]) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.output_schema, self.to_batches(splits))

    def _schema(self, with_kinds: bool) -> pa.Schema:
        if not with_kinds:
            return self.output_schema
        return pa.schema([pa.field(ROW_KIND_COLUMN, pa.string(), nullable=False), *self.output_schema])

    # -- splits ----------------------------------------------------------------------------------
    def read_split(self, split: DataSplit, decode_threads: bool = True) -> Iterator[pa.Table]:
        """The split's rows, merged; `decode_threads=False` when the caller reads splits in parallel."""
        io = self._prefetching_io((split, f, prune) for f, _, prune in self._file_reads(split))
        try:
            yield from self._read_split(split, lambda f, wanted, prune: self._read(split, f, wanted, prune, io,
                                                                                   decode_threads))
        finally:
            if isinstance(io, PrefetchedFileIO):
                io.close()

    def _read_split(self, split: DataSplit, decode: Decode) -> Iterator[pa.Table]:
        batches: Iterator[pa.Table]
        if self._raw(split):
            batches = (t for f, wanted, prune in self._file_reads(split) for t in decode(f, wanted, prune))
        else:
            batches = self._merged(split, decode) if self.schema.primary_keys else self._appended(split, decode)
        with_kinds = self._labels_kinds(split)
        filtered = self._raw(split) or self.filter_in_runs  # applied by the reader (_read) or to each run (_run)
        for batch in batches:
            out = self._finish(batch, with_kinds, filtered)
            if out.num_rows:
                yield out

    def _labels_kinds(self, split: DataSplit) -> bool:
        """Whether the rows come out labelled with their row kind, retractions kept."""
        return split.row_kinds

    def _prefetching_io(self, reads: Iterable[tuple[DataSplit, DataFileMeta, Predicate | None]]) -> FileIO:
        """On an object store, the files read unfiltered are fetched whole and concurrently (in
        reading order); filtered ones keep ranged reads, which skip pruned row groups."""
        if not self.store.file_io.is_object_store:
            return self.store.file_io
        return prefetching(self.store.file_io, [(split.file_path(f), f.file_size) for split, f, prune in reads
                                                if prune is None])

    def _file_reads(self, split: DataSplit) -> list[tuple[DataFileMeta, list[str], Predicate | None]]:
        """What reading the split decodes, in reading order: each file, its columns and the
        predicate that prunes its row groups."""
        if not self.schema.primary_keys:
            return [(f, self.value_columns, self.filter) for f in split.files]
        if self._raw(split):
            # merge-on-write: each key is live in one file, so every filter prunes row groups
            return [(f, [VALUE_KIND, *self.value_columns], self.filter) for f in split.files]
        return [(f, section.wanted, self.key_filter) for section in self._merge_plan(split).sections
                for run in section.file_runs for f in run]

    @staticmethod
    def _raw(split: DataSplit) -> bool:
        """Deletion-vector splits are read without merging (incremental reads keep their row kinds)."""
        return split.deletion_files is not None and not split.row_kinds

    def _appended(self, split: DataSplit, decode: Decode) -> Iterator[pa.Table]:
        for f in split.files:
            yield from decode(f, self.value_columns, self.filter)

    def _merge_plan(self, split: DataSplit) -> _MergePlan:
        assert self.key_order is not None
        # a value column that is also a key column is not decoded twice: it is its _KEY_ column
        key_values = [n for n in self.value_columns if KEY_PREFIX + n in self.key_names]
        sections = [self._section(_sorted_runs(files, self.key_order), split.row_kinds, key_values)
                    for files in self._sections(split)]
        return _MergePlan(sections, key_values)

    def _sections(self, split: DataSplit) -> list[list[DataFileMeta]]:
        """The split's files by key section when they merge; a delta (read with its row kinds,
        each file as written, changelog files unsorted by key) is one section, its files in
        sequence order."""
        assert self.key_order is not None
        if not self.by_key_sections or split.row_kinds:
            return [split.files]
        return key_sections(split.files, self.key_order)

    def _section(self, file_runs: list[list[DataFileMeta]], row_kinds: bool, key_values: list[str]) -> _Section:
        assert self.merge_function is not None
        # a delta is read as written, one sorted run holds each key once, and the anti-join
        # can take the runs' order from the files' sequence ranges: then no sequence column
        merging = not row_kinds and len(file_runs) > 1
        ranges = self._sequence_ranges(file_runs) if merging else None
        wanted = [*self.key_names, *([SEQUENCE_NUMBER] if merging and ranges is None else []), VALUE_KIND,
                  *(n for n in self.value_columns if n not in key_values)]
        if merging:  # e.g. sequence fields
            wanted += [n for n in self.merge_function.required_columns(self.value_columns) if n not in wanted]
        # the anti-join never looks at values: key columns are aliased after it, not filtered twice
        # (unless the key filter, which names them, runs before)
        alias_late = ranges is not None and self.key_filter is None
        return _Section(file_runs, merging, ranges, wanted, alias_late)

    def _merged(self, split: DataSplit, decode: Decode) -> Iterator[pa.Table]:
        """Section after section: only files whose key ranges overlap merge with each other."""
        plan = self._merge_plan(split)
        for section in plan.sections:
            yield from self._merged_section(section, plan.key_values, decode)

    def _merged_section(self, section: _Section, key_values: list[str], decode: Decode) -> Iterator[pa.Table]:
        assert self.merge_function is not None
        alias_early = [] if section.alias_late else key_values
        runs = [self._run(files, section.wanted, decode, alias_early) for files in section.file_runs]
        if not section.merging:
            for run in runs:
                yield from run
            return
        # a read need not come out in key order: deduplicate/first-row tables then take the cheaper
        # per-run anti-join (strata.mergetree.anti_join) where it applies
        for batch in merge_runs(runs, self.key_names, self.merge_function, ordered=False, ranges=section.ranges):
            yield _with_aliases(batch, key_values) if section.alias_late else batch

    def _sequence_ranges(self, file_runs: list[list[DataFileMeta]]) -> list[tuple[int, int]] | None:
        """Each run's (min, max) sequence number from its files, when they are all an anti-join
        merge needs (one integer-like key, runs that do not overlap in sequence numbers, no
        retraction for first-row to refuse); else None, and the runs are read with sequences."""
        assert self.merge_function is not None
        if len(self.key_names) != 1 or not anti_join_applies(self.merge_function):
            return None
        if not integer_like(self.schema.key_fields()[0].type.to_arrow()):
            return None
        first_row = isinstance(self.merge_function, FirstRowMerge)
        if first_row and any(f.delete_row_count != 0 for run in file_runs for f in run):
            return None
        ranges = [(min(f.min_sequence_number for f in run), max(f.max_sequence_number for f in run))
                  for run in file_runs]
        return ranges if precedence_from_ranges(ranges, newest_first=not first_row) is not None else None

    def _run(self, files: list[DataFileMeta], wanted: list[str], decode: Decode,
             key_values: Sequence[str]) -> Iterator[pa.Table]:
        # The key-only part of the filter can drop rows before merging: every record of a key
        # carries the same key, so it keeps or drops all of them, and merging the survivors gives
        # the same rows as merging everything and filtering after (which _finish still does).
        for f in files:
            for batch in decode(f, wanted, self.key_filter):
                batch = _with_aliases(batch, key_values)
                if self.key_range is not None:
                    yield _in_key_range(batch, *self.key_range)
                else:
                    yield batch if self.key_filter is None else filter_rows(batch, self.key_filter)

    def _read(self, split: DataSplit, f: DataFileMeta, wanted: list[str], prune: Predicate | None, io: FileIO,
              decode_threads: bool = True, row_range: tuple[int, int] | None = None) -> Iterator[pa.Table]:
        mapping = self._mapping(f.schema_id, wanted)
        stat_names = {k: KEY_PREFIX + k for k in self.schema.trimmed_primary_keys} if self.key_names else {}
        deleted = None
        if split.deletion_files and f.file_name in split.deletion_files:
            deleted = deleted_positions(self.store.file_io, split.deletion_files[f.file_name])
        # raw (deletion-vector) splits: the filter selects rows in the reader, before the deleted
        # rows are dropped, so a selective filter copies only what it keeps
        row_filter = self.filter if self._raw(split) else None
        yield from read_file(io, split.file_path(f), mapping, prune, stat_names, use_threads=decode_threads,
                             deleted=deleted, row_filter=row_filter, row_range=row_range, stats=self.stats)

    def _mapping(self, schema_id: int, wanted: list[str]) -> ColumnMapping:
        """How a file written under `schema_id` holds `wanted`: worked out once per read and
        copied for each file (threads may both work it out; they store equal mappings)."""
        key = (schema_id, tuple(wanted))
        template = self._mappings.get(key)
        if template is None:
            template = self._mappings[key] = ColumnMapping(self.schema, self.store.schema_at(schema_id), wanted)
        return template.copy()

    def _finish(self, batch: pa.Table, with_kinds: bool, filtered: bool = False) -> pa.Table:
        """Drop retractions (or label them), apply the filter (unless already `filtered`), project."""
        if self.key_names:
            codes = to_numpy(batch.column(VALUE_KIND))
            if with_kinds:
                kinds = pc.take(pa.array(KIND_NAMES), pa.array(codes.astype(np.int32)))
                batch = batch.append_column(ROW_KIND_COLUMN, kinds)
            else:
                mask = live_rows_mask(codes)
                if not mask.all():
                    batch = batch.filter(pa.array(mask))
        if self.filter is not None and not filtered:
            batch = filter_rows(batch, self.filter)
        out = pa.Table.from_arrays([batch.column(n) for n in self.columns], schema=self.output_schema)
        if with_kinds:
            # append tables hold inserts only, but an incremental read still labels every row
            kinds = batch.column(ROW_KIND_COLUMN) if self.key_names else pa.repeat("+I", out.num_rows)
            out = out.add_column(0, pa.field(ROW_KIND_COLUMN, pa.string(), nullable=False), kinds)
        return out


def read_arrow(store: FileStore, columns: Sequence[str] | None = None, filter: Predicate | None = None,
               snapshot_id: int | None = None, timestamp_millis: int | None = None, tag: str | None = None,
               read_optimized: bool = False) -> pa.Table:
    """Rows of the table (latest snapshot unless time travel), what ``Table.to_arrow`` returns."""
    scan, store = scan_as_of(store, filter, snapshot_id, timestamp_millis, tag, read_optimized)
    return TableRead(store, columns, filter).to_arrow(scan.plan().splits)


def read_batches(store: FileStore, columns: Sequence[str] | None = None, filter: Predicate | None = None,
                 snapshot_id: int | None = None) -> Iterator[pa.RecordBatch]:
    scan, store = scan_as_of(store, filter, snapshot_id)
    return TableRead(store, columns, filter).to_batches(scan.plan().splits)


def scan_as_of(store: FileStore, filter: Predicate | None, snapshot_id: int | None,
                timestamp_millis: int | None = None, tag: str | None = None,
                read_optimized: bool = False) -> tuple[TableScan, FileStore]:
    """The scan, and the store as of the scanned snapshot: time travel reads with that snapshot's
    schema (columns, names and options), as Paimon does."""
    scan = TableScan(store, snapshot_id, timestamp_millis, tag, filter, read_optimized)
    if (snapshot_id, timestamp_millis, tag) == (None, None, None):
        return scan, store
    snapshot = scan.snapshot()
    if snapshot is None or snapshot.schema_id == store.schema.id:
        return scan, store
    as_of = store.with_schema(store.schema_at(snapshot.schema_id))
    return TableScan(as_of, snapshot_id, timestamp_millis, tag, filter, read_optimized), as_of


def read_changes(store: FileStore, start_exclusive: int, end_inclusive: int,
                 columns: Sequence[str] | None = None) -> pa.Table:
    """Changes of snapshots (start, end], with a `_ROW_KIND` column (+I/-U/+U/-D): the
    changelog files with a changelog producer, else the records each commit wrote."""
    if start_exclusive > end_inclusive:  # an empty answer would hide a swapped or mistyped range
        raise ValueError(f"read_incremental({start_exclusive}, {end_inclusive}) of table {store.identifier}: "
                         f"the start snapshot {start_exclusive} is after the end snapshot {end_inclusive} "
                         "(the range is start exclusive, end inclusive)")
    latest = store.snapshot_manager.latest_id() or 0
    if end_inclusive > latest:
        raise SnapshotNotFoundError(f"read_incremental({start_exclusive}, {end_inclusive}) of table "
                                    f"{store.identifier}: snapshot {end_inclusive} does not exist; the "
                                    f"latest is {latest or 'none'}")
    scan = TableScan(store)
    splits = [s for sid in range(start_exclusive + 1, end_inclusive + 1) for s in scan.plan_changes(sid)]
    read = TableRead(store, columns)
    if not splits:
        return read._schema(True).empty_table()
    return read.to_arrow(splits)


@dataclass
class _Section:
    """Files of a split whose key ranges overlap, as sorted runs: the columns decoded, how they merge."""

    file_runs: list[list[DataFileMeta]]
    merging: bool
    ranges: list[tuple[int, int]] | None  # each run's sequence range, when the anti-join orders by it
    wanted: list[str]
    alias_late: bool  # key value columns aliased after the merge


@dataclass
class _MergePlan:
    """How a primary-key split is read: its sections, in key order."""

    sections: list[_Section]
    key_values: list[str]  # value columns read through their _KEY_ column


def _listed(read: Callable[..., Iterator[pa.Table]], *args: object) -> list[pa.Table]:
    return list(read(*args))


def _from_futures(decoded: dict[str, list[Future[list[pa.Table]]]]) -> Decode:
    """A Decode serving each file from its decode tasks (its parts, in row order), once (then the
    tables are the merge's)."""
    def decode(f: DataFileMeta, wanted: list[str], prune: Predicate | None) -> Iterator[pa.Table]:
        return (t for part in decoded.pop(f.file_name) for t in part.result())
    return decode


PART_ROWS = 128 * 1024  # rows of one decode task of a large raw file


def _row_ranges(row_count: int) -> list[tuple[int, int] | None]:
    """A raw file's decode tasks: row ranges of about PART_ROWS rows (one task: [None])."""
    parts = row_count // PART_ROWS
    if parts < 2:
        return [None]
    step = -(-row_count // parts)
    return [(start, start + step) for start in range(0, row_count, step)]


def _share(part: tuple[int, int] | None, row_count: int) -> float:
    return 1.0 if part is None or not row_count else (part[1] - part[0]) / row_count


def _sorted_key_range(schema: TableSchema, key_filter: Predicate | None) -> tuple[str, int, int] | None:
    """(key column, lo, hi) when `key_filter` is a closed range of the first key field, an
    integer: a data file is sorted by key, so the rows it selects from a run of the file are a
    slice of it (`_in_key_range`), found by binary search instead of testing every row."""
    interval = integer_range(key_filter) if key_filter is not None and schema.primary_keys else None
    if interval is None:
        return None
    first = schema.key_fields()[0]
    if interval[0] != first.name or not pa.types.is_integer(first.type.to_arrow()):
        return None
    return KEY_PREFIX + first.name, interval[1], interval[2]


def _in_key_range(batch: pa.Table, column: str, lo: int, hi: int) -> pa.Table:
    """The rows of `batch`, sorted by `column`, whose `column` is in [lo, hi] (zero-copy)."""
    keys = to_numpy(batch.column(column))
    bounds = np.iinfo(keys.dtype)
    if lo > hi or lo > bounds.max or hi < bounds.min:
        return batch.slice(0, 0)
    start = int(np.searchsorted(keys, max(lo, bounds.min), side="left"))
    end = int(np.searchsorted(keys, min(hi, bounds.max), side="right"))
    return batch.slice(start, end - start)


def _with_aliases(batch: pa.Table, key_values: Sequence[str]) -> pa.Table:
    """`batch` with each key value column as its _KEY_ column (zero-copy: the same array)."""
    for name in key_values:
        batch = batch.append_column(name, batch.column(KEY_PREFIX + name))
    return batch


def _sorted_runs(files: list[DataFileMeta], key_order: Callable[[bytes], tuple]) -> list[list[DataFileMeta]]:
    """Level 0: one run per file (oldest first); level >= 1: one run per level, by key order."""
    level0 = sorted((f for f in files if f.level == 0), key=lambda f: f.min_sequence_number)
    by_level: dict[int, list[DataFileMeta]] = defaultdict(list)
    for f in files:
        if f.level > 0:
            by_level[f.level].append(f)
    runs = [[f] for f in level0]
    for level in sorted(by_level, reverse=True):
        runs.append(sorted(by_level[level], key=lambda f: key_order(f.min_key)))
    return runs
