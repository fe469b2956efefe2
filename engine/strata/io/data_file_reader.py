"""Reading data files: column mapping across schema versions (by field id), row-group pruning."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyarrow._parquet import ParquetReader

from strata.errors import CorruptDataError, FilterError, SchemaMismatchError
from strata.expressions import ColumnStats, Predicate
from strata.fs import FileIO
from strata.io.arrays import scalar, to_numpy
from strata.io.leaves import primitive_leaves
from strata.io.page_index import (
    COALESCE_GAP,
    OBJECT_STORE_GAP,
    FilePages,
    file_pages,
    read_rows,
    selected_rows,
)
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema

BATCH_ROWS = 256 * 1024
ROW_POSITION = "_ROW_POSITION"  # a row's position in its data file (deletion vectors address rows by it)
SYSTEM_COLUMNS = (SEQUENCE_NUMBER, VALUE_KIND)


class ColumnMapping:
    """How the columns a reader wants are found in a file written under another schema."""

    def __init__(self, reader: TableSchema, writer: TableSchema, wanted: Sequence[str]):
        by_id = {f.id: f for f in writer.fields}
        self.wanted = list(wanted)
        self.source: dict[str, str | None] = {}
        self.types: dict[str, pa.DataType] = {}
        for name in wanted:
            if name in SYSTEM_COLUMNS:
                self.source[name] = name
                self.types[name] = pa.int64() if name == SEQUENCE_NUMBER else pa.int8()
                continue
            is_key = name.startswith(KEY_PREFIX) and name[len(KEY_PREFIX):] in reader.field_names \
                and name not in reader.field_names
            field = reader.field(name[len(KEY_PREFIX):] if is_key else name)
            old = by_id.get(field.id)
            self.source[name] = None if old is None else (KEY_PREFIX + old.name if is_key else old.name)
            self.types[name] = field.type.to_arrow()

    def stat_columns(self, stat_names: dict[str, str]) -> dict[str, str | None]:
        """Predicate field -> the file's column holding its statistics, through the field ids
        (after a rename the file's column has the old name; None: the file has no such column)."""
        out: dict[str, str | None] = {}
        for name in self.wanted:
            if name in SYSTEM_COLUMNS:
                continue
            out[name] = self.source[name]
        for field, column in stat_names.items():
            out[field] = self.source.get(column, column)
        return out

    def file_columns(self, available: set[str]) -> list[str]:
        cols = []
        for name in self.wanted:
            src = self.source[name]
            if src is not None and src not in available and src.startswith(KEY_PREFIX):
                src = src[len(KEY_PREFIX):]  # thin-mode files keep the key only as a value column
                self.source[name] = src
            if src is not None and src in available and src not in cols:
                cols.append(src)
        return cols

    def copy(self) -> ColumnMapping:
        """A mapping of its own for another file (file_columns adapts `source` to each file)."""
        clone = object.__new__(ColumnMapping)
        clone.wanted, clone.source, clone.types = self.wanted, dict(self.source), self.types
        return clone

    def apply(self, batch: pa.Table | pa.RecordBatch, constants: Mapping[str, pa.Scalar] | None = None) -> pa.Table:
        """The wanted columns of a decoded batch, in the reader's types; `constants`: the file's
        columns that hold one value where it was read (not decoded), repeated."""
        present = dict(zip(batch.schema.names, batch.columns, strict=True))
        rows = batch.num_rows
        arrays: list[pa.Array | pa.ChunkedArray] = []
        for name in self.wanted:
            src = self.source[name]
            target = self.types[name]
            if src is not None and constants and src in constants:
                column = _repeat(constants[src], rows)
            elif src is None or src not in present:
                arrays.append(pa.nulls(rows, target))
                continue
            else:
                column = present[src]
            arrays.append(column if column.type == target else _cast(column, target, name, src))
        return pa.Table.from_arrays(arrays, names=self.wanted)


def _cast(column: pa.ChunkedArray, target: pa.DataType, name: str, source: str) -> pa.ChunkedArray:
    """A column read under an older schema, cast to the current type (the file itself is fine)."""
    try:
        return column.cast(target)
    except pa.ArrowException as exc:
        raise SchemaMismatchError(f"column {name!r} (written as {source!r} of type {column.type}) does not "
                                  f"cast to {target}: {exc}") from None


def _filtered(table: pa.Table, expression: pc.Expression) -> pa.Table:
    """`table.filter`, a failure reported as the filter's: the file decoded fine. Bound
    predicates (strata.expressions.literals.bind) do not fail; this names what slipped through."""
    try:
        return table.filter(expression)
    except pa.ArrowException as exc:
        raise FilterError(f"filter {expression} cannot be evaluated on columns "
                          f"{dict(zip(table.column_names, map(str, table.schema.types), strict=True))}: "
                          f"{exc}") from None


def filter_rows(table: pa.Table, predicate: Predicate) -> pa.Table:
    """The rows of `table` that `predicate` selects, through compute kernels: an Acero plan per
    call (`table.filter(expression)`) costs more than filtering a batch of a few pages."""
    try:
        mask = predicate.mask(table)
    except (pa.ArrowException, TypeError, ValueError):  # a literal the kernels take only through a plan
        return _filtered(table, predicate.to_arrow())
    return table.filter(mask)


@dataclass
class ReadStats:
    """What one read decoded, for showing that its filter prunes: the data files it opened, the
    row groups in them and those it decoded. Its threads share it."""

    files: int = 0
    row_groups: int = 0
    row_groups_read: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, files: int, row_groups: int, row_groups_read: int) -> None:
        with self._lock:
            self.files += files
            self.row_groups += row_groups
            self.row_groups_read += row_groups_read

    def __getstate__(self) -> dict[str, int]:
        """Without the lock: a read shipped to another process (Ray, Spark) counts there."""
        return {"files": self.files, "row_groups": self.row_groups, "row_groups_read": self.row_groups_read}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def read_file(file_io: FileIO, path: str, mapping: ColumnMapping, prune: Predicate | None = None,
              stat_names: dict[str, str] | None = None, batch_rows: int = BATCH_ROWS,
              use_threads: bool = True, deleted: np.ndarray | None = None,
              positions: bool = False, row_filter: Predicate | None = None,
              row_range: tuple[int, int] | None = None, stats: ReadStats | None = None) -> Iterator[pa.Table]:
    """Yield the file's rows in order, in batches, skipping row groups `prune` rules out.

    `stat_names` maps predicate field names to file column names for row-group statistics.
    `use_threads=False` decodes the columns on the calling thread only: for callers that already
    read files in parallel, where nested parallel decoding just burns CPU on contention.
    `deleted`: sorted row positions a deletion vector marks, left out (row groups they cover
    entirely are not decoded); `positions` appends each row's position as ROW_POSITION.
    `row_filter`: only the rows it selects (evaluated on the mapped columns, which must hold its
    fields), filtered before the deleted rows are left out: a selective filter copies little.
    `row_range` (start, end): only the row groups starting in it (a part of the file, read in
    parallel with the others by the caller). `stats` counts the file and its row groups."""
    try:
        if deleted is not None or positions or row_range is not None:
            yield from _read_positioned(file_io, path, mapping, prune, stat_names, batch_rows, use_threads,
                                        deleted, positions, row_filter, row_range, stats)
            return
        yield from _read_file(file_io, path, mapping, prune, stat_names, batch_rows, use_threads, row_filter,
                              stats)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as exc:
        # Arrow's messages do not say which file: name it, or nobody can repair the table
        if _is_storage_failure(exc):  # the store failed to answer: the file may be fine, a retry may read it
            raise OSError(f"reading data file {path} failed: {exc}") from exc
        raise CorruptDataError(f"data file {path} is unreadable: {exc}") from None


def _is_storage_failure(exc: BaseException) -> bool:
    """A request that failed (S3's errors, a system call's errno), not a file that is damaged."""
    return isinstance(exc, OSError) and (exc.errno is not None or "AWS Error" in str(exc))


class _Footer:
    """What a data file's footer says, decoded once per file and process (data files never
    change once written): its metadata, Arrow schema, where its row groups start, and the column
    statistics reads ask for. A range read of many small files otherwise spends more time
    re-reading and re-decoding footers than decoding the few pages it wants."""

    def __init__(self, metadata: pq.FileMetaData, schema: pa.Schema, nested_paths: dict[str, list[int]]):
        self.metadata = metadata
        self.schema = schema
        self.nested_paths = nested_paths
        self.names = set(schema.names)
        # top-level column -> its Parquet column: statistics and page indexes are per leaf
        self.leaves = primitive_leaves(schema)
        self.starts = np.concatenate([[0], np.cumsum([metadata.row_group(g).num_rows
                                                      for g in range(metadata.num_row_groups)])])
        self._stats: dict[tuple[int, int], ColumnStats | None] = {}
        self._constants: dict[tuple[tuple[str, ...], tuple[int, ...] | None], dict[str, pa.Scalar]] = {}
        self._pages: FilePages | bool | None = False  # False: not looked up yet

    def pages(self, source: pa.NativeFile, path: str) -> FilePages | None:
        """The file's page index (strata.io.page_index.file_pages), kept with its footer."""
        if self._pages is False:
            self._pages = file_pages(source, path, self.metadata)
        return self._pages  # type: ignore[return-value]

    def rows(self, group: int) -> int:
        return int(self.starts[group + 1] - self.starts[group])

    def stats(self, group: int, column: int) -> ColumnStats | None:
        """The column's min/max statistics in the row group (None: it has none)."""
        key = (group, column)
        if key not in self._stats:
            stats = self.metadata.row_group(group).column(column).statistics
            self._stats[key] = None if stats is None or not stats.has_min_max else \
                ColumnStats(stats.min, stats.max, stats.null_count, self.rows(group))
        return self._stats[key]

    def constants(self, columns: Sequence[str], groups: list[int] | None) -> dict[str, pa.Scalar]:
        key = (tuple(columns), None if groups is None else tuple(groups))
        if key not in self._constants:
            self._constants[key] = _constant_columns(self.metadata, self.schema, columns, groups, self.leaves)
        return self._constants[key]


_FOOTERS: OrderedDict[tuple[str, int], _Footer] = OrderedDict()
_FOOTERS_LOCK = threading.Lock()
FOOTER_CACHE_FILES = 512


class _ParquetFile(pq.ParquetFile):
    """A ParquetFile on a footer decoded once per file (`_Footer`), keyed by path and size."""

    def __init__(self, source: pa.NativeFile, path: str):
        key = (path, source.size())
        with _FOOTERS_LOCK:
            footer = _FOOTERS.get(key)
            if footer is not None:
                _FOOTERS.move_to_end(key)
        # ParquetFile's own __init__ on an open file, without what it would recompute per open
        self._source = source
        self._close_source = False
        self.common_metadata = None
        if footer is None:
            footer = _Footer(self.reader.metadata, self.reader.schema_arrow, self._build_nested_paths())
            with _FOOTERS_LOCK:
                _FOOTERS[key] = footer
                while len(_FOOTERS) > FOOTER_CACHE_FILES:
                    _FOOTERS.popitem(last=False)
        self._nested_paths_by_prefix = footer.nested_paths
        self.footer = footer

    @functools.cached_property
    def reader(self) -> ParquetReader:
        """pyarrow's reader, opened on first use: a read the page index serves goes without."""
        footer: _Footer | None = getattr(self, "footer", None)  # None: the open decodes it (a first read)
        reader = ParquetReader()
        reader.open(self._source, pre_buffer=True, metadata=None if footer is None else footer.metadata,
                    arrow_extensions_enabled=True)  # as pq.ParquetFile opens it
        return reader

    @property
    def metadata(self) -> pq.FileMetaData:
        return self.footer.metadata

    @property
    def schema_arrow(self) -> pa.Schema:
        return self.footer.schema


def _read_file(file_io: FileIO, path: str, mapping: ColumnMapping, prune: Predicate | None,
               stat_names: dict[str, str] | None, batch_rows: int, use_threads: bool,
               row_filter: Predicate | None = None, stats: ReadStats | None = None) -> Iterator[pa.Table]:
    expression = row_filter.to_arrow() if row_filter is not None else None
    with file_io.open_input_file(path) as source:
        parquet = _ParquetFile(source, path)
        columns = mapping.file_columns(parquet.footer.names)
        names = mapping.stat_columns(stat_names or {})
        groups = _row_groups(parquet.footer, prune, names)
        if stats is not None:
            total = parquet.metadata.num_row_groups
            stats.add(1, total, total if groups is None else len(groups))
        if groups is not None and not groups:
            return
        constants = parquet.footer.constants(columns, groups)
        decoded = [c for c in columns if c not in constants]
        pages = _page_runs(source, path, parquet, groups, prune, names, file_io.is_object_store)
        if pages is None:
            batches = parquet.iter_batches(batch_size=batch_rows, row_groups=groups, columns=decoded,
                                           use_threads=use_threads)
        else:
            batches = (b for _, b in _batches(source, parquet, pages, decoded, batch_rows, use_threads))
        for batch in batches:
            table = mapping.apply(batch, constants)
            yield table if expression is None else _filtered(table, expression)


@dataclass
class _PageRuns:
    """The row groups a read decodes and, for those the page index narrows, the row ranges in them."""

    groups: list[int]
    runs: dict[int, list[tuple[int, int]]]
    pages: FilePages | None  # None: no runs
    gap: int = COALESCE_GAP  # byte ranges closer than this are read in one request


def _page_runs(source: pa.NativeFile, path: str, parquet: _ParquetFile, groups: list[int] | None,
               prune: Predicate | None, names: dict[str, str | None], object_store: bool) -> _PageRuns | None:
    """Where the page index narrows the row groups `prune` kept to ranges of rows (None: nowhere)."""
    if prune is None or not groups:
        return None
    pages = parquet.footer.pages(source, path)
    if pages is None:
        return None
    arrow = parquet.schema_arrow
    leaves = parquet.footer.leaves
    columns: dict[str, tuple[int, pa.DataType] | None] = {}
    for f in prune.fields():
        name = names.get(f, f)
        if name is None or name in leaves:
            columns[f] = None if name is None else (leaves[name], arrow.field(name).type)
    runs = {g: found for g in groups
            if (found := selected_rows(pages, g, parquet.footer.rows(g), prune, columns)) is not None}
    return _PageRuns(groups, runs, pages, OBJECT_STORE_GAP if object_store else COALESCE_GAP) if runs else None


def _batches(source: pa.NativeFile, parquet: _ParquetFile, pages: _PageRuns, columns: list[str],
             batch_rows: int, use_threads: bool) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows of `pages.groups` (those in `pages.runs` only in their row ranges), in order, in
    batches, each with the file row it starts at."""
    starts = parquet.footer.starts
    whole: list[int] = []

    def flush() -> Iterator[tuple[int, pa.RecordBatch]]:
        for run in _consecutive(whole):
            offset = int(starts[run[0]])
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=run, columns=columns,
                                              use_threads=use_threads):
                yield offset, batch
                offset += batch.num_rows
        whole.clear()

    for g in pages.groups:
        if g not in pages.runs:
            whole.append(g)
            continue
        yield from flush()
        assert pages.pages is not None
        for start, batch in read_rows(source, pages.pages, parquet, g, pages.runs[g], columns, use_threads,
                                      pages.gap):
            yield int(starts[g]) + start, batch
    yield from flush()


def _read_positioned(file_io: FileIO, path: str, mapping: ColumnMapping, prune: Predicate | None,
                     stat_names: dict[str, str] | None, batch_rows: int, use_threads: bool,
                     deleted: np.ndarray | None, positions: bool,
                     row_filter: Predicate | None = None,
                     row_range: tuple[int, int] | None = None, stats: ReadStats | None = None) -> Iterator[pa.Table]:
    """`_read_file` keeping track of each row's position in the file: consecutive row groups are
    read as one stream (batches of `batch_rows`), a skipped group starts a new one."""
    expression = row_filter.to_arrow() if row_filter is not None else None
    no_deletes = np.empty(0, dtype=np.int64)
    with file_io.open_input_file(path) as source:
        parquet = _ParquetFile(source, path)
        meta = parquet.metadata
        starts = parquet.footer.starts
        columns = mapping.file_columns(parquet.footer.names)
        names = mapping.stat_columns(stat_names or {})
        groups = _row_groups(parquet.footer, prune, names)
        selected = [g for g in (range(meta.num_row_groups) if groups is None else groups)
                    if (row_range is None or row_range[0] <= starts[g] < row_range[1])
                    and (deleted is None or _dead_count(deleted, int(starts[g]), int(starts[g + 1]))
                         < starts[g + 1] - starts[g])]  # a group whose every row is deleted is not decoded
        if stats is not None:  # a part of a file (row_range) counts its groups; the first part the file
            in_part = sum(1 for g in range(meta.num_row_groups) if row_range is None
                          or row_range[0] <= starts[g] < row_range[1])
            stats.add(int(row_range is None or row_range[0] == 0), in_part, len(selected))
        if not selected:
            return
        constants = parquet.footer.constants(columns, selected)
        decoded = [c for c in columns if c not in constants]
        # the filter runs on the decoded columns (before constants, casts and copies) when it
        # only names columns decoded as they are
        early = row_filter is not None and all(
            mapping.source.get(f) == f and f in decoded and parquet.schema_arrow.field(f).type == mapping.types[f]
            for f in row_filter.fields())
        pages = _page_runs(source, path, parquet, selected, prune, names, file_io.is_object_store) \
            or _PageRuns(selected, {}, None)
        for offset, batch in _batches(source, parquet, pages, decoded, batch_rows, use_threads):
            n = batch.num_rows
            dead = no_deletes if deleted is None else \
                deleted[np.searchsorted(deleted, offset):np.searchsorted(deleted, offset + n)] - offset
            if expression is None:
                yield _without_dead(batch, offset, dead, positions, mapping, constants)
            elif early and row_filter is not None:
                yield _selected(batch, offset, dead, positions, mapping, constants, row_filter)
            else:
                yield _live_rows(mapping.apply(batch, constants), offset, dead, positions,
                                 expression)


def _dead_count(deleted: np.ndarray, start: int, end: int) -> int:
    return int(np.searchsorted(deleted, end) - np.searchsorted(deleted, start))


def _consecutive(groups: Sequence[int]) -> list[list[int]]:
    """Row-group indices (ascending) as runs of consecutive ones."""
    runs: list[list[int]] = []
    for g in groups:
        if runs and runs[-1][-1] == g - 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return runs


_REPEATED: dict[tuple[pa.DataType, object], pa.Array] = {}  # constant column values, by type and value
_REPEATED_BY_SCALAR: dict[int, tuple[pa.Scalar, pa.Array]] = {}  # the same, by the scalar asked with
_REPEATED_LOCK = threading.Lock()
REPEAT_CACHE_ROWS = BATCH_ROWS  # a repeated value this long is kept and sliced (zero copy) for shorter batches


def _repeat(value: pa.Scalar, n: int) -> pa.Array:
    """`value` n times, sliced from a kept array of the value when n <= REPEAT_CACHE_ROWS (a
    partition column is the same in every batch of every read)."""
    if n > REPEAT_CACHE_ROWS or not value.is_valid:
        return _build_repeat(value, n)
    seen = _REPEATED_BY_SCALAR.get(id(value))
    if seen is not None and seen[0] is value:  # the footer's constants: the same scalars every read
        return seen[1].slice(0, n)
    try:
        key = (value.type, value.as_py())
        hash(key)
        width = len(key[1]) if isinstance(key[1], str | bytes) else value.type.bit_width // 8
    except (TypeError, ValueError, pa.ArrowException):
        return _build_repeat(value, n)
    if width * REPEAT_CACHE_ROWS > 16 << 20:  # a long value: not worth keeping
        return _build_repeat(value, n)
    with _REPEATED_LOCK:
        kept = _REPEATED.get(key)
    if kept is None:
        kept = _build_repeat(value, REPEAT_CACHE_ROWS)
    with _REPEATED_LOCK:
        if key not in _REPEATED:
            if len(_REPEATED) >= 64:  # a bound: many distinct values (partitions) are read in turn
                _REPEATED.clear()
                _REPEATED_BY_SCALAR.clear()
            _REPEATED[key] = kept
        if len(_REPEATED_BY_SCALAR) >= 256:
            _REPEATED_BY_SCALAR.clear()
        _REPEATED_BY_SCALAR[id(value)] = (value, kept)  # the scalar kept with it: its id is not reused
    return kept.slice(0, n)


def _build_repeat(value: pa.Scalar, n: int) -> pa.Array:
    """A string or binary value is laid out directly (offsets and bytes) at a fraction of
    pa.repeat's cost."""
    kind = value.type
    if n and value.is_valid and (pa.types.is_string(kind) or pa.types.is_binary(kind)):
        data = value.as_buffer().to_pybytes() if pa.types.is_binary(kind) else value.as_py().encode("utf-8")
        if len(data) * n < 2**31:
            offsets = np.arange(0, (n + 1) * len(data), len(data) or 1, dtype=np.int32)[:n + 1] \
                if data else np.zeros(n + 1, dtype=np.int32)
            return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)])
    return pa.repeat(value, n)


def _without_dead(batch: pa.RecordBatch, offset: int, dead: np.ndarray, positions: bool, mapping: ColumnMapping,
                  constants: dict[str, pa.Scalar]) -> pa.Table:
    """A batch starting at row `offset` of its file without its `dead` rows: the decoded columns
    are filtered before the constant ones are repeated, and before any cast."""
    table = pa.Table.from_batches([batch])
    rows = None
    if len(dead):
        keep = np.ones(batch.num_rows, dtype=bool)
        keep[dead] = False
        rows = np.flatnonzero(keep)
        if table.num_columns:
            table = table.take(pa.array(rows))  # a gather of the kept rows: ~30% cheaper than a boolean filter
        else:  # only columns the file lacks (added later): Arrow's take of no columns gives no rows
            table = pa.Table.from_batches([batch.slice(0, len(rows))])
    table = mapping.apply(table, constants)
    if positions:
        at = np.arange(offset, offset + batch.num_rows, dtype=np.int64) if rows is None else rows + offset
        table = table.append_column(ROW_POSITION, pa.array(at))
    return table


def _selected(batch: pa.RecordBatch, offset: int, dead: np.ndarray, positions: bool, mapping: ColumnMapping,
              constants: dict[str, pa.Scalar], row_filter: Predicate) -> pa.Table:
    """The rows of a batch (starting at row `offset` of its file) `row_filter` selects, without
    the `dead` ones: one boolean mask, one gather of the rows kept."""
    table = pa.Table.from_batches([batch])
    try:
        mask = row_filter.mask(table)
    except (pa.ArrowException, TypeError, ValueError):  # a literal the kernels take only through a plan
        return _live_rows(mapping.apply(batch, constants), offset, dead, positions,
                          row_filter.to_arrow())
    if isinstance(mask, pa.ChunkedArray):
        mask = mask.combine_chunks()
    keep = to_numpy(pc.fill_null(mask, False))
    if len(dead):
        keep = keep.copy() if not keep.flags.writeable else keep
        keep[dead] = False
    rows = np.flatnonzero(keep)
    if len(rows) < table.num_rows:
        table = table.take(pa.array(rows))
    table = mapping.apply(table, constants)
    if positions:
        table = table.append_column(ROW_POSITION, pa.array(rows + offset))
    return table


def _live_rows(table: pa.Table, offset: int, dead: np.ndarray, positions: bool,
               expression: pc.Expression) -> pa.Table:
    """The rows of a batch starting at row `offset` of its file, without the `dead` ones (offsets
    in the batch, sorted) and, with `expression`, only those it selects."""
    n = table.num_rows
    if positions or len(dead):
        table = table.append_column(ROW_POSITION, pa.array(np.arange(offset, offset + n, dtype=np.int64)))
    table = _filtered(table, expression)
    if len(dead) and table.num_rows:
        at = to_numpy(table.column(ROW_POSITION)) - offset
        table = table.filter(pa.array(~np.isin(at, dead, assume_unique=True)))
    if ROW_POSITION in table.column_names and not positions:
        table = table.drop_columns([ROW_POSITION])
    return table


def _constant_columns(meta: pq.FileMetaData, arrow: pa.Schema, columns: Sequence[str], groups: list[int] | None,
                      leaves: Mapping[str, int] | None = None) -> dict[str, pa.Scalar]:
    """String, binary and integer columns holding one value in every row group read (a partition
    column, the row kind of insert-only files), by their statistics: repeating the value is an
    order of magnitude cheaper than decoding it. Equal min and max are exact (a truncated max
    would differ from the min); floats are left out (NaN, -0.0). `leaves`: primitive_leaves(arrow)."""
    leaves = primitive_leaves(arrow) if leaves is None else leaves
    found: dict[str, pa.Scalar] = {}
    read = range(meta.num_row_groups) if groups is None else groups
    for name in columns:
        index = leaves.get(name)
        kind = arrow.field(name).type
        if index is None or not (pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_integer(kind)):
            continue
        values = {_only_value(meta.row_group(g), index) for g in read}
        if len(values) == 1 and None not in values:
            found[name] = scalar(values.pop(), kind)
    if found and len(found) == len(columns):  # keep one column decoded: its batches give the row counts
        found.pop(columns[0])
    return found


def _only_value(group: pq.RowGroupMetaData, index: int) -> object:
    """The column's single value in the row group, or None if it has several, or nulls."""
    stats = group.column(index).statistics
    try:
        if stats is None or not stats.has_min_max or stats.null_count != 0 or stats.min != stats.max:
            return None
        return stats.min
    except ValueError:  # statistics that do not decode (not UTF-8): just decode the column
        return None


def _row_groups(footer: _Footer, prune: Predicate | None, names: dict[str, str | None]) -> list[int] | None:
    if prune is None:
        return None
    keep = []
    for g in range(footer.metadata.num_row_groups):
        rows = footer.rows(g)

        def lookup(field: str, group: int = g, rows: int = rows) -> ColumnStats | None:
            name = names.get(field, field)
            if name is None:  # added after the file was written: all null in it
                return ColumnStats(None, None, rows, rows)
            leaf = footer.leaves.get(name)  # None: not in the file, or nested (no statistics of its own)
            return None if leaf is None else footer.stats(group, leaf)

        if prune.may_match(lookup):
            keep.append(g)
    return keep
