"""The levels of one bucket's LSM tree: level 0 holds one sorted run per file, every higher level
is a single sorted run (files with disjoint key ranges)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from strata.manifest.data_file_meta import DataFileMeta

KeyOrder = Callable[[bytes], tuple]


@dataclass
class SortedRun:
    level: int
    files: list[DataFileMeta]

    @property
    def total_size(self) -> int:
        return sum(f.file_size for f in self.files)


class Levels:
    def __init__(self, num_levels: int, key_order: KeyOrder, files: Iterable[DataFileMeta] = ()):
        self.num_levels = num_levels
        self.key_order = key_order
        self.level0: list[DataFileMeta] = []
        self.runs: list[list[DataFileMeta]] = [[] for _ in range(num_levels)]
        self.update(before=(), after=files)

    @property
    def max_level(self) -> int:
        return self.num_levels - 1

    def add_level0(self, f: DataFileMeta) -> None:
        self.update(before=(), after=[f])

    def update(self, before: Iterable[DataFileMeta], after: Iterable[DataFileMeta]) -> None:
        removed = {(f.level, f.file_name) for f in before}
        if removed:
            self.level0 = [f for f in self.level0 if (0, f.file_name) not in removed]
            for level in range(1, self.num_levels):
                self.runs[level] = [f for f in self.runs[level] if (level, f.file_name) not in removed]
        for f in after:
            if f.level == 0:
                self.level0.append(f)
            else:
                if f.level >= self.num_levels:
                    raise ValueError(f"file {f.file_name} is at level {f.level} but num-levels is {self.num_levels}")
                self.runs[f.level].append(f)
        # newest level-0 file first: higher sequence numbers are newer
        self.level0.sort(key=lambda f: f.max_sequence_number, reverse=True)
        for level in range(1, self.num_levels):
            self.runs[level].sort(key=lambda f: self.key_order(f.min_key))

    def sorted_runs(self) -> list[SortedRun]:
        """Newest first: each level-0 file, then levels 1, 2, ... that are not empty."""
        runs = [SortedRun(0, [f]) for f in self.level0]
        runs += [SortedRun(level, list(files)) for level, files in enumerate(self.runs) if level and files]
        return runs

    def number_of_sorted_runs(self) -> int:
        return len(self.level0) + sum(1 for level in range(1, self.num_levels) if self.runs[level])

    def highest_non_empty_level(self) -> int:
        for level in range(self.max_level, 0, -1):
            if self.runs[level]:
                return level
        return 0 if self.level0 else -1

    def all_files(self) -> list[DataFileMeta]:
        return [*self.level0, *(f for level in self.runs[1:] for f in level)]
