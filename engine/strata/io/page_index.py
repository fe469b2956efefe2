"""Page-level pruning through the Parquet page index (column and offset indexes).

Data files keep large row groups (a scan pays a request per column per group, see
strata.io.data_file_writer) and write a page index; files sorted by key have pages of PAGE_ROWS
rows. A range read then decodes only the pages whose min/max may match: pyarrow cannot read
single pages, so the pages wanted (and a column's dictionary page, when they need it) are copied
into a small Parquet file in memory, with a footer of its own, and pyarrow decodes that.

What a file's footer and page index say is decoded once per file and process and kept (FilePages,
up to CACHE_FILES files): data files never change once written. Two threads reading parts of one
file may decode the same entry twice; they store equal values.

The page index is standard Parquet: Trino, Spark, Paimon's Java reader use or ignore it.
"""

from __future__ import annotations

import base64
import functools
import struct
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow._parquet import ParquetReader

from strata.expressions import ColumnStats, Predicate, integer_range
from strata.io import thrift_compact as tc
from strata.io.leaves import primitive_leaves

# A page holds this many rows (the writer's max_rows_per_page and write_batch_size: with both
# equal, every column's pages start at the same rows, dictionary fall-backs included).
PAGE_ROWS = 4096
# Page pruning is used when it leaves at most this share of a row group's rows to decode.
MAX_SELECTED_SHARE = 0.5
# Byte ranges closer than this are read in one request: a local file, and an object store, where
# a request costs a round trip (as pyarrow's pre-buffering coalesces a row group's column chunks).
COALESCE_GAP = 64 * 1024
OBJECT_STORE_GAP = 1024 * 1024
MAGIC = b"PAR1"

# Parquet thrift field ids (parquet.thrift), of the structs read or written here
_FMD_SCHEMA, _FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KV, _FMD_COLUMN_ORDERS = 2, 3, 4, 5, 7
_SE_NUM_CHILDREN = 5
_RG_COLUMNS, _RG_TOTAL_BYTES, _RG_NUM_ROWS = 1, 2, 3
_CC_FILE_OFFSET, _CC_META = 2, 3
_CC_OFFSET_INDEX, _CC_OFFSET_INDEX_LEN, _CC_COLUMN_INDEX, _CC_COLUMN_INDEX_LEN = 4, 5, 6, 7
_CMD_TYPE, _CMD_NUM_VALUES, _CMD_UNCOMPRESSED, _CMD_COMPRESSED = 1, 5, 6, 7
_CMD_DATA_PAGE, _CMD_DICTIONARY_PAGE = 9, 11
_CMD_ENCODING_STATS = 13
_PES_PAGE_TYPE, _PES_ENCODING, _PES_COUNT = 1, 2, 3
_DATA_PAGE_TYPES = (0, 3)  # DATA_PAGE, DATA_PAGE_V2
_DICTIONARY_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY
_CI_NULL_PAGES, _CI_MIN, _CI_MAX, _CI_NULL_COUNTS = 1, 2, 3, 5
_PL_OFFSET, _PL_SIZE, _PL_FIRST_ROW = 1, 2, 3
_INT32, _INT64, _FLOAT, _DOUBLE, _BYTE_ARRAY = 1, 2, 4, 5, 6
_CC_META_HEADER = tc.field_header(_CC_META, _CC_FILE_OFFSET, tc.STRUCT)


@dataclass
class _Pages:
    """One column chunk's pages: where they are, the rows they start at, and the chunk's
    dictionary page (offset, size)."""

    offsets: np.ndarray
    sizes: np.ndarray
    first_rows: np.ndarray
    dictionary: tuple[int, int] | None
    # data pages (the first ones) that need the dictionary: a writer falls back to plain
    # encoding for good once a dictionary grows too large, and later pages decode without it
    dictionary_pages: int


@dataclass
class _PageStats:
    mins: list[Any]
    maxs: list[Any]
    null_counts: list[int | None]
    rows: np.ndarray  # rows per page


@dataclass
class FilePages:
    """What a file's footer and page index say about its pages, decoded once per file (data
    files never change once written)."""

    footer: tc.Struct
    leaves: dict[str, int]  # top-level column -> its Parquet column (strata.io.leaves)
    pages: dict[tuple[int, int], _Pages | None] = field(default_factory=dict)
    stats: dict[tuple[int, int], _PageStats | None] = field(default_factory=dict)
    index: bytes = b""
    index_start: int = 0
    chunk_parts: dict[tuple[int, int], _ChunkParts] = field(default_factory=dict)
    footers: dict[tuple[int, ...], tuple[bytes, bytes]] = field(default_factory=dict)
    layouts: dict[tuple[int, tuple[tuple[str, int], ...]], Any] = field(default_factory=dict)  # _span_layout

    def chunk(self, group: int, column: int) -> tc.Struct:
        return self.footer[_FMD_ROW_GROUPS][1][1][group][_RG_COLUMNS][1][1][column]


_CACHE: OrderedDict[tuple[str, int, int], FilePages | None] = OrderedDict()
_CACHE_LOCK = threading.Lock()
CACHE_FILES = 512


def file_pages(source: pa.NativeFile, path: str, meta: pq.FileMetaData) -> FilePages | None:
    """The page index of the file open as `source` (None: it has none, or a nested schema)."""
    key = (path, meta.serialized_size, meta.num_rows)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    found = _load(source, meta)
    with _CACHE_LOCK:
        _CACHE[key] = found
        while len(_CACHE) > CACHE_FILES:
            _CACHE.popitem(last=False)
    return found


def _load(source: pa.NativeFile, meta: pq.FileMetaData) -> FilePages | None:
    if meta.num_row_groups == 0 or len(meta.schema) == 0:
        return None
    if not all(meta.row_group(0).column(c).has_offset_index for c in range(meta.num_columns)):
        return None
    size = source.size()
    length = struct.unpack("<I", source.read_at(8, size - 8)[:4])[0]
    footer, _ = tc.decode_struct(source.read_at(length, size - 8 - length))
    schema = footer[_FMD_SCHEMA][1][1]
    if len(schema) != meta.num_columns + 1 or any(_SE_NUM_CHILDREN in e for e in schema[1:]):
        return None  # nested columns: a page's rows are not its values
    found = FilePages(footer, primitive_leaves(meta.schema.to_arrow_schema()))
    spans = [(c[_CC_OFFSET_INDEX][1], c[_CC_OFFSET_INDEX][1] + c[_CC_OFFSET_INDEX_LEN][1])
             for g in footer[_FMD_ROW_GROUPS][1][1] for c in g[_RG_COLUMNS][1][1] if _CC_OFFSET_INDEX in c]
    spans += [(c[_CC_COLUMN_INDEX][1], c[_CC_COLUMN_INDEX][1] + c[_CC_COLUMN_INDEX_LEN][1])
              for g in footer[_FMD_ROW_GROUPS][1][1] for c in g[_RG_COLUMNS][1][1] if _CC_COLUMN_INDEX in c]
    found.index_start = min(s for s, _ in spans)
    found.index = source.read_at(max(e for _, e in spans) - found.index_start, found.index_start)
    return found


def _column_pages(pages: FilePages, group: int, column: int) -> _Pages | None:
    key = (group, column)
    if key not in pages.pages:
        chunk = pages.chunk(group, column)
        if _CC_OFFSET_INDEX not in chunk:
            pages.pages[key] = None
            return None
        index, _ = tc.decode_struct(pages.index, chunk[_CC_OFFSET_INDEX][1] - pages.index_start)
        locations = index[1][1][1]
        meta = chunk[_CC_META][1]
        offsets = np.array([p[_PL_OFFSET][1] for p in locations], dtype=np.int64)
        dictionary = None
        if _CMD_DICTIONARY_PAGE in meta and len(offsets) and 0 < meta[_CMD_DICTIONARY_PAGE][1] < offsets[0]:
            dictionary = (meta[_CMD_DICTIONARY_PAGE][1], int(offsets[0]) - meta[_CMD_DICTIONARY_PAGE][1])
        pages.pages[key] = _Pages(offsets, np.array([p[_PL_SIZE][1] for p in locations], dtype=np.int64),
                                  np.array([p[_PL_FIRST_ROW][1] for p in locations], dtype=np.int64), dictionary,
                                  _dictionary_pages(meta, len(offsets)) if dictionary else 0)
    return pages.pages[key]


def _dictionary_pages(meta: tc.Struct, pages: int) -> int:
    """How many of a chunk's data pages are dictionary-encoded (all, if it does not say)."""
    if _CMD_ENCODING_STATS not in meta:
        return pages
    stats = meta[_CMD_ENCODING_STATS][1][1]
    return sum(s[_PES_COUNT][1] for s in stats
               if s[_PES_PAGE_TYPE][1] in _DATA_PAGE_TYPES and s[_PES_ENCODING][1] in _DICTIONARY_ENCODINGS)


def _column_stats(pages: FilePages, group: int, column: int, kind: pa.DataType,
                  group_rows: int) -> _PageStats | None:
    key = (group, column)
    if key not in pages.stats:
        chunk = pages.chunk(group, column)
        located = _column_pages(pages, group, column)
        if _CC_COLUMN_INDEX not in chunk or located is None:
            pages.stats[key] = None
            return None
        index, _ = tc.decode_struct(pages.index, chunk[_CC_COLUMN_INDEX][1] - pages.index_start)
        nulls = index[_CI_NULL_PAGES][1][1]
        counts = index[_CI_NULL_COUNTS][1][1] if _CI_NULL_COUNTS in index else [None] * len(nulls)
        physical = chunk[_CC_META][1][_CMD_TYPE][1]
        mins = _values(index[_CI_MIN][1][1], nulls, physical, kind)
        maxs = _values(index[_CI_MAX][1][1], nulls, physical, kind)
        rows = np.diff(np.append(located.first_rows, group_rows))
        pages.stats[key] = None if mins is None or maxs is None else _PageStats(mins, maxs, counts, rows)
    return pages.stats[key]


_NUMPY = {_INT32: "<i4", _INT64: "<i8", _FLOAT: "<f4", _DOUBLE: "<f8"}


def _values(raw: list[bytes], null_pages: list[bool], physical: int, kind: pa.DataType) -> list[Any] | None:
    """Page bounds as the Python values row-group statistics give for `kind` (None: a type whose
    bounds are not compared here, e.g. decimals, floats' NaN)."""
    if physical in (_INT32, _INT64) and (pa.types.is_integer(kind) or pa.types.is_date32(kind)
                                          or (pa.types.is_timestamp(kind) and kind.unit != "ns")):
        width = 4 if physical == _INT32 else 8
        padded = b"".join(b"\0" * width if null else value for value, null in zip(raw, null_pages, strict=True))
        ints = pa.array(np.frombuffer(padded, dtype=_NUMPY[physical]))
        values = ints.to_pylist() if pa.types.is_integer(kind) else ints.view(kind).to_pylist()
    elif physical == _BYTE_ARRAY and (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        try:
            values = [value.decode("utf-8") for value in raw]
        except UnicodeDecodeError:
            return None
    elif physical == _BYTE_ARRAY and (pa.types.is_binary(kind) or pa.types.is_large_binary(kind)):
        values = list(raw)
    else:
        return None
    return [None if null else value for value, null in zip(values, null_pages, strict=True)]


def selected_rows(pages: FilePages, group: int, group_rows: int, prune: Predicate,
                  columns: dict[str, tuple[int, pa.DataType] | None]) -> list[tuple[int, int]] | None:
    """Row ranges [start, end) of the row group that may hold rows `prune` matches, by the page
    statistics of the predicate's columns (`columns`: predicate field -> the file's leaf column
    and type, None when the file lacks it); None when pages prune too little to be worth it."""
    layout = _span_layout(pages, group, group_rows, columns)
    if layout is None:
        return None
    bounds, ends, spans = layout
    most = MAX_SELECTED_SHARE * group_rows
    interval = integer_range(prune)
    if interval is not None and interval[0] in spans:
        kept = _in_range(spans[interval[0]], interval[1], interval[2])
        if kept is not None:
            return None if int((ends - bounds)[kept].sum()) > most else _runs(bounds, ends, np.flatnonzero(kept))
    missing = {name for name, found in columns.items() if found is None}  # added after the file: all null
    kept_spans: list[int] = []
    kept_rows = 0

    def visit(lo: int, hi: int) -> None:
        """Keep the spans lo..hi-1 that may match: halves of a range that cannot are skipped
        whole, so a narrow range on a sorted column asks about a few ranges, not every page; once
        more rows than pruning pays for are kept, nothing more is asked (an unsorted column)."""
        nonlocal kept_rows
        if kept_rows > most:
            return
        rows = int(ends[hi - 1] - bounds[lo])

        def lookup(name: str) -> ColumnStats | None:
            if name in missing:
                return ColumnStats(None, None, rows, rows)
            span = spans.get(name)
            return None if span is None else span.over(lo, hi, rows)

        if not prune.may_match(lookup):
            return
        if hi - lo == 1:
            kept_spans.append(lo)
            kept_rows += rows
            return
        visit(lo, (lo + hi) // 2)
        visit((lo + hi) // 2, hi)

    visit(0, len(bounds))
    return None if kept_rows > most else _runs(bounds, ends, kept_spans)


def _runs(bounds: np.ndarray, ends: np.ndarray, kept: Sequence[int] | np.ndarray) -> list[tuple[int, int]]:
    """The kept spans (ascending) as row ranges, adjacent ones joined."""
    runs: list[tuple[int, int]] = []
    for i in kept:
        start, end = int(bounds[i]), int(ends[i])
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
    return runs


def _in_range(span: _SpanStats, lo: int, hi: int) -> np.ndarray | None:
    """Which spans may hold a value in [lo, hi], all at once (a key range read asks this of every
    file it reads); None when the column's bounds are not integers (the general path decides)."""
    bounds = span.integer_bounds
    if bounds is None:
        return None
    mins, maxs, unknown, all_null = bounds
    return ~all_null & (unknown | ((maxs >= lo) & (mins <= hi)))


def _span_layout(pages: FilePages, group: int, group_rows: int, columns: dict[str, tuple[int, pa.DataType] | None]
                 ) -> tuple[np.ndarray, np.ndarray, dict[str, _SpanStats]] | None:
    """The spans of rows between any two page starts of the predicate's columns (the pages of
    different columns may start at different rows), where each ends, and each column's
    statistics over them; kept per row group and columns (None: no column has a page index)."""
    key = (group, tuple(sorted((name, found[0]) for name, found in columns.items() if found is not None)))
    if key in pages.layouts:
        return pages.layouts[key]
    stats = {name: _column_stats(pages, group, found[0], found[1], group_rows)
             for name, found in columns.items() if found is not None}
    indexed = {name: s for name, s in stats.items() if s is not None}
    layout = None
    if indexed:
        bounds = np.unique(np.concatenate([np.cumsum(np.append(0, s.rows[:-1])) for s in indexed.values()]))
        spans = {name: _SpanStats(s, np.searchsorted(np.cumsum(s.rows), bounds, side="right"))
                 for name, s in indexed.items()}
        layout = (bounds, np.append(bounds[1:], group_rows), spans)
    pages.layouts[key] = layout
    return layout


class _SpanStats:
    """One column's page statistics over spans of rows (`at`: the page of each span)."""

    def __init__(self, stats: _PageStats, at: np.ndarray):
        self.mins = [stats.mins[p] for p in at.tolist()]
        self.maxs = [stats.maxs[p] for p in at.tolist()]
        # per span: 0 no nulls, 1 all null, None some or unknown
        self.nulls = [None if n is None else 1 if n == stats.rows[p] else 0 if n == 0 else None
                      for n, p in zip((stats.null_counts[p] for p in at.tolist()), at.tolist(), strict=True)]

    @functools.cached_property
    def integer_bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        """Each span's min and max as int64 arrays, whether they are unknown, whether the span is
        all null; None when the bounds are not integers."""
        if not all(type(v) is int for v in (*self.mins, *self.maxs) if v is not None):
            return None
        try:
            mins = np.array([0 if v is None else v for v in self.mins], dtype=np.int64)
            maxs = np.array([0 if v is None else v for v in self.maxs], dtype=np.int64)
        except OverflowError:  # unsigned 64-bit bounds past int64
            return None
        all_null = np.array([n == 1 for n in self.nulls], dtype=bool)
        unknown = np.array([a is None or b is None for a, b in zip(self.mins, self.maxs, strict=True)], dtype=bool)
        return mins, maxs, unknown & ~all_null, all_null

    def over(self, lo: int, hi: int, rows: int) -> ColumnStats:
        """The statistics of spans lo..hi-1 together, `rows` rows."""
        nulls = set(self.nulls[lo:hi])
        if nulls == {1}:
            return ColumnStats(None, None, rows, rows)
        mins = [v for v in self.mins[lo:hi] if v is not None]
        maxs = [v for v in self.maxs[lo:hi] if v is not None]
        return ColumnStats(min(mins) if mins else None, max(maxs) if maxs else None,
                           0 if nulls == {0} else None, rows)


def read_rows(source: pa.NativeFile, pages: FilePages, parquet: pq.ParquetFile, group: int,
              runs: Sequence[tuple[int, int]], columns: Sequence[str], use_threads: bool = True,
              gap: int = COALESCE_GAP) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The rows [start, end) of each run of the row group, `columns` only, with the row each run
    starts at in the group."""
    if not runs:
        return
    leaves = [pages.leaves[c] for c in columns]
    located = [_column_pages(pages, group, c) for c in leaves]
    if any(p is None for p in located):
        raise ValueError(f"a column of row group {group} has no offset index")
    # columns whose pages start at the same rows share a synthetic file (normally all of them)
    by_layout: dict[bytes, list[int]] = {}
    for k, p in enumerate(located):
        assert p is not None
        by_layout.setdefault(p.first_rows.tobytes(), []).append(k)
    if len(by_layout) == 1:  # one synthetic file holds every column, in the order asked
        decoded = _decode(source, pages, parquet, group, leaves, located, runs, use_threads, gap)  # type: ignore[arg-type]
        for (start, end), (table, skip) in zip(runs, decoded, strict=True):
            yield from _batches_from(start, table.slice(skip, end - start))
        return
    arrays: list[list[pa.ChunkedArray | None]] = [[None] * len(columns) for _ in runs]
    for ks in by_layout.values():
        tables = _decode(source, pages, parquet, group, [leaves[k] for k in ks],
                         [located[k] for k in ks], runs, use_threads, gap)  # type: ignore[misc]
        for r, (table, skip) in enumerate(tables):
            for j, k in enumerate(ks):
                arrays[r][k] = table.column(j).slice(skip, runs[r][1] - runs[r][0])
    for (start, _), run_arrays in zip(runs, arrays, strict=True):
        yield from _batches_from(start, pa.Table.from_arrays(run_arrays, names=list(columns)))


def _batches_from(start: int, table: pa.Table) -> Iterator[tuple[int, pa.RecordBatch]]:
    """The table's batches, each with the row of the group it starts at."""
    for batch in table.to_batches():
        yield start, batch
        start += batch.num_rows


def _decode(source: pa.NativeFile, pages: FilePages, parquet: pq.ParquetFile, group: int, leaves: list[int],
            located: list[_Pages], runs: Sequence[tuple[int, int]], use_threads: bool,
            gap: int) -> list[tuple[pa.Table, int]]:
    """Each run's rows of the `leaves` columns (which share their page layout), decoded from a
    Parquet file of just their pages, and how many rows precede the run's start in it."""
    group_rows = parquet.metadata.row_group(group).num_rows
    first_rows = located[0].first_rows
    page_ends = np.append(first_rows[1:], group_rows)
    spans = []  # per run: first and last page (inclusive)
    for start, end in runs:
        spans.append((int(np.searchsorted(first_rows, start, side="right")) - 1,
                      int(np.searchsorted(first_rows, end, side="left")) - 1))
    wanted: list[tuple[int, int]] = []  # byte ranges to read
    for p in located:
        if p.dictionary is not None and any(a < p.dictionary_pages for a, _ in spans):
            wanted.append(p.dictionary)
        for a, b in spans:
            wanted.append((int(p.offsets[a]), int(p.offsets[b] + p.sizes[b] - p.offsets[a])))
    data = _read_ranges(source, wanted, gap)
    out = bytearray(MAGIC)
    row_groups = []
    for a, b in spans:
        rows = int(page_ends[b] - first_rows[a])
        chunks = [_append_chunk(out, _chunk_parts(pages, group, leaf), p, data, a, b, rows, group_rows)
                  for leaf, p in zip(leaves, located, strict=True)]
        row_groups.append(b"".join([tc.field_header(_RG_COLUMNS, 0, tc.LIST), tc.list_header(len(chunks), tc.STRUCT),
                                    *(c for c, _ in chunks),
                                    tc.encode_fields({_RG_TOTAL_BYTES: (tc.I64, sum(u for _, u in chunks)),
                                                      _RG_NUM_ROWS: (tc.I64, rows)}, _RG_COLUMNS), b"\0"]))
    prefix, suffix = _footer_parts(pages, parquet.schema_arrow, leaves)
    num_rows = sum(int(page_ends[b] - first_rows[a]) for a, b in spans)
    footer = b"".join([prefix, tc.encode_fields({_FMD_NUM_ROWS: (tc.I64, num_rows)}, _FMD_SCHEMA),
                       tc.field_header(_FMD_ROW_GROUPS, _FMD_NUM_ROWS, tc.LIST),
                       tc.list_header(len(row_groups), tc.STRUCT), *row_groups, suffix, b"\0"])
    out += footer + struct.pack("<I", len(footer)) + MAGIC
    synthetic = ParquetReader()  # pyarrow's reader itself: ParquetFile's wrapper costs more than a small read
    synthetic.open(pa.BufferReader(pa.py_buffer(out)), pre_buffer=False)
    return [(synthetic.read_row_group(i, use_threads=use_threads), start - int(first_rows[a]))
            for i, ((start, _), (a, _)) in enumerate(zip(runs, spans, strict=True))]


@dataclass
class _ChunkParts:
    """A column chunk's metadata as a copy of it keeps it, encoded once: fields 1-4 (type,
    encodings, path, codec), the key-value metadata (8) and the encoding statistics (13), the
    last after field 9 or 11."""

    head: bytes
    key_value: bytes
    encoding_stats: dict[int, bytes]
    uncompressed: int


def _chunk_parts(pages: FilePages, group: int, leaf: int) -> _ChunkParts:
    key = (group, leaf)
    if key not in pages.chunk_parts:
        meta = pages.chunk(group, leaf)[_CC_META][1]
        stats = {k: v for k, v in meta.items() if k == _CMD_ENCODING_STATS}
        pages.chunk_parts[key] = _ChunkParts(
            tc.encode_fields({k: v for k, v in meta.items() if k <= 4}),
            tc.encode_fields({k: v for k, v in meta.items() if k == 8}, _CMD_COMPRESSED),
            {last: tc.encode_fields(stats, last) for last in (_CMD_DATA_PAGE, _CMD_DICTIONARY_PAGE)},
            meta[_CMD_UNCOMPRESSED][1])
    return pages.chunk_parts[key]


def _append_chunk(out: bytearray, parts: _ChunkParts, p: _Pages, data: dict[tuple[int, int], bytes],
                  first: int, last: int, rows: int, group_rows: int) -> tuple[bytes, int]:
    """Append a column chunk of pages first..last (and the dictionary page, when they need it)
    to `out`: its ColumnChunk, encoded (the original's metadata with the new offsets and sizes),
    and its uncompressed size."""
    start = len(out)
    with_dictionary = p.dictionary is not None and first < p.dictionary_pages
    if with_dictionary:
        assert p.dictionary is not None
        out += data[p.dictionary]
    data_page = len(out)
    out += data[(int(p.offsets[first]), int(p.offsets[last] + p.sizes[last] - p.offsets[first]))]
    compressed = len(out) - start
    # an estimate (decoding takes each page's own size from its header)
    uncompressed = max(compressed, parts.uncompressed * rows // group_rows)
    offsets = ((_CMD_DATA_PAGE, data_page), (_CMD_DICTIONARY_PAGE, start)) if with_dictionary else \
        ((_CMD_DATA_PAGE, data_page),)
    chunk = b"".join([
        tc.encode_i64_fields(((_CC_FILE_OFFSET, start),)), _CC_META_HEADER,
        parts.head,
        tc.encode_i64_fields(((_CMD_NUM_VALUES, rows), (_CMD_UNCOMPRESSED, uncompressed),
                              (_CMD_COMPRESSED, compressed)), 4),
        parts.key_value,
        tc.encode_i64_fields(offsets, 8 if parts.key_value else _CMD_COMPRESSED),
        # plain pages only: no dictionary, and no statistics saying there is one
        parts.encoding_stats[_CMD_DICTIONARY_PAGE] if with_dictionary else b"",
        b"\0\0"])  # the ends of the ColumnMetaData and the ColumnChunk
    return chunk, uncompressed


def _footer_parts(pages: FilePages, arrow: pa.Schema, leaves: list[int]) -> tuple[bytes, bytes]:
    """The file metadata of a file holding only the `leaves` columns, encoded but for its row
    count and row groups: the fields before them and those after."""
    key = tuple(leaves)
    if key not in pages.footers:
        original = pages.footer
        schema = original[_FMD_SCHEMA][1][1]
        root = {**schema[0], _SE_NUM_CHILDREN: (tc.I32, len(leaves))}
        footer = {k: v for k, v in original.items()
                  if k not in (_FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_KV, _FMD_COLUMN_ORDERS)}
        footer[_FMD_SCHEMA] = (tc.LIST, (tc.STRUCT, [root, *(schema[1 + c] for c in leaves)]))
        if _FMD_COLUMN_ORDERS in original:
            orders = original[_FMD_COLUMN_ORDERS][1]
            footer[_FMD_COLUMN_ORDERS] = (tc.LIST, (orders[0], [orders[1][c] for c in leaves]))
        # the Arrow schema of those columns, so that they decode to the types they were written as
        names = {leaf: name for name, leaf in pages.leaves.items()}
        subset = pa.schema([arrow.field(names[c]) for c in leaves])
        footer[_FMD_KV] = (tc.LIST, (tc.STRUCT, [{1: (tc.BINARY, b"ARROW:schema"),
                                                  2: (tc.BINARY, base64.b64encode(subset.serialize().to_pybytes()))}]))
        pages.footers[key] = (tc.encode_fields({k: v for k, v in footer.items() if k < _FMD_NUM_ROWS}),
                              tc.encode_fields({k: v for k, v in footer.items() if k > _FMD_ROW_GROUPS},
                                               _FMD_ROW_GROUPS))
    return pages.footers[key]


def _read_ranges(source: pa.NativeFile, ranges: list[tuple[int, int]], gap: int) -> dict[tuple[int, int], bytes]:
    """The bytes of each (offset, size), ranges closer than `gap` read in one request."""
    ordered = sorted(set(ranges))
    out: dict[tuple[int, int], bytes] = {}
    i = 0
    while i < len(ordered):
        start, size = ordered[i]
        end = start + size
        j = i + 1
        while j < len(ordered) and ordered[j][0] - end <= gap:
            end = max(end, ordered[j][0] + ordered[j][1])
            j += 1
        block = source.read_at(end - start, start)
        for offset, length in ordered[i:j]:
            out[(offset, length)] = block[offset - start:offset - start + length]
        i = j
    return out
