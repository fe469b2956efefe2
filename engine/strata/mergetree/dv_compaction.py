"""Compaction of a deletion-vector (merge-on-write) bucket, as Paimon's LookupMergeTreeCompactRewriter
does it with a deletion-vector maintainer.

Levels above 0 hold each key's full state, live in exactly one file: readers read them without
merging and drop the rows the bucket's deletion vectors mark. A unit that moves level-0 records up
looks up their keys in the runs outside the unit (positions included), merges the found state with
the new records, writes the result at the output level, and marks the found rows deleted. Files the
unit rewrites lose their vectors; retractions are dropped (a deleted key is gone once its old row is
marked). Every read of a file applies its current vector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.deletionvectors import BucketDeletionVectors
from strata.io.data_file_reader import ROW_POSITION
from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.compact.task import CompactResult, FileReader, run_compaction
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.lookup import Found, LevelLookup, key_mask, unique_keys
from strata.mergetree.merge_function import MergeFunction, drop_retractions
from strata.mergetree.sorting import sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER

_FILE = "__strata_dv_file"


class DeletionVectorCompaction:
    """Runs the compaction units of one merge-on-write bucket."""

    def __init__(self, vectors: BucketDeletionVectors, read: FileReader,
                 read_positioned: Callable[[DataFileMeta], Iterator[pa.Table]], writer: DataFileWriter,
                 key_names: list[str], merge_function: MergeFunction, lookup: LevelLookup | None,
                 changelog_writer: DataFileWriter | None, schema: pa.Schema):
        """`schema`: the data files' Arrow schema (file layout)."""
        self.vectors = vectors
        self.read = read
        self.read_positioned = read_positioned
        self.writer = writer
        self.key_names = key_names
        self.merge_function = merge_function
        self.lookup = lookup  # with the lookup changelog producer
        self.changelog_writer = changelog_writer
        self.schema = schema

    def run(self, unit: CompactUnit) -> CompactResult:
        if not any(f.level == 0 for f in unit.files) or (not unit.others and self.lookup is None):
            return self._rewrite(unit)
        return self._merge_level0(unit)

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
        per_file = [(f, list(self.read(f))) for f in unit.files]
        records = [t for _, tables in per_file for t in tables]
        new = _concat([t for f, tables in per_file if f.level == 0 for t in tables], self._empty())
        keys = unique_keys(new, self.key_names)
        outside = self._live_rows_outside(unit, keys)
        plain_outside = outside.drop_columns([_FILE, ROW_POSITION])
        merged = self._merge([plain_outside, *records])
        after = self.writer.write(drop_retractions(merged), level=unit.output_level, file_source=FILE_SOURCE_COMPACT)
        for f in unit.files:
            self.vectors.remove(f.file_name)
        self._mark(outside)
        above = [t for f, tables in per_file if f.level > 0 for t in tables]
        return CompactResult(list(unit.files), after, self._changelog(new, keys, plain_outside, above))

    def _live_rows_outside(self, unit: CompactUnit, keys: pa.Table) -> pa.Table:
        """The live rows of `keys` in the runs outside the unit, with their file and position."""
        found = []
        for run in unit.others:
            for f in run.files:
                for table in self.read_positioned(f):
                    hit = key_mask(table, keys, self.key_names)
                    if hit.any():
                        rows = table.filter(pa.array(hit))
                        found.append(rows.append_column(_FILE, pa.repeat(pa.scalar(f.file_name), rows.num_rows)))
        if found:
            return pa.concat_tables(found)
        return self._empty().append_column(ROW_POSITION, pa.array([], pa.int64())) \
            .append_column(_FILE, pa.array([], pa.string()))

    def _empty(self) -> pa.Table:
        return self.schema.empty_table()

    def _merge(self, tables: list[pa.Table]) -> pa.Table:
        tables = [t for t in tables if t.num_rows]
        if not tables:
            return self._empty()
        records = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
        order = sort_by_key(records, self.key_names, SEQUENCE_NUMBER)
        return self.merge_function.merge(records.take(order), self.key_names)

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
                   above: list[pa.Table]) -> list[DataFileMeta]:
        """The lookup producer's changelog of the level-0 keys: their state before (found above
        level 0, in or outside the unit) against after."""
        if self.lookup is None or self.changelog_writer is None:
            return []
        inside = [t.filter(pa.array(key_mask(t, keys, self.key_names))) for t in above]
        changes = self.lookup.changelog(Found(new, _concat([t for t in inside if t.num_rows], new.slice(0, 0)),
                                              outside))
        if changes is None:
            return []
        return self.changelog_writer.write(changes, level=0, file_source=FILE_SOURCE_COMPACT)


def _concat(tables: list[pa.Table], empty: pa.Table) -> pa.Table:
    if tables:
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    return empty
