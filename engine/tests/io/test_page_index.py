"""Page-level pruning: data files carry a page index, and a narrow key range decodes a few pages
of a large row group (the same rows as decoding the whole group and filtering)."""

from __future__ import annotations

import copy
import datetime
import io
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata import SchemaChange
from strata.expressions.literals import bind
from strata.io import page_index
from strata.io.data_file_reader import ROW_POSITION, ColumnMapping, read_file
from strata.io.page_index import PAGE_ROWS, file_pages, read_rows, selected_rows
from strata.io.thrift_compact import decode_struct, encode_struct

ROWS = 20 * PAGE_ROWS


class _CountingFile(io.RawIOBase):
    """A local file that counts the bytes read from it."""

    def __init__(self, path: str):
        self.file = open(path, "rb")  # noqa: SIM115 (closed with this object)
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.file.seek(offset, whence)

    def tell(self) -> int:
        return self.file.tell()

    def readinto(self, buffer) -> int:
        n = self.file.readinto(buffer)
        self.read_bytes += n or 0
        return n or 0

    def close(self) -> None:
        self.file.close()
        super().close()


def _page_starts(pages: page_index.FilePages, group: int, column: int) -> np.ndarray:
    """The rows a column chunk's pages start at."""
    located = page_index._column_pages(pages, group, column)
    assert located is not None
    return located.first_rows


def _pk_table(tmp_path):
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()),
                        pa.field("v", pa.float64())])
    table = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1"})
    rng = np.random.default_rng(3)
    ids = np.arange(0, 2 * ROWS, 2)
    rows = pa.table({"id": ids, "name": pa.array([f"n{i:09d}" for i in rng.permutation(ROWS)]),
                     "v": rng.random(ROWS)}, schema=schema)
    table.write(rows)
    return table, rows


def test_data_files_have_a_page_index_with_aligned_pages(tmp_path) -> None:
    table, _ = _pk_table(tmp_path)
    [split] = table.scan()
    [f] = split.files
    path = split.file_path(f)
    parquet = pq.ParquetFile(path)
    assert parquet.metadata.num_row_groups == 1  # one large group, as Trino wants
    with table.file_io.open_input_file(path) as source:
        pages = file_pages(source, path, parquet.metadata)
        assert pages is not None
        layouts = {_page_starts(pages, 0, c).tobytes() for c in range(parquet.metadata.num_columns)}
    assert len(layouts) == 1  # every column's pages start at the same rows (dictionary fall-backs too)
    [starts] = [np.frombuffer(layout, dtype=np.int64) for layout in layouts]
    assert list(starts) == list(range(0, ROWS, PAGE_ROWS))


def test_key_range_reads_a_few_pages(tmp_path) -> None:
    table, rows = _pk_table(tmp_path)
    [split] = table.scan()
    [f] = split.files
    path = split.file_path(f)
    lo, hi = 2 * (7 * PAGE_ROWS + 100), 2 * (7 * PAGE_ROWS + 300)  # inside the 8th page
    prune = bind(strata.col("id").between(lo, hi), table.schema)
    mapping = ColumnMapping(table.schema, table.schema, ["_KEY_id", "_VALUE_KIND", "name", "v"])
    counted = _CountingFile(path)

    class _Counting(type(table.file_io)):  # type: ignore[misc]
        def open_input_file(self, p: str) -> pa.NativeFile:
            return pa.PythonFile(counted, mode="r")

    counting = copy.copy(table.file_io)
    counting.__class__ = _Counting
    batches = list(read_file(counting, path, mapping, prune, {"id": "_KEY_id"}))
    got = pa.concat_tables(batches)
    assert got.num_rows == PAGE_ROWS  # the one page holding the range, not the group's ROWS rows
    assert got.column("_KEY_id").to_pylist() == rows.column("id").to_pylist()[7 * PAGE_ROWS:8 * PAGE_ROWS]
    assert got.column("name").to_pylist() == rows.column("name").slice(7 * PAGE_ROWS, PAGE_ROWS).to_pylist()
    assert counted.read_bytes < f.file_size / 5  # a page of each column, the footer and its index

    result = table.to_arrow(filter=strata.col("id").between(lo, hi))
    expected = rows.filter((pa.compute.field("id") >= lo) & (pa.compute.field("id") <= hi))
    assert result.sort_by("id").equals(expected)


def test_positions_of_page_reads_are_file_rows(tmp_path) -> None:
    """Deletion vectors address rows by their position in the file: a read that skips pages still
    numbers its rows from the file's start."""
    table, _ = _pk_table(tmp_path)
    [split] = table.scan()
    [f] = split.files
    path = split.file_path(f)
    lo, hi = 2 * (3 * PAGE_ROWS - 5), 2 * (3 * PAGE_ROWS + 5)  # across a page boundary
    prune = bind(strata.col("id").between(lo, hi), table.schema)
    mapping = ColumnMapping(table.schema, table.schema, ["_KEY_id"])
    deleted = np.array([3 * PAGE_ROWS - 1, 3 * PAGE_ROWS + 2], dtype=np.int64)
    got = pa.concat_tables(read_file(table.file_io, path, mapping, prune, {"id": "_KEY_id"}, positions=True,
                                     deleted=deleted))
    assert got.num_rows == 2 * PAGE_ROWS - 2  # two pages, less the two deleted rows
    positions = got.column(ROW_POSITION).to_numpy()
    assert positions[0] == 2 * PAGE_ROWS and positions[-1] == 4 * PAGE_ROWS - 1
    assert not np.isin(deleted, positions).any()
    assert (got.column("_KEY_id").to_numpy() == 2 * positions).all()  # id = 2 x row


def _foreign_file(tmp_path) -> tuple[str, pa.Table]:
    """A file of another writer: pages of 2500 rows, dictionaries falling back mid-page (so that
    columns' pages start at different rows), nulls, whole null pages, several row groups."""
    n = 30_000
    rng = np.random.default_rng(11)
    ints = np.sort(rng.integers(0, 1_000_000, n))
    strings = pa.array([None if i % 7 == 0 else f"s{v:07d}" for i, v in enumerate(ints)])
    mostly_null = pa.array([None] * 12_000 + list(range(n - 12_000)), pa.int32())
    table = pa.table({"k": ints, "s": strings, "n": mostly_null,
                      "d": pa.array(ints.astype(np.int32) // 100, pa.int32()).cast(pa.date32()),
                      "t": pa.array(ints * 1_000_000, pa.int64()).cast(pa.timestamp("us")),
                      "x": rng.random(n)})
    path = str(tmp_path / "foreign.parquet")
    pq.write_table(table, path, row_group_size=16_000, write_page_index=True, max_rows_per_page=2500,
                   dictionary_pagesize_limit=4096)
    return path, table


@pytest.mark.parametrize("predicate", [
    strata.col("k").between(400_000, 401_000),
    strata.col("k") == 123_456,
    strata.col("k") < 5_000,
    strata.col("s").between("s0500000", "s0502000"),
    strata.col("n").is_null() & (strata.col("k") > 990_000),
    strata.col("n").is_not_null() & (strata.col("k") < 300_000),
    strata.col("d") == datetime.date(1970, 1, 1) + datetime.timedelta(days=7000),
    strata.col("t") >= datetime.datetime(1970, 1, 12, 13, 0),
    (strata.col("k") < 2_000) | (strata.col("k") > 998_000),
])
def test_selected_pages_hold_every_matching_row(tmp_path, predicate) -> None:
    path, table = _foreign_file(tmp_path)
    prune = predicate  # unbound: the literals are already of the columns' Python types
    expected = table.filter(predicate.to_arrow())
    parquet = pq.ParquetFile(path)
    columns = {name: (i, table.schema.field(name).type) for i, name in enumerate(table.column_names)}
    got = []
    with pa.OSFile(path) as source:
        pages = file_pages(source, path, parquet.metadata)
        assert pages is not None
        start = 0
        for g in range(parquet.metadata.num_row_groups):
            group_rows = parquet.metadata.row_group(g).num_rows
            runs = selected_rows(pages, g, group_rows, prune, {f: columns[f] for f in prune.fields()})
            if runs is None:
                runs = [(0, group_rows)]  # pages prune too little: the whole group
            for offset, batch in read_rows(source, pages, parquet, g, runs, table.column_names):
                assert batch.equals(table.slice(start + offset, batch.num_rows).to_batches()[0]
                                    if batch.num_rows else batch)
                got.append(batch)
            start += group_rows
        layouts = {_page_starts(pages, 0, c).tobytes() for c in range(table.num_columns)}
    assert len(layouts) > 1  # the columns' pages start at different rows
    selected = pa.Table.from_batches(got, schema=table.schema)
    assert selected.num_rows < table.num_rows / 4  # pages pruned, not whole groups
    assert selected.filter(predicate.to_arrow()).equals(expected.combine_chunks())


def test_files_without_a_page_index_read_as_before(tmp_path) -> None:
    path = str(tmp_path / "plain.parquet")
    pq.write_table(pa.table({"k": np.arange(10_000)}), path)
    parquet = pq.ParquetFile(path)
    with pa.OSFile(path) as source:
        assert file_pages(source, path, parquet.metadata) is None


def test_footer_round_trips_through_the_thrift_codec(tmp_path) -> None:
    path, _ = _foreign_file(tmp_path)
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<I", data[-8:-4])[0]
    footer = data[-8 - length:-8]
    decoded, end = decode_struct(footer)
    assert end == length
    assert encode_struct(decoded) == footer


def test_page_reads_across_schema_versions_and_stores(warehouse: str, warehouse_options: dict[str, str]) -> None:
    """A filter on a column renamed and widened since the file was written, and on a column added
    since (all null in the file), prunes the old file's pages through the field ids; on an object
    store the pages come in ranged reads."""
    catalog = strata.load_catalog(warehouse, **warehouse_options)
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("a", pa.int32()),
                        pa.field("s", pa.string())])
    table = catalog.create_table("db.t", schema, options={"bucket": "-1"})  # every filter prunes
    ids = np.arange(ROWS)
    table.write(pa.table({"id": ids, "a": ids.astype(np.int32), "s": [f"s{i}" for i in ids]}, schema=schema))
    table = table.alter(SchemaChange.rename_column("a", "b"), SchemaChange.update_column_type("b", "BIGINT"),
                        SchemaChange.add_column("z", "STRING"))
    lo, hi = 5 * PAGE_ROWS + 10, 5 * PAGE_ROWS + 40
    page_index._CACHE.clear()
    got = table.to_arrow(filter=strata.col("b").between(lo, hi) & strata.col("z").is_null())
    assert got.column("id").to_pylist() == list(range(lo, hi + 1))
    [split] = table.scan()
    assert [key[0] for key in page_index._CACHE] == [split.file_path(split.files[0])]  # its page index read
    assert got.column("s").to_pylist() == [f"s{i}" for i in range(lo, hi + 1)]
    assert table.to_arrow(filter=strata.col("z") == "x").num_rows == 0


def test_compacted_files_keep_larger_pages(tmp_path) -> None:
    """Files above level 0 (what Trino reads of a deletion-vector table, what a full compaction
    leaves) have Arrow's pages: small pages cost every scan a decompression each."""
    table, rows = _pk_table(tmp_path)
    table.write(rows.slice(0, 10))  # a second run: the full compaction rewrites, not only relabels
    table.compact(full=True)
    [split] = table.scan()
    [f] = split.files
    assert f.level > 0
    path = split.file_path(f)
    parquet = pq.ParquetFile(path)
    with table.file_io.open_input_file(path) as source:
        pages = file_pages(source, path, parquet.metadata)
        assert pages is not None
        starts = _page_starts(pages, 0, 0)
    assert np.diff(starts).max() > PAGE_ROWS  # (the first page ends where its dictionary fell back)
    lo, hi = 2 * (9 * PAGE_ROWS), 2 * (9 * PAGE_ROWS + 50)
    got = table.to_arrow(filter=strata.col("id").between(lo, hi))
    assert got.column("id").to_pylist() == list(range(lo, hi + 1, 2))


def test_footers_are_decoded_once_per_file(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key range read served by the page index decodes a file's footer once: later reads open no
    Parquet reader on it. A file of another size at the same path is a new file, read afresh."""
    from strata.io import data_file_reader

    opened: list[int] = []

    class CountingReader(data_file_reader.ParquetReader):
        def open(self, *args, **kwargs):
            opened.append(1)
            return super().open(*args, **kwargs)

    monkeypatch.setattr(data_file_reader, "ParquetReader", CountingReader)
    table, rows = _pk_table(tmp_path)
    lo, hi = 2 * PAGE_ROWS + 6, 2 * PAGE_ROWS + 20
    in_range = strata.col("id").between(lo, hi)
    assert table.to_arrow(filter=in_range).column("id").to_pylist() == list(range(lo, hi + 1, 2))
    first = len(opened)
    assert first >= 1
    assert table.to_arrow(filter=in_range).num_rows == 8
    assert len(opened) == first  # footer and page index kept: no reader opened
    assert table.to_arrow().num_rows == ROWS  # a whole file decodes through pyarrow's reader
    assert len(opened) == first + 1

    [split] = table.scan()
    path = split.file_path(split.files[0])
    written = pq.read_table(path)
    pq.write_table(written.slice(0, ROWS // 2), path)  # the same path, another file: half its rows
    assert table.to_arrow().column("id").to_pylist() == rows.column("id").to_pylist()[: ROWS // 2]


def test_integer_ranges_select_the_pages_the_general_path_selects(tmp_path) -> None:
    """A range of integers (what a key range read asks) is answered for all pages at once; it keeps
    the same pages as asking the predicate about halves of the row group, nulls and all-null pages
    included."""
    from strata.expressions import integer_range

    path, table = _foreign_file(tmp_path)
    parquet = pq.ParquetFile(path)
    columns = {name: (i, table.schema.field(name).type) for i, name in enumerate(table.column_names)}
    rng = np.random.default_rng(5)
    with pa.OSFile(path) as source:
        pages = file_pages(source, path, parquet.metadata)
        assert pages is not None
        for _ in range(200):
            name = str(rng.choice(["k", "n"]))
            lo = int(rng.integers(-10, 1_000_010))
            predicate = [strata.col(name).between(lo, lo + int(rng.integers(0, 20_000))), strata.col(name) == lo,
                         strata.col(name) < lo, strata.col(name) >= lo][int(rng.integers(0, 4))]
            assert integer_range(predicate) is not None
            for g in range(parquet.metadata.num_row_groups):
                rows = parquet.metadata.row_group(g).num_rows
                fast = selected_rows(pages, g, rows, predicate, {name: columns[name]})
                general = selected_rows(pages, g, rows, predicate | predicate, {name: columns[name]})
                assert fast == general, (predicate, g)
