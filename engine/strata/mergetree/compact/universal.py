"""Universal compaction (RocksDB style, Paimon's UniversalCompaction): which runs to merge."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from strata.mergetree.levels import SortedRun


@dataclass
class CompactUnit:
    output_level: int
    runs: list[SortedRun]
    # the bucket's other runs when the unit was picked: where a lookup finds older values
    others: list[SortedRun] = field(default_factory=list)
    # merge-on-write: each file is rewritten alone at its own level without the rows its deletion
    # vector marks (no merge: a file's live keys are live nowhere else); output_level is unused
    purge: bool = False

    @property
    def files(self) -> list:
        return [f for r in self.runs for f in r.files]


@dataclass
class UniversalCompaction:
    max_size_amp: int = 200  # compaction.max-size-amplification-percent
    size_ratio: int = 1  # compaction.size-ratio
    trigger: int = 5  # num-sorted-run.compaction-trigger
    # merge-on-write: the rows of a data file its deletion vector marks. Newer runs then hold no
    # older version of a key (it is marked deleted where it was), so space amplification is not
    # the newer runs' size against the oldest run's: it is the marked rows against the live ones.
    deleted_rows: Callable[[str], int] | None = None

    def pick(self, num_levels: int, runs: list[SortedRun]) -> CompactUnit | None:
        """Runs are newest first. Returns the unit to compact, or None."""
        max_level = num_levels - 1
        unit = self._size_amplification(max_level, runs)
        if unit is not None:
            return unit
        unit = self._size_ratio(max_level, runs, 1, force=False)
        if unit is not None:
            return unit
        if len(runs) > self.trigger:
            return self._size_ratio(max_level, runs, len(runs) - self.trigger + 1, force=True)
        return None

    def pick_level0_up(self, num_levels: int, runs: list[SortedRun]) -> CompactUnit | None:
        """Paimon's ForceUpLevel0Compaction (lookup-compact=radical): the universal pick, else every
        level-0 run (extended by size ratio) into a level >= 1, since lookup changelogs and
        first-row visibility are produced only when level-0 data moves up."""
        unit = self.pick(num_levels, runs)
        if unit is not None:
            return unit
        level0 = next((i for i, run in enumerate(runs) if run.level > 0), len(runs))
        if level0 == 0:
            return None
        return self._size_ratio(num_levels - 1, runs, level0, force=True)

    def _size_amplification(self, max_level: int, runs: list[SortedRun]) -> CompactUnit | None:
        if len(runs) < self.trigger:
            return None
        if self.deleted_rows is not None:
            rows = sum(f.row_count for r in runs for f in r.files)
            dead = sum(self.deleted_rows(f.file_name) for r in runs for f in r.files)
            if dead * 100 > self.max_size_amp * (rows - dead):
                return CompactUnit(max_level, list(runs))
            return None
        candidate = sum(r.total_size for r in runs[:-1])
        earliest = runs[-1].total_size
        if candidate * 100 > self.max_size_amp * earliest:
            return CompactUnit(max_level, list(runs))
        return None

    def _size_ratio(self, max_level: int, runs: list[SortedRun], count: int, force: bool) -> CompactUnit | None:
        if len(runs) < self.trigger and not force:
            return None
        candidate = sum(r.total_size for r in runs[:count])
        while count < len(runs):
            nxt = runs[count]
            if candidate * (100 + self.size_ratio) / 100 < nxt.total_size:
                break
            candidate += nxt.total_size
            count += 1
        if force or count > 1:
            return create_unit(runs, max_level, count)
        return None


def create_unit(runs: list[SortedRun], max_level: int, count: int) -> CompactUnit:
    """Output to the level below the next unpicked run, never level 0; all runs -> max level."""
    if count >= len(runs):
        return CompactUnit(max_level, list(runs))
    output = max(0, runs[count].level - 1)
    if output == 0:
        for i in range(count, len(runs)):
            count += 1
            if runs[i].level != 0:
                output = runs[i].level
                break
    if count >= len(runs):
        output = max_level
    return CompactUnit(output, list(runs[:count]))
