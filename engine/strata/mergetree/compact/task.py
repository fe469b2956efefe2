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
from strata.mergetree.merge_reader import ChangelogSink, merge_runs

FileReader = Callable[[DataFileMeta], Iterator[pa.Table]]


@dataclass
class CompactResult:
    before: list[DataFileMeta] = field(default_factory=list)
    after: list[DataFileMeta] = field(default_factory=list)
    changelog: list[DataFileMeta] = field(default_factory=list)


@dataclass
class ChangelogOutput:
    """Where a full merge writes the changelog it produces (full-compaction / lookup producers)."""

    writer: DataFileWriter
    value_names: list[str]
    row_deduplicate: bool


def run_compaction(unit: CompactUnit, read: FileReader, writer: DataFileWriter, key_names: list[str],
                   merge_function: MergeFunction, drop_delete: bool,
                   changelog: ChangelogOutput | None = None, rewrite: bool = False) -> CompactResult:
    """Merge the unit. A lone run whose files only change level is 'upgraded' without rewriting,
    unless `rewrite` (`read` then yields other rows than the files hold).

    With `changelog` (only for full merges), changes relative to the previous top level are
    written as changelog files."""
    lone = len(unit.runs) == 1 and not rewrite
    if lone and (changelog is None or unit.runs[0].level == unit.output_level) \
            and not (drop_delete and any(f.delete_row_count for f in unit.files)):
        upgraded = [dataclasses.replace(f, level=unit.output_level) for f in unit.files
                    if f.level != unit.output_level]
        before = [f for f in unit.files if f.level != unit.output_level]
        return CompactResult(before, upgraded)
    runs = [_chain(read, run.files) for run in unit.runs]
    sink = None
    if changelog is not None:
        top = len(unit.runs) - 1 if unit.runs[-1].level == unit.output_level else None
        sink = ChangelogSink(top, key_names, changelog.value_names, changelog.row_deduplicate)
    merged = merge_runs(runs, key_names, merge_function, sink)
    if drop_delete:
        merged = (drop_retractions(t) for t in merged)
    after = writer.write_stream(merged, level=unit.output_level, file_source=FILE_SOURCE_COMPACT)
    changes = []
    if changelog is not None and sink is not None and sink.tables:
        changes = changelog.writer.write_stream(sink.tables, level=0, file_source=FILE_SOURCE_COMPACT)
    return CompactResult(list(unit.files), after, changes)


def _chain(read: FileReader, files: list[DataFileMeta]) -> Iterator[pa.Table]:
    for f in files:
        yield from read(f)
