"""The compaction manager of one bucket: picks units, runs them in the background, and stalls
the writer only when the number of sorted runs passes the stop trigger."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from strata import metrics
from strata.mergetree.compact.task import CompactResult
from strata.mergetree.compact.universal import CompactUnit, UniversalCompaction
from strata.mergetree.levels import Levels, SortedRun

Runner = Callable[[CompactUnit, bool], CompactResult]


class CompactManager:
    def __init__(self, levels: Levels, strategy: UniversalCompaction, executor: Executor, runner: Runner,
                 stop_trigger: int, table: str = "", purge_executor: Executor | None = None):
        self.table = table  # the metrics' `table` label
        self.levels = levels
        self.strategy = strategy
        self.executor = executor
        # where merge-on-write writers rewrite files with too many deleted rows in the background
        self.purge_executor = purge_executor if purge_executor is not None else executor
        self.runner = runner
        self.stop_trigger = stop_trigger
        self.future: Future[CompactResult] | None = None
        self.stalls = 0
        # lookup changelog / first-row tables push every level-0 file up at each trigger
        self.force_level0_up = False
        # merge-on-write: a superseded row is marked deleted, so retractions never need keeping
        self.drop_delete_always = False
        self.has_deletions: Callable[[str], bool] = lambda file_name: False
        # merge-on-write: rows of a file its deletion vector marks, and the share of its rows
        # above which a file is rewritten without them (compaction.delete-ratio-threshold; None:
        # never). Parquet cannot skip single rows: every read decodes the marked ones.
        self.deleted_rows: Callable[[str], int] = lambda file_name: 0
        self.delete_ratio: float | None = None

    def trigger(self, full: bool = False, inline: bool = False) -> None:
        """Submit a compaction if none is running and the strategy (or `full`) picks one; when it
        picks none, the files with too many deleted rows are rewritten (see purge_unit).
        `inline`: run it now, on the calling thread (see submit)."""
        if self.future is not None:
            return
        runs = self.levels.sorted_runs()
        unit: CompactUnit | None
        if full:
            if not runs:
                return
            unit = CompactUnit(self.levels.max_level, runs)
            if len(runs) == 1 and runs[0].level == self.levels.max_level:
                # already one run: rewrite only the files whose deletion vectors mark rows
                unit = self.purge_unit(0.0)
        elif self.force_level0_up:
            unit = self.strategy.pick_level0_up(self.levels.num_levels, runs) or self.purge_unit()
        else:
            unit = self.strategy.pick(self.levels.num_levels, runs) or self.purge_unit()
        self.submit(unit, runs, inline)

    def submit(self, unit: CompactUnit | None, runs: list[SortedRun] | None = None, inline: bool = False) -> None:
        """Run `unit` (picked from `runs`, default: the current ones) unless None or empty.
        `inline`: on the calling thread, for a caller that would only wait for it. The bucket's
        flushed rows are then compacted on the thread that wrote them, with no hand-off: in W2dv,
        a quarter fewer context switches and minor page faults (Arrow's allocator keeps a heap per
        thread, and every page new to the process is zeroed by the kernel)."""
        if unit is None or not unit.files or self.future is not None:
            return
        if runs is None:
            runs = self.levels.sorted_runs()
        picked = {id(run) for run in unit.runs}
        unit.others = [run for run in runs if id(run) not in picked]
        drop_delete = unit.output_level != 0 and (self.drop_delete_always
                                                  or unit.output_level >= self.levels.highest_non_empty_level())
        executor = _CALLER if inline else self.executor
        self.future = metrics.submit_compaction(self.table, executor, self.runner, unit, drop_delete)

    def purge_unit(self, ratio: float | None = None) -> CompactUnit | None:
        """The files above level 0 whose deletion vectors mark more than `ratio` (default: the
        delete-ratio threshold) of their rows, each to be rewritten alone at its level; None when
        there are none (or no threshold)."""
        ratio = self.delete_ratio if ratio is None else ratio
        if ratio is None:
            return None
        files = [f for level in range(1, self.levels.num_levels) for f in self.levels.runs[level]
                 if self.deleted_rows(f.file_name) > ratio * f.row_count]
        if not files:
            return None
        return CompactUnit(max(f.level for f in files), [SortedRun(f.level, [f]) for f in files], purge=True)

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


class _CallerRuns(Executor):
    """Runs each submitted call at once, on the submitting thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # the caller sees it from future.result(), as from a pool
            future.set_exception(error)
        return future


_CALLER = _CallerRuns()
