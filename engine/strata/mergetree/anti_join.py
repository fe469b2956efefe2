"""Unordered merge of sorted runs for the engines where one record of a key simply wins.

With the deduplicate engine the newest record of a key wins; with first-row, the oldest. When the
runs' sequence ranges do not overlap (the normal LSM shape: each level-0 file, and each level, is
newer than every higher level), the winner of a key is its record in the newest (or oldest) run
holding the key. So instead of a k-way sort, every run is filtered on its own by a vectorized
anti-join against the keys of the runs that take precedence, and the survivors are emitted in run
order: each run's part in key order, but not the whole. Rows are filtered, never gathered, which
is much cheaper than the general merge's take across runs.

Applies to a single key column of an integer, date or timestamp type. Anything else (composite or
string keys, overlapping sequence ranges, a run whose keys are not strictly increasing, retractions
first-row would refuse) returns None and the caller merges generally.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from strata.io.arrays import from_numpy, to_numpy
from strata.mergetree.merge_function import DeduplicateMerge, FirstRowMerge, MergeFunction, live_rows_mask
from strata.schema.table_schema import SEQUENCE_NUMBER, VALUE_KIND

Run = list[pa.Table]


def anti_join_applies(merge_function: MergeFunction) -> bool:
    """Whether the winner of a key depends on the runs' sequence order alone."""
    if isinstance(merge_function, DeduplicateMerge):
        return merge_function.sequence is None
    return isinstance(merge_function, FirstRowMerge)


def anti_join_merge(runs: Sequence[Run], key_names: Sequence[str], merge_function: MergeFunction,
                    ranges: Sequence[tuple[int, int]] | None = None) -> list[pa.Table] | None:
    """The winning records of every key (retractions included: readers drop them), run by run;
    None when this merge does not apply to these runs. `ranges`: each run's (min, max) sequence
    number when the caller knows them (from file metadata); the runs then need no sequence
    column."""
    if len(key_names) != 1 or not anti_join_applies(merge_function):
        return None
    assert isinstance(merge_function, DeduplicateMerge | FirstRowMerge)
    newest_first = isinstance(merge_function, DeduplicateMerge)
    if ranges is not None:
        precedence = precedence_from_ranges(ranges, newest_first)
        if precedence is None:
            return None
        runs = [runs[i] for i in precedence]
    tables = [pa.concat_tables(run) for run in runs if any(t.num_rows for t in run)]
    if not tables:
        return []
    needed = (VALUE_KIND,) if ranges is not None else (SEQUENCE_NUMBER, VALUE_KIND)
    if any(name not in t.column_names for t in tables for name in needed):
        return None
    maybe_codes = [_key_codes(t.column(key_names[0])) for t in tables]
    codes = [c for c in maybe_codes if c is not None and _strictly_increasing(c)]
    if len(codes) < len(tables):
        return None
    order = list(range(len(tables))) if ranges is not None else _precedence(tables, newest_first)
    if order is None:
        return None
    ignore_delete = merge_function.ignore_delete
    if isinstance(merge_function, FirstRowMerge) and not ignore_delete \
            and any(not live_rows_mask(_kinds(t)).all() for t in tables):
        return None  # first-row refuses retractions: let the general merge raise as it does
    return _filter_runs([tables[i] for i in order], [codes[i] for i in order], ignore_delete)


def _filter_runs(tables: list[pa.Table], codes: list[np.ndarray], ignore_delete: bool) -> list[pa.Table]:
    """Keep, in each run (highest precedence first), the records whose key no earlier run holds.
    With ignore-delete, retractions neither win nor hide the key from later runs."""
    seen = _KeySet.for_codes(codes)
    out: list[pa.Table] = []
    for i, (table, code) in enumerate(zip(tables, codes, strict=True)):
        keep = ~seen.contains(code)
        if ignore_delete:
            keep &= live_rows_mask(_kinds(table))
        if i < len(tables) - 1:  # no run comes after the last to hide
            seen.add(code[keep])
        out.append(table if keep.all() else table.filter(from_numpy(keep)))
    return [t for t in out if t.num_rows]


class _KeySet:
    """A growing set of int64 keys with vectorized membership: a bitmap over the key span when
    the keys are dense enough, else a sorted array searched with searchsorted."""

    DENSE_FACTOR = 8  # bitmap bytes allowed per key: no more than the int64 keys themselves

    def __init__(self, low: int, span: int | None):
        self.low = low
        self.bitmap = np.zeros(span, dtype=bool) if span is not None else None
        self.sorted = np.empty(0, dtype=np.int64)

    @classmethod
    def for_codes(cls, codes: Sequence[np.ndarray]) -> _KeySet:
        present = [c for c in codes if len(c)]
        low = min((int(c[0]) for c in present), default=0)
        high = max((int(c[-1]) for c in present), default=0)
        count = sum(len(c) for c in present)
        span = high - low + 1
        return cls(low, span if span <= cls.DENSE_FACTOR * max(count, 65536) else None)

    def contains(self, codes: np.ndarray) -> np.ndarray:
        if self.bitmap is not None:
            return self.bitmap[codes - self.low]
        return _sorted_isin(codes, self.sorted)

    def add(self, codes: np.ndarray) -> None:
        """Add keys not yet present."""
        if self.bitmap is not None:
            self.bitmap[codes - self.low] = True
        else:  # both parts are sorted: the stable sort (timsort) merges them in linear time
            self.sorted = np.sort(np.concatenate([self.sorted, codes]), kind="stable")


def _sorted_isin(codes: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """np.isin for two sorted arrays of unique values: the smaller is searched in the larger."""
    found = np.zeros(len(codes), dtype=bool)
    if not len(codes) or not len(seen):
        return found
    if len(seen) <= len(codes):
        at = np.minimum(np.searchsorted(codes, seen), len(codes) - 1)
        found[at[codes[at] == seen]] = True
        return found
    at = np.minimum(np.searchsorted(seen, codes), len(seen) - 1)
    return seen[at] == codes


def _precedence(tables: Sequence[pa.Table], newest_first: bool) -> list[int] | None:
    """Run indices by precedence, or None if two runs' sequence ranges overlap (then the run
    order does not decide every key's winner)."""
    ranges = []
    for t in tables:
        seq = to_numpy(t.column(SEQUENCE_NUMBER))
        ranges.append((int(seq.min()), int(seq.max())))
    return precedence_from_ranges(ranges, newest_first)


def precedence_from_ranges(ranges: Sequence[tuple[int, int]], newest_first: bool) -> list[int] | None:
    """Run indices by precedence from each run's (min, max) sequence number, or None if two
    ranges overlap."""
    oldest_first = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    for older, newer in itertools.pairwise(oldest_first):
        if ranges[older][1] >= ranges[newer][0]:
            return None
    return oldest_first[::-1] if newest_first else oldest_first


def integer_like(t: pa.DataType) -> bool:
    """Key types the anti-join handles: their values fit int64 codes."""
    # uint64: values above 2**63 would not fit
    return (pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_timestamp(t)) and not pa.types.is_uint64(t)


def _key_codes(column: pa.ChunkedArray) -> np.ndarray | None:
    """The key as int64 values (equal keys, equal codes), or None for other key types."""
    if column.null_count or not integer_like(column.type):
        return None
    return to_numpy(column).astype(np.int64, copy=False)


def _strictly_increasing(codes: np.ndarray) -> bool:
    """Sorted runs hold each key once; if not, the general merge must collapse the duplicates."""
    return bool(np.all(codes[1:] > codes[:-1]))


def _kinds(table: pa.Table) -> np.ndarray:
    return to_numpy(table.column(VALUE_KIND))
