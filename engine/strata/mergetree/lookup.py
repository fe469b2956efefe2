"""Lookups in the levels above level 0 (Paimon's LookupLevels), done when a compaction moves
level-0 files up: for the `lookup` changelog producer (Paimon's LookupChangelogMergeFunctionWrapper)
and for first-row tables (FirstRowMergeFunctionWrapper).

The changelog of the level-0 keys is the difference between each key's value before and after
the level-0 records:

- before: the merge of the key's records in the levels >= 1, inside the unit or not (every
  level-0 record is newer than every record above level 0, see UniversalCompaction.create_unit);
- after: the merge of those records and the level-0 records.

Only keys present in the level-0 files are looked up, and only in the files whose key range can
hold one of them. Everything is vectorized: key sets are matched with ``is_in`` or a hash join,
and the before/after images come from the merge function applied to whole tables.

Unlike Paimon, levels >= 1 keep merged increments rather than each key's full state (Strata's and
pypaimon's readers merge every run with the plain merge function); engines that cannot apply a
retraction in steps therefore compact fully when level-0 records retract (`needs_full_merge`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.changelog import diff_changelog
from strata.mergetree.compact.task import FileReader
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.key_sets import key_mask, rows_with_keys, unique_keys
from strata.mergetree.levels import KeyOrder, SortedRun
from strata.mergetree.merge_function import (
    INSERT,
    DeduplicateMerge,
    FirstRowMerge,
    MergeFunction,
    live_rows_mask,
    retraction_mask,
)
from strata.mergetree.sorting import sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER, VALUE_KIND


@dataclass
class Found:
    """What a lookup found for the level-0 records of one unit."""

    new: pa.Table  # the level-0 records
    inside: pa.Table  # the records of those keys in the unit's runs above level 0
    outside: pa.Table  # ... and in the bucket's runs outside the unit

    @property
    def old(self) -> pa.Table:
        return pa.concat_tables([self.inside, self.outside]) if self.outside.num_rows else self.inside


@dataclass
class LevelLookup:
    """Looks up the keys of a unit's level-0 records in the levels above (Paimon's LookupLevels),
    for the lookup changelog producer and for first-row tables."""

    read: FileReader
    key_names: list[str]
    value_names: list[str]
    merge_function: MergeFunction
    key_order: KeyOrder
    row_deduplicate: bool
    insert_only: bool = False  # first-row: a key's first appearance (+I) is its only change

    def lookup(self, unit: CompactUnit, level0: Sequence[pa.Table]) -> Found | None:
        """`level0`: the unit's level-0 records, as read from its level-0 files."""
        new = _concat(level0)
        if new is None or new.num_rows == 0:
            return None
        keys = unique_keys(new, self.key_names)
        level0_files = [f for f in unit.files if f.level == 0]
        low = min(self.key_order(f.min_key) for f in level0_files)
        high = max(self.key_order(f.max_key) for f in level0_files)

        def records(runs: Sequence[SortedRun]) -> pa.Table:
            files = [f for run in runs if run.level > 0 for f in run.files]
            found = [rows_with_keys(t, keys, self.key_names)
                     for f in files if self._may_hold(f, keys, low, high) for t in self.read(f)]
            return _concat([t for t in found if t.num_rows]) or new.slice(0, 0)
        return Found(new, records(unit.runs), records(unit.others))

    def changelog(self, found: Found) -> pa.Table | None:
        """Changelog rows (file layout, key order) of the level-0 keys: before = their merged
        records above level 0, after = those merged with the level-0 records."""
        old = found.old
        before = self._merge(old)
        after = self._merge(pa.concat_tables([old, found.new]) if old.num_rows else found.new)
        changes = diff_changelog(before, after, self.key_names, self.value_names, self.row_deduplicate)
        if self.insert_only and changes.num_rows:
            changes = changes.filter(pc.equal(changes.column(VALUE_KIND), pa.scalar(INSERT, pa.int8())))
        return changes if changes.num_rows else None

    def without_known_keys(self, found: Found, table: pa.Table) -> pa.Table:
        """First-row: the level-0 rows whose key no run outside the unit holds. Like Paimon's
        FirstRowMergeFunctionWrapper, a key is then kept in one level only, so readers that do
        not merge first-row levels (pypaimon) see it once."""
        known = found.outside.filter(pa.array(live_rows_mask(found.outside.column(VALUE_KIND).to_numpy())))
        if known.num_rows == 0 or table.num_rows == 0:
            return table
        hit = key_mask(table, unique_keys(known, self.key_names), self.key_names)
        return table.filter(pa.array(~hit)) if hit.any() else table

    def needs_full_merge(self, level0: Sequence[pa.Table]) -> bool:
        """True when the unit must become a full compaction: the level-0 records hold retractions
        and the merge engine cannot apply them in steps (a partial-update or aggregation row reset
        by a -D would resurface older levels' fields once the -D is merged away); deduplicate and
        first-row can."""
        if isinstance(self.merge_function, DeduplicateMerge | FirstRowMerge):
            return False
        return any(retraction_mask(t.column(VALUE_KIND).to_numpy()).any() for t in level0)

    def _merge(self, records: pa.Table) -> pa.Table:
        if records.num_rows == 0:
            return records
        order = sort_by_key(records, self.key_names, SEQUENCE_NUMBER)
        return self.merge_function.merge(records.take(order), self.key_names)

    def _may_hold(self, f: DataFileMeta, keys: pa.Table, low: tuple, high: tuple) -> bool:
        """False when the file's key range holds none of `keys` (decided from its metadata)."""
        file_min, file_max = self.key_order(f.min_key), self.key_order(f.max_key)
        if file_max < low or file_min > high:
            return False
        if len(self.key_names) > 1:
            return True
        column = keys.column(0)
        try:
            lower, upper = pa.scalar(file_min[0], column.type), pa.scalar(file_max[0], column.type)
        except (pa.ArrowException, TypeError, ValueError):  # a decoded key of another Python type
            return True
        inside = pc.and_(pc.greater_equal(column, lower), pc.less_equal(column, upper))
        return bool(pc.any(inside).as_py())


def _concat(tables: Sequence[pa.Table]) -> pa.Table | None:
    if not tables:
        return None
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]
