"""Merge functions: how the records of one key, in sequence order, collapse into one.

Each works on a whole sorted table at once (vectorized): rows are sorted by key then sequence
number, and the result has one row per key, still in key order. Deletes (-U/-D) are kept in the
result so that a merge of some runs can still cancel older runs; readers drop them at the end.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from strata.mergetree.sorting import group_ends, group_starts
from strata.schema.table_schema import VALUE_KIND

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3


class MergeFunction(ABC):
    @abstractmethod
    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        """One row per key of a table sorted by (key, sequence)."""


class DeduplicateMerge(MergeFunction):
    """The latest record wins (a latest -D deletes the key)."""

    def __init__(self, ignore_delete: bool = False):
        self.ignore_delete = ignore_delete

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        if self.ignore_delete:
            table = drop_retractions(table)
        ends = group_ends(table, key_names)
        return table if ends.all() else table.filter(pa.array(ends))


class FirstRowMerge(MergeFunction):
    """The first record wins; later inserts of the same key are ignored."""

    def merge(self, table: pa.Table, key_names: Sequence[str]) -> pa.Table:
        table = drop_retractions(table)
        starts = group_starts(group_ends(table, key_names))
        return table if starts.all() else table.filter(pa.array(starts))


def drop_retractions(table: pa.Table) -> pa.Table:
    """Keep only +I/+U records."""
    kinds = table.column(VALUE_KIND).to_numpy()
    keep = (kinds == INSERT) | (kinds == UPDATE_AFTER)
    return table if keep.all() else table.filter(pa.array(keep))


def merge_function_for(options: dict[str, str]) -> MergeFunction:
    from strata.options import CoreOptions

    core = CoreOptions(options)
    if core.sequence_fields():
        # merging by write order instead would silently let older rows win
        raise NotImplementedError("sequence.field is not supported yet")
    engine = core.merge_engine
    ignore_delete = bool(core.get("ignore-delete"))
    if engine == "deduplicate":
        return DeduplicateMerge(ignore_delete)
    if engine == "first-row":
        return FirstRowMerge()
    raise NotImplementedError(f"merge-engine {engine!r} is not supported yet")


def live_rows_mask(kinds: np.ndarray) -> np.ndarray:
    return (kinds == INSERT) | (kinds == UPDATE_AFTER)
