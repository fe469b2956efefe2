"""Universal compaction picking rules (FORMAT.md §4.2)."""

from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.simple_stats import SimpleStats
from strata.mergetree.compact.universal import UniversalCompaction, create_unit
from strata.mergetree.levels import SortedRun


def run(level: int, size: int) -> SortedRun:
    meta = DataFileMeta(f"f-{level}-{size}", size, 1, b"", b"", SimpleStats.EMPTY, SimpleStats.EMPTY, 0, 0, 0, level)
    return SortedRun(level, [meta])


def test_nothing_below_trigger() -> None:
    assert UniversalCompaction(trigger=5).pick(6, [run(0, 1)] * 4) is None


def test_size_amplification_compacts_everything_to_max_level() -> None:
    runs = [run(0, 100), run(0, 100), run(0, 100), run(0, 100), run(5, 100)]
    unit = UniversalCompaction(max_size_amp=200, trigger=5).pick(6, runs)
    assert unit is not None and unit.output_level == 5 and len(unit.runs) == 5


def test_size_ratio_picks_similar_newest_runs() -> None:
    runs = [run(0, 10), run(0, 10), run(0, 10), run(0, 10), run(4, 10_000)]
    unit = UniversalCompaction(max_size_amp=200, size_ratio=1, trigger=5).pick(6, runs)
    assert unit is not None
    assert len(unit.runs) == 4
    assert unit.output_level == 3  # below the next unpicked run (level 4), never 0


def test_file_number_forces_a_pick_past_the_trigger() -> None:
    # sizes grow so fast that size ratio alone never picks
    runs = [run(0, 1), run(0, 10), run(0, 100), run(0, 1000), run(0, 10_000), run(5, 10**9)]
    unit = UniversalCompaction(max_size_amp=10**9, size_ratio=1, trigger=5).pick(6, runs)
    assert unit is not None and len(unit.runs) >= 2 and unit.output_level >= 1


def test_output_never_level_zero() -> None:
    runs = [run(0, 1), run(0, 1), run(0, 1), run(3, 100), run(5, 1000)]
    unit = create_unit(runs, max_level=5, count=1)
    # extended over the level-0 runs up to and including the next leveled run
    assert unit.output_level == 3 and len(unit.runs) == 4
    assert create_unit(runs, max_level=5, count=3).output_level == 2  # just below the next run
    assert create_unit(runs[:4], max_level=5, count=1).output_level == 5  # everything picked
