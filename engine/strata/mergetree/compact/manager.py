"""The compaction manager of one bucket: picks units, runs them in the background, and stalls
the writer only when the number of sorted runs passes the stop trigger."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future

from strata import metrics
from strata.mergetree.compact.task import CompactResult
from strata.mergetree.compact.universal import CompactUnit, UniversalCompaction
from strata.mergetree.levels import Levels, SortedRun

Runner = Callable[[CompactUnit, bool], CompactResult]


class CompactManager:
    def __init__(self, levels: Levels, strategy: UniversalCompaction, executor: Executor, runner: Runner,
                 stop_trigger: int, table: str = ""):
        self.table = table  # the metrics' `table` label
        self.levels = levels
        self.strategy = strategy
        self.executor = executor
        self.runner = runner
        self.stop_trigger = stop_trigger
        self.future: Future[CompactResult] | None = None
        self.stalls = 0
        # lookup changelog / first-row tables push every level-0 file up at each trigger
        self.force_level0_up = False
        # merge-on-write: a superseded row is marked deleted, so retractions never need keeping
        self.drop_delete_always = False
        self.has_deletions: Callable[[str], bool] = lambda file_name: False

    def trigger(self, full: bool = False) -> None:
        """Submit a compaction if none is running and the strategy (or `full`) picks one."""
        if self.future is not None:
            return
        runs = self.levels.sorted_runs()
        if full:
            if not runs:
                return
            unit: CompactUnit | None = CompactUnit(self.levels.max_level, runs)
            if len(runs) == 1 and runs[0].level == self.levels.max_level:
                # already one run: rewrite only the files whose deletion vectors mark rows
                marked = [f for f in runs[0].files if self.has_deletions(f.file_name)]
                if not marked:
                    return
                unit = CompactUnit(self.levels.max_level, [SortedRun(self.levels.max_level, marked)])
        elif self.force_level0_up:
            unit = self.strategy.pick_level0_up(self.levels.num_levels, runs)
        else:
            unit = self.strategy.pick(self.levels.num_levels, runs)
        if unit is None or not unit.files:
            return
        picked = {id(run) for run in unit.runs}
        unit.others = [run for run in runs if id(run) not in picked]
        drop_delete = unit.output_level != 0 and (self.drop_delete_always
                                                  or unit.output_level >= self.levels.highest_non_empty_level())
        self.future = metrics.submit_compaction(self.table, self.executor, self.runner, unit, drop_delete)

    def should_stall(self) -> bool:
        return self.levels.number_of_sorted_runs() > self.stop_trigger

    def collect(self, blocking: bool) -> CompactResult | None:
        """The finished compaction's result (applied to the levels), or None."""
        if self.future is None or (not blocking and not self.future.done()):
            return None
        future, self.future = self.future, None
        result = future.result()
        self.levels.update(result.before, result.after)
        return result

    @property
    def running(self) -> bool:
        return self.future is not None
