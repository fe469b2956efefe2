"""Streaming, vectorized merge of sorted runs (SortMergeReader), in bounded memory.

Each run yields tables sorted by key with unique keys. The merge repeatedly takes, from every
run's current batch, the rows whose key is <= the smallest "last key" among those batches: no
later batch of any run can hold such a key, so those rows can be merged and emitted at once.

A reader that does not need key order (a full read) can ask for an unordered merge: for the
engines where one record of a key simply wins, anti_join.py filters each run on its own instead.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa

from strata.io.arrays import to_numpy
from strata.mergetree.anti_join import anti_join_applies, anti_join_merge
from strata.mergetree.changelog import diff_changelog
from strata.mergetree.key_sets import rows_with_keys, unique_keys
from strata.mergetree.merge_function import DeduplicateMerge, MergeFunction
from strata.mergetree.sorting import _numeric, group_ends, sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER


def merge_runs(runs: Sequence[Iterator[pa.Table]], key_names: Sequence[str],
               merge_function: MergeFunction, changelog: ChangelogSink | None = None,
               ordered: bool = True, ranges: Sequence[tuple[int, int]] | None = None) -> Iterator[pa.Table]:
    """Merged rows in key order. With `changelog`, the changes each key undergoes relative to
    run `changelog.top_run` (the previous full merge) are appended to `changelog.tables`.

    `ordered=False` (a full read) lets the runs be merged unordered by an anti-join where the
    engine and the key allow (see anti_join.py): the runs are then read whole, not streamed.
    `ranges` (unordered only): each run's (min, max) sequence number, from file metadata, for
    runs read without the sequence column."""
    if not ordered and changelog is None and len(key_names) == 1 and anti_join_applies(merge_function):
        yield from _merge_unordered(runs, key_names, merge_function, ranges)
        return
    yield from _merge_sorted(runs, key_names, merge_function, changelog)


def _merge_unordered(runs: Sequence[Iterator[pa.Table]], key_names: Sequence[str],
                     merge_function: MergeFunction, ranges: Sequence[tuple[int, int]] | None) -> Iterator[pa.Table]:
    # every run is needed whole: a record's fate depends on the keys of all runs above it
    materialized = [list(run) for run in runs]
    merged = anti_join_merge(materialized, key_names, merge_function, ranges)
    if merged is not None:
        yield from merged
        return
    if ranges is not None:  # e.g. a file holding a key twice: merge generally, on stand-in sequences
        materialized = [_with_sequences(run, low) for run, (low, _) in zip(materialized, ranges, strict=True)]
    yield from _merge_sorted([iter(run) for run in materialized], key_names, merge_function, None)


def _with_sequences(run: list[pa.Table], low: int) -> list[pa.Table]:
    """A run read without its sequence column, given ascending stand-ins from its lowest one:
    they keep the order of the runs (whose ranges do not overlap) and of the records of a key
    within a run (written in sequence order); a run has no more records than sequence numbers."""
    out, start = [], low
    for table in run:
        out.append(table.append_column(SEQUENCE_NUMBER, pa.array(np.arange(start, start + table.num_rows))))
        start += table.num_rows
    return out


def _merge_sorted(runs: Sequence[Iterator[pa.Table]], key_names: Sequence[str],
                  merge_function: MergeFunction, changelog: ChangelogSink | None) -> Iterator[pa.Table]:
    cursors = [_Cursor(run, key_names, i) for i, run in enumerate(runs)]
    # oldest run first, so that the records of a key meet in sequence order once concatenated
    # and sorting them needs no sequence tie-break (see sorting.sort_by_key)
    cursors = sorted((c for c in cursors if c.batch is not None), key=_Cursor.first_sequence)
    while cursors:
        if len(cursors) == 1:
            for batch in cursors[0].drain():
                if changelog is not None and cursors[0].index != changelog.top_run:
                    changelog.add(batch.slice(0, 0), batch, batch)
                yield batch
            return
        bound = min(c.last_key() for c in cursors)
        parts = [(c.index, c.take_through(bound)) for c in cursors]
        non_empty = [p for _, p in parts if p.num_rows]
        if len(non_empty) == 1 and changelog is None:
            # key ranges do not overlap here: one run's rows need no merging
            yield non_empty[0]
            cursors = [c for c in cursors if c.batch is not None]
            continue
        combined = pa.concat_tables(non_empty)
        merged = _merge_chunk(combined, key_names, merge_function)
        if changelog is not None:
            top = [p for i, p in parts if i == changelog.top_run]
            others = [p.select(list(key_names)) for i, p in parts if i != changelog.top_run and p.num_rows]
            before = top[0] if top else combined.slice(0, 0)
            changelog.add(before, merged, pa.concat_tables(others) if others else combined.slice(0, 0))
        yield merged
        cursors = [c for c in cursors if c.batch is not None]


def _merge_chunk(combined: pa.Table, key_names: Sequence[str], merge_function: MergeFunction) -> pa.Table:
    """Sort and merge one chunk. When the latest record of each key simply wins, the winners are
    chosen from the key and sequence columns alone and every other column is gathered once."""
    order = sort_by_key(combined, key_names, SEQUENCE_NUMBER)
    if isinstance(merge_function, DeduplicateMerge) and merge_function.sequence is None \
            and not merge_function.ignore_delete:
        keys = pa.table({k: combined.column(k).take(order) for k in key_names})
        winners = order[group_ends(keys, key_names)]
        return combined.take(pa.array(winners))
    return merge_function.merge(combined.take(order), key_names)


class ChangelogSink:
    """Collects changelog rows produced while merging (see mergetree/changelog.py)."""

    def __init__(self, top_run: int | None, key_names: Sequence[str], value_names: Sequence[str],
                 row_deduplicate: bool):
        self.top_run = top_run
        self.key_names = list(key_names)
        self.value_names = list(value_names)
        self.row_deduplicate = row_deduplicate
        self.tables: list[pa.Table] = []

    def add(self, before: pa.Table, after: pa.Table, touched_keys: pa.Table) -> None:
        """Only keys that new data touched change; keys seen only in the top run do not."""
        if touched_keys.num_rows == 0:
            return
        keys = unique_keys(touched_keys, self.key_names)
        before = rows_with_keys(before, keys, self.key_names)
        after = rows_with_keys(after, keys, self.key_names)
        changes = diff_changelog(before, after, self.key_names, self.value_names, self.row_deduplicate)
        if changes.num_rows:
            self.tables.append(changes)


class _Cursor:
    def __init__(self, run: Iterator[pa.Table], key_names: Sequence[str], index: int):
        self.run = run
        self.index = index
        self.key_names = list(key_names)
        self.batch: pa.Table | None = None
        self._advance()

    def _advance(self) -> None:
        self.batch = None
        for batch in self.run:
            if batch.num_rows:
                self.batch = batch
                return

    def first_sequence(self) -> int:
        """The smallest sequence number of the current batch (0 without the column)."""
        assert self.batch is not None
        if SEQUENCE_NUMBER not in self.batch.column_names:
            return 0
        return int(np.min(to_numpy(self.batch.column(SEQUENCE_NUMBER))))

    def _key(self, i: int) -> tuple:
        assert self.batch is not None
        return tuple(self.batch.column(k)[i].as_py() for k in self.key_names)

    def last_key(self) -> tuple:
        assert self.batch is not None
        return self._key(self.batch.num_rows - 1)

    def take_through(self, bound: tuple) -> pa.Table:
        """Remove and return the leading rows with key <= bound."""
        assert self.batch is not None
        batch = self.batch
        n = self._count_through(bound)
        head = batch.slice(0, n)
        if n == batch.num_rows:
            self._advance()
        else:
            self.batch = batch.slice(n)
        return head

    def _count_through(self, bound: tuple) -> int:
        assert self.batch is not None
        if len(self.key_names) == 1 and _numeric(self.batch.column(self.key_names[0])):
            values = to_numpy(self.batch.column(self.key_names[0]))
            target = np.asarray(bound[0]).astype(values.dtype) if not hasattr(bound[0], "year") \
                else to_numpy(pa.array([bound[0]], self.batch.column(self.key_names[0]).type))[0]
            return int(np.searchsorted(values, target, side="right"))
        return bisect.bisect_right(range(self.batch.num_rows), bound, key=self._key)

    def drain(self) -> Iterator[pa.Table]:
        while self.batch is not None:
            batch = self.batch
            self._advance()
            yield batch
