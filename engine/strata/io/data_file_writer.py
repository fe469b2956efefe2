"""Writing Arrow tables to rolling Parquet data files and describing them as DataFileMeta.

Files roll at the target size. Statistics are accumulated batch by batch, so a compaction can
stream its merged output through one writer in bounded memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strata.format import binary_row
from strata.fs import FileIO
from strata.io.empty_values import fill_under_null_rows, has_not_null_field
from strata.io.leaves import primitive_leaves
from strata.io.page_index import PAGE_ROWS
from strata.io.paths import PathFactory
from strata.io.stats import _truncate_max, _truncate_min
from strata.manifest.data_file_meta import DataFileMeta, FileSource
from strata.manifest.simple_stats import SimpleStats
from strata.options import CoreOptions
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema

FILE_SOURCE_APPEND = 0
FILE_SOURCE_COMPACT = 1
# Row groups hold about ROW_GROUP_BYTES of Arrow data (compressed, a quarter to a third of it), in
# whole multiples of ROW_GROUP_ROWS rows, at most MAX_ROW_GROUP_ROWS: Paimon's and parquet-mr's
# block size. A scan pays a request per column per group, so small groups make engines such as
# Trino read many times slower than large ones on object storage. A key-range read decodes only
# the pages it needs (a page index, strata.io.page_index); the writer holds one group's rows.
ROW_GROUP_BYTES = 128 * 1024 * 1024
ROW_GROUP_ROWS = 32 * 1024
MAX_ROW_GROUP_ROWS = 1024 * 1024
# A table written whole (a flushed write buffer, a batch) is in memory already, so its groups may
# hold up to this many times as much, nearer parquet-mr's 128 MB of encoded data, while its file
# stays within the target size (Arrow bytes over ARROW_BYTES_PER_FILE_BYTE): Trino reads a file of
# few large groups faster than one of many (see the benchmarks page). A merge that streams holds
# its group's rows until the group is written (pyarrow's writer has no buffered row groups), so it
# takes groups that large only while fewer than LARGE_GROUP_MERGES merges of the process do; the
# others keep groups of ROW_GROUP_BYTES. What merges hold beyond that is bounded per process, by
# LARGE_GROUP_MERGES x (IN_MEMORY_GROUP_FACTOR - 1) x ROW_GROUP_BYTES.
IN_MEMORY_GROUP_FACTOR = 4
LARGE_GROUP_MERGES = 2
ARROW_BYTES_PER_FILE_BYTE = 3
# rows written between size checks when rolling (at most one row group); a file overshoots the
# target by at most this.
ROLL_CHECK_ROWS = IN_MEMORY_GROUP_FACTOR * MAX_ROW_GROUP_ROWS
# A column is written with a dictionary when, over a sample of its first rows, the dictionary and
# the indices into it take fewer bytes than the values themselves: parquet-mr's test at the end of
# its first page, so low- and mid-cardinality columns (enums, dates, a supplier key) keep the
# dictionaries Paimon's and Trino's writers give them, and readers (Trino's dictionary blocks)
# decode less, while unique keys, measures and free text are plain from the start. A dictionary
# that grows past DICTIONARY_PAGE_LIMIT later in a column chunk falls back to plain there. A
# column almost all distinct both in its first PAGE_ROWS rows and in PAGE_ROWS rows spread over
# the sample is plain without hashing the whole sample, a cost small writes (W1) notice. Both:
# sorted keys that repeat (TPC-H's ps_partkey) repeat only in the first rows, a column cycling
# through a bounded domain (ps_suppkey) only across a wider window.
DICTIONARY_SAMPLE_ROWS = 32 * 1024
NEAR_UNIQUE_SHARE = 0.95
DICTIONARY_PAGE_LIMIT = 1024 * 1024
# A writer samples its columns' cardinality (see DataFileWriter._encodings) for its first file and
# again every this many files: sampling every file would cost a noticeable share of small writes.
ENCODING_SAMPLE_FILES = 16


@dataclass
class WriterConfig:
    schema: TableSchema
    target_file_size: int
    compression: str
    compression_level: int | None
    stats_truncate: int | None


@dataclass
class _ColumnStats:
    """Running min / max / null count of one column across batches. `leaf`: the column's index
    among the file's Parquet columns when its type is one whose footer statistics are the values
    Arrow's min_max gives (see _footer_type): its min and max are then read back from the footer
    at close (the Parquet writer computes them anyway) instead of computed batch by batch."""

    leaf: int | None = None
    min: Any = None
    max: Any = None
    nulls: int = 0

    def add(self, column: pa.ChunkedArray | pa.Array, with_min_max: bool) -> None:
        self.nulls += column.null_count
        if self.leaf is not None or not with_min_max or column.null_count == len(column) \
                or binary_row.is_collection(column.type):
            return
        mm = pc.min_max(column)
        self._widen(mm["min"].as_py(), mm["max"].as_py())

    def _widen(self, lo: Any, hi: Any) -> None:
        if lo is not None and (self.min is None or lo < self.min):
            self.min = lo
        if hi is not None and (self.max is None or hi > self.max):
            self.max = hi

    def add_footer(self, meta: pq.FileMetaData) -> None:
        """The min and max of a `leaf` column over the row groups of the closed file; both stay
        None (unknown) when a group with values has none (Parquet leaves out NaN-only and
        over-long values)."""
        if self.leaf is None:
            return
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            stats = group.column(self.leaf).statistics
            if stats is not None and stats.has_null_count and stats.null_count == group.num_rows:
                continue  # only nulls
            if stats is None or not stats.has_min_max:
                self.min = self.max = None
                return
            self._widen(stats.min, stats.max)


def _footer_type(t: pa.DataType) -> bool:
    """Types whose Parquet statistics read back as the Python values Arrow's min_max gives."""
    return (pa.types.is_signed_integer(t) or pa.types.is_float32(t) or pa.types.is_float64(t)
            or pa.types.is_boolean(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
            or pa.types.is_date32(t) or (pa.types.is_timestamp(t) and t.unit != "ns")
            or (pa.types.is_decimal128(t) and t.precision <= 18))  # stored as INT32 / INT64


def _column_stats(schema: pa.Schema, leaves: dict[str, int], names: list[str]) -> list[_ColumnStats]:
    return [_ColumnStats(leaves[n] if _footer_type(schema.field(n).type) else None) for n in names]


@dataclass
class _OpenFile:
    name: str
    path: str
    sink: Any
    writer: pq.ParquetWriter
    first_sequence: int
    rows: int = 0
    deletes: int = 0
    min_seq: int | None = None
    max_seq: int | None = None
    min_key: list[Any] | None = None
    max_key: list[Any] | None = None
    value_stats: list[_ColumnStats] = field(default_factory=list)
    key_stats: list[_ColumnStats] = field(default_factory=list)


class DataFileWriter:
    """Writes the rows of one (partition, bucket) into files of about target_file_size."""

    def __init__(self, file_io: FileIO, paths: PathFactory, bucket_dir: str, config: WriterConfig,
                 name_prefix: str | None = None):
        self.file_io = file_io
        self.paths = paths
        self.bucket_dir = bucket_dir
        self.config = config
        self.has_key = bool(config.schema.primary_keys)
        self.file_schema = config.schema.file_arrow_schema(physical=True)
        self._rows_with_not_null_fields = [i for i, f in enumerate(self.file_schema) if has_not_null_field(f.type)]
        self.key_names = [KEY_PREFIX + f.name for f in config.schema.key_fields()] if self.has_key else []
        self.value_names = config.schema.field_names
        self.name_prefix = name_prefix
        self.delta = _sorted_integers(config.schema) if self.has_key else []
        self._deletion_vectors = bool(CoreOptions(config.schema.options).get("deletion-vectors.enabled"))
        self.leaf_paths = _leaf_paths(self.file_schema)
        self.leaves = primitive_leaves(self.file_schema)
        # the last sample's encodings, shared by the bucket's flush, compaction and purge threads
        # (a race only samples twice)
        self._sampled: dict[str, Any] | None = None
        self._sampled_rows = 0  # the rows it was taken on
        self._files_since_sample = 0

    def write(self, table: pa.Table, level: int, file_source: int = FILE_SOURCE_APPEND,
              first_sequence: int = 0) -> list[DataFileMeta]:
        """Write `table` (in file layout and, for PK tables, sorted by key), in memory whole, so
        always in large groups (IN_MEMORY_GROUP_FACTOR)."""
        return self._write_chunks(_recut([self._in_file_schema(table)], self._large_group_rows),
                                  level, file_source, first_sequence)

    def _large_group_rows(self, table: pa.Table) -> int:
        """Rows per large group: up to IN_MEMORY_GROUP_FACTOR groups' worth, as many as fill the
        target file size, never fewer than ROW_GROUP_BYTES' worth."""
        in_file = int(ARROW_BYTES_PER_FILE_BYTE * self.config.target_file_size / _bytes_per_row(table))
        large = min(row_group_rows(table, IN_MEMORY_GROUP_FACTOR), in_file)
        return min(ROLL_CHECK_ROWS, max(row_group_rows(table), large))

    def _in_file_schema(self, table: pa.Table) -> pa.Table:
        """`table` under the file schema (its field ids and nullability). Columns of the file's type
        are taken as they are, not cast: Arrow's cast of a ROW with a NOT NULL field refuses the
        nulls a null row holds there (fill_under_null_rows empties them), as Parquet's writer does."""
        if table.schema == self.file_schema and not self._rows_with_not_null_fields:
            return table
        columns = [table.column(f.name) for f in self.file_schema]
        columns = [c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, self.file_schema, strict=True)]
        for i in self._rows_with_not_null_fields:
            columns[i] = fill_under_null_rows(columns[i])
        return pa.Table.from_arrays(columns, schema=self.file_schema)

    def write_stream(self, tables: Iterable[pa.Table], level: int, file_source: int = FILE_SOURCE_APPEND,
                     first_sequence: int = 0) -> list[DataFileMeta]:
        """Write consecutive tables (each in key order after the previous) into rolling files: in
        large groups while the process has room for them (LARGE_GROUP_MERGES), else in groups of
        ROW_GROUP_BYTES."""
        streamed = (self._in_file_schema(t) for t in tables)
        with _large_group_room() as large:
            group_rows = self._large_group_rows if large else row_group_rows
            return self._write_chunks(_recut(streamed, group_rows), level, file_source, first_sequence)

    def _write_chunks(self, chunks: Iterable[pa.Table], level: int, file_source: int,
                      first_sequence: int) -> list[DataFileMeta]:
        """Write row groups (one chunk each) into files that roll at the target size."""
        files = RollingWrite(self, level, file_source)
        files.write_chunks(chunks, first_sequence)
        return files.close()

    def rolling(self, level: int = 0, file_source: int = FILE_SOURCE_APPEND) -> RollingWrite:
        """Files written across calls (see RollingWrite)."""
        return RollingWrite(self, level, file_source)

    def _open(self, first_sequence: int, level: int, first: pa.Table) -> _OpenFile:
        name = self.paths.new_changelog_file_name() if self.name_prefix == "changelog" \
            else self.paths.new_data_file_name()
        path = f"{self.bucket_dir}/{name}"
        self.file_io.mkdirs(self.bucket_dir)
        fs, _ = self.file_io.arrow_fs()
        sink = fs.open_output_stream(self.file_io.arrow_path(path))
        writer = pq.ParquetWriter(sink, self.file_schema, compression=self.config.compression,
                                  compression_level=self.config.compression_level, write_statistics=True,
                                  dictionary_pagesize_limit=DICTIONARY_PAGE_LIMIT, write_page_index=True,
                                  # DECIMAL(p <= 18) as INT32/INT64, as Paimon's and Trino's writers store it
                                  store_decimal_as_integer=True, **self._encodings(first), **self._page_size(level))
        return _OpenFile(name, path, sink, writer, first_sequence,
                         value_stats=_column_stats(self.file_schema, self.leaves, self.value_names),
                         key_stats=_column_stats(self.file_schema, self.leaves, self.key_names))

    def _encodings(self, first: pa.Table) -> dict[str, Any]:
        """The encodings of a new file: sampled from its first rows, or the last sample's when it
        was taken less than ENCODING_SAMPLE_FILES files ago on as many rows (a bucket's columns
        keep their cardinality from file to file; a wrong guess costs size or speed, never
        correctness). A few rows say little: a larger file samples again."""
        rows = min(first.num_rows, DICTIONARY_SAMPLE_ROWS)
        if self._sampled is None or self._files_since_sample >= ENCODING_SAMPLE_FILES or rows > self._sampled_rows:
            self._sampled, self._sampled_rows, self._files_since_sample = self._sample_encodings(first), rows, 0
        self._files_since_sample += 1
        return self._sampled

    def _sample_encodings(self, first: pa.Table) -> dict[str, Any]:
        """ParquetWriter arguments: the ascending integer columns DELTA_BINARY_PACKED; the columns
        whose first rows a dictionary would not shrink (unique keys, measures, free text) plain;
        the others dictionary first, falling back to plain. Strings stay PLAIN, not
        DELTA_LENGTH_BYTE_ARRAY: Paimon's Java reader misreads that encoding (values shifted after a
        null, or a failed page), and Java Paimon must read every file Strata writes."""
        encodings = dict.fromkeys(self.delta, "DELTA_BINARY_PACKED")
        plain = [name for name in first.column_names
                 if name not in encodings and _plain_is_smaller(first.column(name))]
        if not encodings and not plain:
            return {}
        return {"use_dictionary": [p for p in self.leaf_paths if p not in encodings and p not in plain],
                **({"column_encoding": encodings} if encodings else {})}

    def _page_size(self, level: int) -> dict[str, int]:
        """Pages of PAGE_ROWS rows, the same rows in every column, in level-0 files of primary-key
        tables: sorted by key, and what a key-range read merges many of (a few pages of each are
        decoded, strata.io.page_index). Other files keep Arrow's pages (up to 20k rows or 1 MB):
        each page costs a reader a decompression (small pages make full scans, Trino's and
        pyarrow's, cost more CPU), and the files above level 0 are the ones Trino reads
        (deletion-vector tables) and full compactions leave; unsorted (append) values prune no page.
        A deletion-vector table's level-0 files keep Arrow's pages too: no read looks at level 0
        there (compaction reads its files whole), and a compaction often moves a file up a level
        as it is, where Trino and every scan then read it."""
        small = self.has_key and level == 0 and not self._deletion_vectors
        return {"max_rows_per_page": PAGE_ROWS, "write_batch_size": PAGE_ROWS} if small else {}

    def _append(self, f: _OpenFile, chunk: pa.Table) -> None:
        f.writer.write_table(chunk, row_group_size=chunk.num_rows)  # a chunk is one row group (_recut)
        f.rows += chunk.num_rows
        with_min_max = self.config.stats_truncate != 0
        for stats, name in zip(f.value_stats, self.value_names, strict=True):
            stats.add(chunk.column(name), with_min_max)
        if not self.has_key:
            return
        for stats, name in zip(f.key_stats, self.key_names, strict=True):
            stats.add(chunk.column(name), True)
        if f.min_key is None:
            f.min_key = [chunk.column(k)[0].as_py() for k in self.key_names]
        f.max_key = [chunk.column(k)[-1].as_py() for k in self.key_names]
        kinds = chunk.column(VALUE_KIND)
        f.deletes += int(pc.sum(pc.is_in(kinds, pa.array([1, 3], pa.int8()))).as_py() or 0)

    def _close(self, f: _OpenFile, level: int, file_source: int) -> DataFileMeta:
        f.writer.close()
        f.sink.close()
        footer = f.writer.writer.metadata
        for stats in (*(f.value_stats if self.config.stats_truncate != 0 else ()), *f.key_stats):
            stats.add_footer(footer)
        if self.has_key:
            sequence = _ColumnStats(self.leaves[SEQUENCE_NUMBER])
            sequence.add_footer(footer)
            f.min_seq, f.max_seq = sequence.min, sequence.max
        size = self.file_io.file_size(f.path)
        schema = self.config.schema
        value_types = [fld.type.to_arrow() for fld in schema.fields]
        value_stats = _simple_stats(f.value_stats, value_types, self.config.stats_truncate)
        if self.has_key:
            key_types = [k.type.to_arrow() for k in schema.key_fields()]
            min_key = binary_row.serialize(f.min_key or [], key_types)
            max_key = binary_row.serialize(f.max_key or [], key_types)
            key_stats = _simple_stats(f.key_stats, key_types, None)
            min_seq, max_seq = f.min_seq or 0, f.max_seq or 0
        else:
            min_key = max_key = binary_row.EMPTY_ROW
            key_stats = SimpleStats.EMPTY
            min_seq, max_seq = f.first_sequence, f.first_sequence + f.rows - 1
        return DataFileMeta(
            file_name=f.name, file_size=size, row_count=f.rows, min_key=min_key, max_key=max_key,
            key_stats=key_stats, value_stats=value_stats, min_sequence_number=min_seq,
            max_sequence_number=max_seq, schema_id=schema.id, level=level, extra_files=[],
            creation_time=int(time.time() * 1000), delete_row_count=f.deletes, embedded_index=None,
            file_source=FileSource(file_source), value_stats_cols=None, external_path=None,
            first_row_id=None, write_cols=None,
        )


def _sorted_integers(schema: TableSchema) -> list[str]:
    """The integer columns of a primary-key file that (nearly) ascend: the sequence numbers (in
    arrival order), and each integer key field, as a key column and as a value column (rows are in
    key order). DELTA_BINARY_PACKED stores them as small differences: faster to write and read
    than plain or dictionary pages (a unique key never fits a dictionary), and smaller."""
    keys = [f.name for f in schema.key_fields() if _delta_type(f.type.to_arrow())]
    return [SEQUENCE_NUMBER, *(KEY_PREFIX + k for k in keys), *keys]


def _delta_type(t: pa.DataType) -> bool:
    """Types stored as INT32 / INT64 that DELTA_BINARY_PACKED encodes."""
    return pa.types.is_integer(t) or pa.types.is_date32(t) or pa.types.is_timestamp(t)


def _plain_is_smaller(column: pa.ChunkedArray) -> bool:
    """Whether a sample of the column's first rows takes fewer bytes plain than as a dictionary
    and its indices, or its dictionary alone would pass DICTIONARY_PAGE_LIMIT (see
    DICTIONARY_SAMPLE_ROWS)."""
    t = column.type
    if not _dictionary_candidate(t):
        return False
    sample = column.slice(0, DICTIONARY_SAMPLE_ROWS)
    spread = sample.take(np.arange(0, len(sample), max(1, len(sample) // PAGE_ROWS)))
    if _near_unique(sample.slice(0, PAGE_ROWS)) and _near_unique(spread):
        return True
    values = len(sample) - sample.null_count
    if pa.types.is_string(t) or pa.types.is_binary(t):
        distinct = pc.unique(sample)
        dictionary = int(pc.sum(pc.binary_length(distinct)).as_py() or 0) + 4 * len(distinct)
        plain = int(pc.sum(pc.binary_length(sample)).as_py() or 0) + 4 * values
        return _dictionary_costs_more(dictionary, len(distinct), values, plain)
    # decimals (prices, amounts) are stored as INT32/INT64 up to 18 digits
    width = (4 if t.precision <= 9 else 8 if t.precision <= 18 else t.byte_width) if pa.types.is_decimal(t) \
        else t.byte_width
    distinct_count = pc.count_distinct(sample).as_py()
    return _dictionary_costs_more(distinct_count * width, distinct_count, values, values * width)


def _near_unique(values: pa.ChunkedArray | pa.Array) -> bool:
    return bool(pc.count_distinct(values).as_py() > NEAR_UNIQUE_SHARE * (len(values) - values.null_count))


def _dictionary_candidate(t: pa.DataType) -> bool:
    """Types the sample judges; others (booleans, nested) keep Arrow's default."""
    return (pa.types.is_string(t) or pa.types.is_binary(t) or pa.types.is_decimal(t) or pa.types.is_integer(t)
            or pa.types.is_floating(t) or pa.types.is_temporal(t))


def _dictionary_costs_more(dictionary_bytes: int, distinct: int, values: int, plain_bytes: int) -> bool:
    index_bytes = values * max(1, (distinct - 1).bit_length()) / 8  # bit-packed indices
    return dictionary_bytes > DICTIONARY_PAGE_LIMIT or dictionary_bytes + index_bytes > plain_bytes


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet's dotted column paths for `schema` (nested fields have one per leaf)."""
    if not any(f.type.num_fields for f in schema):
        return schema.names
    sink = pa.BufferOutputStream()
    writer = pq.ParquetWriter(sink, schema)
    writer.close()
    meta = writer.writer.metadata
    return [meta.schema.column(i).path for i in range(meta.num_columns)]


_large_group_merges = threading.BoundedSemaphore(LARGE_GROUP_MERGES)


@contextmanager
def _large_group_room() -> Iterator[bool]:
    """Whether a streamed merge may write large groups (one of LARGE_GROUP_MERGES places, held
    until it ends), without waiting for a place: a merge that finds none writes smaller groups."""
    taken = _large_group_merges.acquire(blocking=False)
    try:
        yield taken
    finally:
        if taken:
            _large_group_merges.release()


def row_group_rows(sample: pa.Table, factor: int = 1) -> int:
    """Rows per row group for rows like `sample`'s (see ROW_GROUP_BYTES), `factor` groups' worth."""
    grains = int(factor * ROW_GROUP_BYTES / _bytes_per_row(sample)) // ROW_GROUP_ROWS
    return min(factor * MAX_ROW_GROUP_ROWS, max(1, grains) * ROW_GROUP_ROWS)


def _bytes_per_row(table: pa.Table) -> float:
    return max(1.0, table.nbytes / max(1, table.num_rows))


def _recut(tables: Iterable[pa.Table], group_rows: Callable[[pa.Table], int]) -> Iterator[pa.Table]:
    """The rows of `tables` in order, in pieces of one row group each (the last one shorter),
    however small the input tables (a compaction streams a merge of many runs; Parquet readers
    pay per row group). The group's size is `group_rows` of the first table."""
    pending: list[pa.Table] = []
    rows = 0
    piece = 0
    for table in tables:
        if table.num_rows == 0:
            continue
        piece = piece or group_rows(table)
        pending.append(table)
        rows += table.num_rows
        if rows < piece:
            continue
        whole = pa.concat_tables(pending)
        cut = rows - rows % piece
        for start in range(0, cut, piece):
            yield whole.slice(start, piece)
        pending, rows = [whole.slice(cut)], rows - cut
    if rows:
        yield pa.concat_tables(pending)


def _simple_stats(stats: list[_ColumnStats], types: list[pa.DataType], truncate: int | None) -> SimpleStats:
    mins = [_truncate_min(s.min, truncate) for s in stats]
    maxs = [_truncate_max(s.max, truncate) for s in stats]
    return SimpleStats(binary_row.serialize(mins, types), binary_row.serialize(maxs, types),
                       [s.nulls for s in stats])


class RollingWrite:
    """Files written across calls, rolling at the target size. An append bucket writes every
    flush of its buffer into one, so that a commit's rows fill files of target-file-size rather
    than one file per buffer's worth (Paimon's append writer keeps its rolling file open the
    same way). Each chunk is a row group: an open file holds no rows, only its footer's metadata."""

    def __init__(self, writer: DataFileWriter, level: int, file_source: int):
        self.writer = writer
        self.level = level
        self.file_source = file_source
        self.current: _OpenFile | None = None
        self.rolled: list[DataFileMeta] = []  # files closed at the target size, not yet taken

    def write(self, table: pa.Table, first_sequence: int) -> None:
        """Append `table` (in file layout) in large groups, as DataFileWriter.write does."""
        writer = self.writer
        self.write_chunks(_recut([writer._in_file_schema(table)], writer._large_group_rows), first_sequence)

    def write_chunks(self, chunks: Iterable[pa.Table], first_sequence: int) -> None:
        sequence = first_sequence
        for chunk in chunks:
            if self.current is None:
                self.current = self.writer._open(sequence, self.level, chunk)
            self.writer._append(self.current, chunk)
            sequence += chunk.num_rows
            if self.current.sink.tell() >= self.writer.config.target_file_size:
                self._roll()

    def _roll(self) -> None:
        assert self.current is not None
        current, self.current = self.current, None
        self.rolled.append(self.writer._close(current, self.level, self.file_source))

    def close(self) -> list[DataFileMeta]:
        """Close the open file; every file written since the last close."""
        if self.current is not None:
            self._roll()
        files, self.rolled = self.rolled, []
        return files
