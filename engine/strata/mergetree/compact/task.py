"""Running one compaction unit: merge its runs and rewrite them at the output level."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from strata.io.data_file_writer import FILE_SOURCE_COMPACT, DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.compact.universal import CompactUnit
from strata.mergetree.levels import KeyOrder, SortedRun
from strata.mergetree.merge_function import MergeFunction, drop_retractions
from strata.mergetree.merge_reader import ChangelogSink, merge_runs
from strata.mergetree.sections import key_sections

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


@dataclass(frozen=True)
class Upgrades:
    """What lets the files of a unit's lone-run sections move up unrewritten, as Paimon's
    MergeTreeCompactTask does: the key order that finds the sections, and the size below which a
    file is rewritten with its neighbours anyway (Paimon's compaction file size, 70% of
    target-file-size: small files still merge into larger ones)."""

    key_order: KeyOrder
    min_file_size: int


def run_compaction(unit: CompactUnit, read: FileReader, writer: DataFileWriter, key_names: list[str],
                   merge_function: MergeFunction, drop_delete: bool,
                   changelog: ChangelogOutput | None = None, rewrite: bool = False,
                   upgrades: Upgrades | None = None) -> CompactResult:
    """Merge the unit. A lone run whose files only change level is 'upgraded' without rewriting,
    unless `rewrite` (`read` then yields other rows than the files hold). With `upgrades`, so are
    the large files of every section of the unit that holds one run (see Upgrades).

    With `changelog` (only for full merges), changes relative to the previous top level are
    written as changelog files."""
    if upgrades is not None and changelog is None and not rewrite and len(unit.runs) > 1:
        return _by_sections(unit, read, writer, key_names, merge_function, drop_delete, upgrades)
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


def _by_sections(unit: CompactUnit, read: FileReader, writer: DataFileWriter, key_names: list[str],
                 merge_function: MergeFunction, drop_delete: bool, upgrades: Upgrades) -> CompactResult:
    """Sections in key order: a lone run's large files move up as they are; everything between
    two of them (overlapping sections, small files) is merged and written as one stretch, so the
    output level stays one sorted run of files in key order."""
    result = CompactResult()
    stretch: list[list[SortedRun]] = []  # sections waiting to be merged together, in key order
    for files in key_sections(unit.files, upgrades.key_order):
        names = {f.file_name for f in files}
        runs = [SortedRun(r.level, kept) for r in unit.runs if (kept := [f for f in r.files if f.file_name in names])]
        if len(runs) > 1:
            stretch.append(runs)
            continue
        for f in runs[0].files:
            if f.file_size < upgrades.min_file_size or not _upgradable(f, unit.output_level, drop_delete):
                stretch.append([SortedRun(f.level, [f])])
            else:
                _rewrite_stretch(stretch, unit.output_level, read, writer, key_names, merge_function, drop_delete,
                                 result)
                stretch = []
                _upgrade(f, unit.output_level, result)
    _rewrite_stretch(stretch, unit.output_level, read, writer, key_names, merge_function, drop_delete, result)
    return result


def _upgradable(f: DataFileMeta, output_level: int, drop_delete: bool) -> bool:
    """A file moves up as it is unless the move should drop its retractions (drop_delete: the
    output is the bottom of the tree)."""
    return not (drop_delete and f.level != output_level and f.delete_row_count != 0)


def _upgrade(f: DataFileMeta, output_level: int, result: CompactResult) -> None:
    if f.level != output_level:
        result.before.append(f)
        result.after.append(dataclasses.replace(f, level=output_level))


def _rewrite_stretch(stretch: list[list[SortedRun]], output_level: int, read: FileReader, writer: DataFileWriter,
                     key_names: list[str], merge_function: MergeFunction, drop_delete: bool,
                     result: CompactResult) -> None:
    """Merge the stretch's sections one after the other into one stream of output files. A
    stretch of one file alone moves up instead, if it may (Paimon's rule too: nothing to merge)."""
    if not stretch:
        return
    if len(stretch) == 1 and len(stretch[0]) == 1 and all(_upgradable(f, output_level, drop_delete)
                                                           for f in stretch[0][0].files):
        for f in stretch[0][0].files:
            _upgrade(f, output_level, result)
        return

    def merged() -> Iterator[pa.Table]:
        for section in stretch:
            rows = merge_runs([_chain(read, run.files) for run in section], key_names, merge_function)
            yield from ((drop_retractions(t) for t in rows) if drop_delete else rows)

    result.before.extend(f for section in stretch for run in section for f in run.files)
    result.after.extend(writer.write_stream(merged(), level=output_level, file_source=FILE_SOURCE_COMPACT))
