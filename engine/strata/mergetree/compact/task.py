"""Running one compaction unit: merge its runs and rewrite them at the output level."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.merge_function import MergeFunction, drop_retractions
from strata.mergetree.merge_reader import merge_runs

FileReader = Callable[[DataFileMeta], Iterator[pa.Table]]


@dataclass
class CompactResult:
    before: list[DataFileMeta] = field(default_factory=list)
    after: list[DataFileMeta] = field(default_factory=list)

    def merge(self, other: CompactResult) -> None:
        self.before.extend(other.before)
        self.after.extend(other.after)


def run_compaction(unit: CompactUnit, read: FileReader, writer: DataFileWriter, key_names: list[str],
                   merge_function: MergeFunction, drop_delete: bool) -> CompactResult:
    """Merge the unit. A lone run whose files only change level is 'upgraded' without rewriting."""
    if len(unit.runs) == 1 and not (drop_delete and any(f.delete_row_count for f in unit.files)):
        upgraded = [dataclasses.replace(f, level=unit.output_level) for f in unit.files
                    if f.level != unit.output_level]
        before = [f for f in unit.files if f.level != unit.output_level]
        return CompactResult(before, upgraded)
    runs = [_chain(read, run.files) for run in unit.runs]
    merged = merge_runs(runs, key_names, merge_function)
    if drop_delete:
        merged = (drop_retractions(t) for t in merged)
    after = writer.write_stream(merged, level=unit.output_level, file_source=FILE_SOURCE_COMPACT)
    return CompactResult(list(unit.files), after)


def _chain(read: FileReader, files: list[DataFileMeta]) -> Iterator[pa.Table]:
    for f in files:
        yield from read(f)
