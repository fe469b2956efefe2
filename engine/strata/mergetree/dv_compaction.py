"""Compaction of a deletion-vector (merge-on-write) bucket, as Paimon's LookupMergeTreeCompactRewriter
does it with a deletion-vector maintainer.

Levels above 0 hold each key's full state, live in exactly one file: readers read them without
merging and drop the rows the bucket's deletion vectors mark. A unit that moves level-0 records up
looks up their keys in the runs outside the unit (positions included), merges the found state with
the new records, writes the result at the output level, and marks the found rows deleted. Files the
unit rewrites lose their vectors; retractions are dropped (a deleted key is gone once its old row is
marked). Every read of a file applies its current vector.

The lookup outside the unit decodes only the key column(s) when the old rows' values do not matter
(deduplicate without sequence field, ignore-delete or lookup changelog: the new record replaces the
old one whatever it holds), skips files whose key range holds no new key, and matches integer keys
by binary search in each (sorted) file. The keys of the bucket's files are kept in memory (files
are immutable; up to KEY_CACHE_ROWS keys a bucket), so a commit decodes no file it has seen. A unit
that is one level-0 file without retractions is upgraded to its output level without rewriting it:
only the rows it supersedes are marked.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.deletionvectors import BucketDeletionVectors
from strata.io.data_file_reader import ROW_POSITION
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.anti_join import _key_codes
from strata.mergetree.compact.task import CompactResult, FileReader, run_compaction
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.key_sets import key_mask, unique_keys
from strata.mergetree.levels import KeyOrder
from strata.mergetree.lookup import Found, LevelLookup
from strata.mergetree.merge_function import DeduplicateMerge, MergeFunction, drop_retractions
from strata.mergetree.sorting import group_ends, sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER

_FILE = "__strata_dv_file"
# reads a data file with each row's position (ROW_POSITION), without its deleted rows; only the
# given file-layout columns (None: all of them); keyword `deleted`: these positions instead of the
# file's vector
PositionedReader = Callable[..., Iterator[pa.Table]]
KEY_CACHE_ROWS = 16 << 20  # keys of a bucket's files kept in memory (int64 each, positions when some are dead)


class DeletionVectorCompaction:
    """Runs the compaction units of one merge-on-write bucket."""

    def __init__(self, vectors: BucketDeletionVectors, read: FileReader,
                 read_positioned: PositionedReader, writer: DataFileWriter,
                 key_names: list[str], merge_function: MergeFunction, lookup: LevelLookup | None,
                 changelog_writer: DataFileWriter | None, schema: pa.Schema, key_order: KeyOrder | None = None):
        """`schema`: the data files' Arrow schema (file layout); `key_order` decodes the files'
        min/max keys (files whose range holds no looked-up key are skipped)."""
        self.vectors = vectors
        self.read = read
        self.read_positioned = read_positioned
        self.writer = writer
        self.key_names = key_names
        self.merge_function = merge_function
        self.lookup = lookup  # with the lookup changelog producer
        self.changelog_writer = changelog_writer
        self.schema = schema
        self.key_order = key_order
        # the old rows' values matter only to merge engines that combine them with the new record
        # (or keep the old one), and to the lookup changelog; otherwise the lookup reads keys only
        self.values_needed = lookup is not None or not (
            isinstance(merge_function, DeduplicateMerge) and merge_function.sequence is None
            and not merge_function.ignore_delete)
        # file name -> (sorted int64 key codes, their row positions or None for 0..n-1): the keys
        # a lookup matches, one integer-like key column only
        self._keys: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        self._cached_rows = 0
        # a purge runs in the background while the writer flushes (and caches the flushed keys)
        self._cache_lock = threading.Lock()
        # level-0 files this writer just flushed, by name: their rows, so that the compaction of
        # the same commit (which moves them up) does not decode them again
        self._flushed: dict[str, pa.Table] = {}

    def flushed(self, files: list[DataFileMeta], rows: pa.Table) -> None:
        """A flush wrote `rows` (file layout, in order) as the level-0 `files`."""
        if sum(f.row_count for f in files) != rows.num_rows:
            return
        start = 0
        for f in files:
            self._flushed[f.file_name] = rows.slice(start, f.row_count)
            start += f.row_count
        self._remember(files, rows)

    def _rows_of(self, f: DataFileMeta) -> list[pa.Table]:
        flushed = self._flushed.pop(f.file_name, None)
        if flushed is not None:
            return [flushed.select(self.schema.names)]
        return list(self.read(f))

    def run(self, unit: CompactUnit) -> CompactResult:
        if unit.purge:
            result = self._purge(unit)
        elif not any(f.level == 0 for f in unit.files) or (not unit.others and self.lookup is None):
            result = self._rewrite(unit)
        elif self._upgradable(unit):
            result = self._upgrade(unit)
        else:
            result = self._merge_level0(unit)
        kept = {f.file_name for f in result.after}
        for f in result.before:
            self._flushed.pop(f.file_name, None)
            if f.file_name not in kept:
                self._forget(f.file_name)
        return result

    def _upgradable(self, unit: CompactUnit) -> bool:
        """One level-0 file (merged at flush: each key once) of inserts and updates only, whose
        old rows need no merging: it moves up as it is."""
        if self.values_needed or len(unit.files) != 1 or unit.output_level == 0:
            return False
        f = unit.files[0]
        return f.level == 0 and f.delete_row_count == 0 and not self.vectors.has_deletions(f.file_name)

    def _level0_keys(self, new: pa.Table, files: int) -> tuple[pa.Table, np.ndarray | None]:
        """The distinct keys of the records of `files` level-0 files, and their sorted codes when
        known. One file's integer keys come sorted and unique, as a flush writes them: they are
        the looked-up keys as they are, with no distinct pass."""
        if files == 1 and len(self.key_names) == 1:
            codes = _key_codes(new.column(self.key_names[0]))
            if codes is not None and _strictly_increasing(codes):
                return new.select(self.key_names), codes
        return unique_keys(new, self.key_names), None

    def _upgrade(self, unit: CompactUnit) -> CompactResult:
        f = unit.files[0]
        flushed = self._flushed.get(f.file_name)
        if flushed is not None:
            new = flushed.select(self.key_names)
        else:
            new = _concat([t.drop_columns([ROW_POSITION]) for t in self.read_positioned(f, self.key_names)],
                          pa.schema([self.schema.field(n) for n in self.key_names]).empty_table())
            self._remember([f], new)  # its keys, for the lookups of the next commits
        self._mark_superseded(unit, *self._level0_keys(new, 1))
        return CompactResult([f], [dataclasses.replace(f, level=unit.output_level)], [])

    def _purge(self, unit: CompactUnit) -> CompactResult:
        """Rewrite each file of the unit alone at its level, without the rows its vector marks
        (and without retractions): its live keys are live in no other file, so nothing merges,
        and the level keeps its files' key ranges disjoint. A file left without rows is dropped."""
        before, after = [], []
        for f in unit.files:
            rows = drop_retractions(_concat(list(self.read(f)), self._empty()))
            written = self.writer.write(rows, level=f.level, file_source=FILE_SOURCE_COMPACT) \
                if rows.num_rows else []
            self.vectors.remove(f.file_name)
            self._remember(written, rows)
            before.append(f)
            after.extend(written)
        return CompactResult(before, after, [])

    # -- background purges --------------------------------------------------------------------
    def snapshot(self, unit: CompactUnit) -> dict[str, np.ndarray | None]:
        """The positions each file of a purge unit has marked now (taken while no compaction runs)."""
        return {f.file_name: self.vectors.positions_of(f.file_name) for f in unit.files}

    def purge_in_background(self, unit: CompactUnit, marked: dict[str, np.ndarray | None]) -> list[Purged]:
        """Rewrite each file of `unit` without the rows `marked` (its vector when the purge
        started) while the writer goes on: touches neither the vectors nor the key cache; the
        writer applies the result (apply_purge) once no compaction runs."""
        purged = []
        for f in unit.files:
            rows = _concat(list(self.read_positioned(f, None, deleted=marked[f.file_name])),
                           self._empty().append_column(ROW_POSITION, pa.array([], pa.int64())))
            rows = drop_retractions(rows)
            kept = rows.column(ROW_POSITION).to_numpy()
            rows = rows.drop_columns([ROW_POSITION])
            written = self.writer.write(rows, level=f.level, file_source=FILE_SOURCE_COMPACT) \
                if rows.num_rows else []
            purged.append(Purged(f, written, kept, marked[f.file_name]))
        return purged

    def apply_purge(self, purged: list[Purged], live: set[str],
                    delete: Callable[[DataFileMeta], None]) -> CompactResult:
        """Replace each purged file by its rewrite. Rows marked since the purge started move to
        the rewrite's vector (a rewrite row is the purged file's kept[i]); a file some compaction
        rewrote meanwhile (not in `live`) keeps that rewrite: the purge's output is deleted."""
        before, after = [], []
        for p in purged:
            name = p.file.file_name
            if name not in live:
                for f in p.written:
                    delete(f)
                continue
            now = self.vectors.positions_of(name)
            since = now if now is None or p.marked is None else np.setdiff1d(now, p.marked, assume_unique=True)
            self.vectors.remove(name)
            self._carry_keys(name, p)
            if since is not None and len(since):
                at = np.searchsorted(p.kept, since)  # marked since: live when the purge read them
                start = 0
                for f in p.written:
                    local = at[(at >= start) & (at < start + f.row_count)] - start
                    self.vectors.mark(f.file_name, local)
                    start += f.row_count
            before.append(p.file)
            after.extend(p.written)
        return CompactResult(before, after, [])

    def _carry_keys(self, name: str, p: Purged) -> None:
        """The purged file's cached keys become its rewrite's: the rows it kept, in order (no
        decode of the rewrite at the next lookup)."""
        with self._cache_lock:
            cached = self._keys.get(name)
            self._forget_locked(name)
        if cached is None:
            return
        codes, positions = cached
        if positions is None:
            kept = codes[p.kept]
        else:  # keys cached while some rows were dead: the kept rows are among those cached
            at = _search(positions, p.kept)
            if len(at) != len(p.kept):
                return
            kept = codes[at]
        start = 0
        for f in p.written:
            self._cache(f.file_name, kept[start:start + f.row_count], None)
            start += f.row_count

    def _rewrite(self, unit: CompactUnit) -> CompactResult:
        """Runs whose keys are each live once (or a unit with no run outside it): a plain merge of
        the live rows, streamed; rewritten files lose their vectors, upgraded ones keep them."""
        marked = any(self.vectors.positions_of(f.file_name) is not None for f in unit.files)
        result = run_compaction(unit, self.read, self.writer, self.key_names, self.merge_function,
                                drop_delete=unit.output_level > 0, rewrite=marked)
        kept = {f.file_name for f in result.after}
        for f in result.before:
            if f.file_name not in kept:
                self.vectors.remove(f.file_name)
        return result

    def _merge_level0(self, unit: CompactUnit) -> CompactResult:
        per_file = [(f, self._rows_of(f)) for f in unit.files]
        records = [t for _, tables in per_file for t in tables]
        new = _concat([t for f, tables in per_file if f.level == 0 for t in tables], self._empty())
        keys, sorted_codes = self._level0_keys(new, sum(1 for f in unit.files if f.level == 0))
        if not self.values_needed:
            # deduplicate: the old rows are only marked, the unit's records win
            merged = drop_retractions(self._latest(records))
            after = self.writer.write(merged, level=unit.output_level, file_source=FILE_SOURCE_COMPACT)
            for f in unit.files:
                self.vectors.remove(f.file_name)
            self._mark_superseded(unit, keys, sorted_codes)
            self._remember(after, merged)
            return CompactResult(list(unit.files), after, [])
        outside = self._live_rows_outside(unit, keys)
        plain_outside = outside.drop_columns([_FILE, ROW_POSITION])
        merged = self._merge([plain_outside, *records])
        after = self.writer.write(drop_retractions(merged), level=unit.output_level, file_source=FILE_SOURCE_COMPACT)
        for f in unit.files:
            self.vectors.remove(f.file_name)
        self._mark(outside)
        above = [t for f, tables in per_file if f.level > 0 for t in tables]
        return CompactResult(list(unit.files), after,
                             self._changelog(new, keys, plain_outside, above, unit.output_level))

    # -- the lookup of superseded rows by key only -----------------------------------------------
    def _mark_superseded(self, unit: CompactUnit, keys: pa.Table, sorted_codes: np.ndarray | None = None) -> None:
        """Mark the rows of `keys` (distinct; `sorted_codes`: their codes, if known) in the runs
        outside the unit (their values do not matter)."""
        if sorted_codes is None:
            sorted_codes = _sorted_codes(keys, self.key_names)
        bounds = self._key_bounds(keys)
        for run in unit.others:
            for f in run.files:
                if bounds is not None and self._outside(f, bounds):
                    continue
                cached = self._cached_keys(f) if sorted_codes is not None else None
                if cached is not None and sorted_codes is not None:
                    codes, positions = cached
                    at = _search(codes, sorted_codes)
                    # a cached key may since have been marked: marking it again changes nothing
                    self.vectors.mark(f.file_name, at if positions is None else positions[at])
                    continue
                for table in self.read_positioned(f, self.key_names):
                    rows = _matching_rows(table, keys, self.key_names, sorted_codes)
                    if rows is not None:
                        self.vectors.mark(f.file_name, rows.column(ROW_POSITION).to_numpy())

    def _cached_keys(self, f: DataFileMeta) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The file's live keys as sorted int64 codes and their positions, read once."""
        cached = self._keys.get(f.file_name)
        if cached is not None:
            return cached
        tables = list(self.read_positioned(f, self.key_names))
        if not tables:
            return None
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        codes = _key_codes(table.column(self.key_names[0]))
        if codes is None or not _strictly_increasing(codes):
            return None
        positions = table.column(ROW_POSITION).to_numpy()
        return self._cache(f.file_name, codes, None if len(positions) == f.row_count else positions)

    def _remember(self, files: list[DataFileMeta], rows: pa.Table) -> None:
        """Cache the keys of files just written (or upgraded) from `rows`, their rows in order."""
        if len(self.key_names) != 1 or sum(f.row_count for f in files) != rows.num_rows:
            return
        codes = _key_codes(rows.column(self.key_names[0]))
        if codes is None:
            return
        start = 0
        for f in files:
            part = codes[start:start + f.row_count]
            start += f.row_count
            if _strictly_increasing(part):
                self._cache(f.file_name, part, None)

    def _cache(self, name: str, codes: np.ndarray,
               positions: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        entry = (codes, positions)
        with self._cache_lock:
            if self._cached_rows + len(codes) <= KEY_CACHE_ROWS:
                self._forget_locked(name)
                self._keys[name] = entry
                self._cached_rows += len(codes)
        return entry

    def _forget(self, name: str) -> None:
        with self._cache_lock:
            self._forget_locked(name)

    def _forget_locked(self, name: str) -> None:
        entry = self._keys.pop(name, None)
        if entry is not None:
            self._cached_rows -= len(entry[0])

    def _live_rows_outside(self, unit: CompactUnit, keys: pa.Table) -> pa.Table:
        """The live rows of `keys` in the runs outside the unit, with their file and position."""
        found = []
        sorted_codes = _sorted_codes(keys, self.key_names)
        bounds = self._key_bounds(keys)
        for run in unit.others:
            for f in run.files:
                if bounds is not None and self._outside(f, bounds):
                    continue
                for table in self.read_positioned(f, None):
                    rows = _matching_rows(table, keys, self.key_names, sorted_codes)
                    if rows is not None and rows.num_rows:
                        found.append(rows.append_column(_FILE, pa.repeat(pa.scalar(f.file_name), rows.num_rows)))
        if found:
            return pa.concat_tables(found)
        return self._empty().append_column(ROW_POSITION, pa.array([], pa.int64())) \
            .append_column(_FILE, pa.array([], pa.string()))

    def _outside(self, f: DataFileMeta, bounds: tuple[tuple, tuple]) -> bool:
        """True when the file's key range lies wholly below or above the looked-up keys."""
        assert self.key_order is not None
        try:
            return bool(self.key_order(f.max_key) < bounds[0] or self.key_order(f.min_key) > bounds[1])
        except TypeError:  # a decoded key of another Python type than Arrow's: read the file
            return False

    def _key_bounds(self, keys: pa.Table) -> tuple[tuple, tuple] | None:
        """The smallest and largest looked-up key, in the key order of the files' min/max keys
        (one key column; None: no file is skipped)."""
        if self.key_order is None or len(self.key_names) != 1 or keys.num_rows == 0:
            return None
        column = keys.column(0)
        if column.null_count:
            return None
        low, high = pc.min_max(column).values()
        return (low.as_py(),), (high.as_py(),)

    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def _merge(self, tables: list[pa.Table]) -> pa.Table:
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return self._empty()
        records = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        order = sort_by_key(records, self.key_names, SEQUENCE_NUMBER)
        return self.merge_function.merge(records.take(order), self.key_names)

    def _latest(self, tables: list[pa.Table]) -> pa.Table:
        """Deduplicate: each key's latest record, in key order, gathered once."""
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return self._empty()
        records = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        order = sort_by_key(records, self.key_names, SEQUENCE_NUMBER)
        keys = pa.table({k: records.column(k).take(order) for k in self.key_names})
        return records.take(pa.array(order[group_ends(keys, self.key_names)]))

    def _mark(self, outside: pa.Table) -> None:
        if outside.num_rows == 0:
            return
        files = outside.column(_FILE).combine_chunks()
        positions = outside.column(ROW_POSITION).to_numpy()
        encoded = pc.dictionary_encode(files)
        codes = encoded.indices.to_numpy()
        for code, name in enumerate(encoded.dictionary.to_pylist()):
            self.vectors.mark(name, np.sort(positions[codes == code]))

    def _changelog(self, new: pa.Table, keys: pa.Table, outside: pa.Table,
                   above: list[pa.Table], level: int) -> list[DataFileMeta]:
        """The lookup producer's changelog of the level-0 keys: their state before (found above
        level 0, in or outside the unit) against after; its files carry the compaction's output
        level, as Paimon's (whose level > 0 filter of merge-on-write reads keeps them)."""
        if self.lookup is None or self.changelog_writer is None:
            return []
        inside = [t.filter(pa.array(key_mask(t, keys, self.key_names))) for t in above]
        changes = self.lookup.changelog(Found(new, _concat([t for t in inside if t.num_rows], new.slice(0, 0)),
                                              outside))
        if changes is None:
            return []
        return self.changelog_writer.write(changes, level=level, file_source=FILE_SOURCE_COMPACT)


@dataclasses.dataclass
class Purged:
    """A file a background purge rewrote: its rewrite, and which of its rows the rewrite holds."""

    file: DataFileMeta
    written: list[DataFileMeta]
    kept: np.ndarray  # the purged file's positions of the rewrite's rows, ascending
    marked: np.ndarray | None  # the positions its vector marked when the purge started


def _sorted_codes(keys: pa.Table, key_names: list[str]) -> np.ndarray | None:
    """One integer-like key: the looked-up keys as sorted int64 codes (matched by binary search)."""
    if len(key_names) != 1:
        return None
    codes = _key_codes(keys.column(key_names[0]))
    return None if codes is None else np.sort(codes)


def _search(codes: np.ndarray, sorted_codes: np.ndarray) -> np.ndarray:
    """Indices into `codes` (sorted, unique) of the values in `sorted_codes` (sorted, unique), ascending."""
    at = np.searchsorted(codes, sorted_codes)
    inside = at < len(codes)
    at = at[inside]
    return at[codes[at] == sorted_codes[inside]]


def _strictly_increasing(codes: np.ndarray) -> bool:
    return bool(np.all(codes[1:] > codes[:-1]))


def _matching_rows(table: pa.Table, keys: pa.Table, key_names: list[str],
                   sorted_codes: np.ndarray | None) -> pa.Table | None:
    """The rows of `table` (a batch of one data file, in key order) whose key is one of `keys`."""
    if table.num_rows == 0:
        return None
    column = _key_codes(table.column(key_names[0])) if sorted_codes is not None else None
    if column is not None and sorted_codes is not None and _strictly_increasing(column):
        # the file is sorted by key, each live key once: binary-search each looked-up key
        at = _search(column, sorted_codes)
        return table.take(pa.array(at)) if len(at) else None
    hit = key_mask(table, keys, key_names)
    return table.filter(pa.array(hit)) if hit.any() else None


def _concat(tables: list[pa.Table], empty: pa.Table) -> pa.Table:
    if tables:
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return empty
