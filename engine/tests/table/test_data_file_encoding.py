"""Data files keep Parquet dictionaries only where they pay: low- and mid-cardinality columns keep
them, high-cardinality ones (whose first rows a dictionary would not shrink) are plain (strings
too: Paimon's Java reader misreads DELTA_LENGTH_BYTE_ARRAY), and the integer columns of primary-key
files that ascend (keys, sequence numbers) are delta-encoded."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.io import data_file_writer
from strata.io.data_file_writer import ROW_GROUP_ROWS, row_group_rows
from strata.io.paths import PathFactory
from strata.table.write import TableWrite

ROWS = 40_000  # more than one row group (32k rows)


def cents(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    return pa.array([Decimal(int(v)).scaleb(-2) for v in values], kind)


def test_dictionary_only_for_low_cardinality_columns(tmp_path) -> None:
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.float64()),
                        pa.field("kind", pa.string()), pa.field("text", pa.string()),
                        pa.field("few", pa.int64()), pa.field("supplier", pa.int64()), pa.field("part", pa.int64()),
                        pa.field("repeats", pa.int64()), pa.field("cycle", pa.int64()),
                        pa.field("price", pa.decimal128(15, 2)),
                        pa.field("rate", pa.decimal128(4, 2)), pa.field("big", pa.decimal128(30, 2))])
    table = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1"})
    rng = np.random.default_rng(7)
    rows = pa.table({"id": np.arange(ROWS), "v": rng.random(ROWS),
                     "kind": pa.array(["red", "green", "blue"] * (ROWS // 3) + ["red"] * (ROWS % 3)),
                     "text": pa.array([f"note {x:012d}" for x in rng.integers(0, 10**12, ROWS)]),
                     "few": rng.integers(0, 500, ROWS), "supplier": rng.integers(0, 10_000, ROWS),
                     "part": rng.integers(0, 200_000, ROWS), "repeats": np.arange(ROWS) // 4,
                     "cycle": np.arange(ROWS) % 9_000,
                     "price": cents(rng.integers(0, 10**9, ROWS), pa.decimal128(15, 2)),
                     "rate": cents(rng.integers(0, 11, ROWS), pa.decimal128(4, 2)),
                     "big": cents(rng.integers(0, 10**9, ROWS), pa.decimal128(30, 2))}, schema=schema)
    table.write(rows)
    [split] = table.scan()
    [data_file] = split.files
    metadata = pq.ParquetFile(f"{split.bucket_path}/{data_file.file_name}").metadata
    group = metadata.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}

    kind = columns["kind"]
    assert "RLE_DICTIONARY" in kind.encodings and kind.total_uncompressed_size < 20_000  # 32k rows of 3 values
    # 500 values fit a dictionary page: kept, as for "kind"
    assert "RLE_DICTIONARY" in columns["few"].encodings
    # TPC-H's supplier keys (10k values): a dictionary and 14-bit indices are a third of the plain
    # values, so kept, as Paimon's and Trino's writers keep it; over 200k part keys it is not
    assert "RLE_DICTIONARY" in columns["supplier"].encodings and columns["supplier"].has_dictionary_page
    assert columns["part"].encodings == ("RLE", "PLAIN") and not columns["part"].has_dictionary_page
    # distinct in a wide window but not in the first rows (sorted keys, each 4 times), and the
    # reverse (a column cycling through 9,000 values): both keep their dictionaries
    for name in ("repeats", "cycle"):
        assert "RLE_DICTIONARY" in columns[name].encodings, name
    # unique values: Arrow would build a dictionary for the first 1 MB of them; a dictionary of
    # their first rows is larger than the rows, so none is tried
    assert columns["v"].encodings == ("RLE", "PLAIN") and not columns["v"].has_dictionary_page
    assert columns["text"].encodings == ("RLE", "PLAIN") and not columns["text"].has_dictionary_page
    # measures: distinct decimals are plain from the first page (a dictionary was tried, then
    # abandoned, in every column chunk), a decimal of 11 values keeps its dictionary
    for name in ("price", "big"):
        assert columns[name].encodings == ("RLE", "PLAIN") and not columns[name].has_dictionary_page, name
    assert "RLE_DICTIONARY" in columns["rate"].encodings
    for name in ("id", "_KEY_id", "_SEQUENCE_NUMBER"):
        # integers in key order: stored as small differences, never in a dictionary
        assert columns[name].encodings == ("RLE", "DELTA_BINARY_PACKED") and not columns[name].has_dictionary_page, name
    assert columns["id"].total_compressed_size < 1000  # 40k consecutive keys: one delta, bit width 0
    assert table.to_arrow().sort_by("id").equals(rows)  # both encodings read back exactly


def test_a_compaction_of_small_runs_writes_full_row_groups(tmp_path, monkeypatch) -> None:
    """A merge streams many small sorted pieces; the file still has full row groups (a reader pays
    per row group), not one per piece."""
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 0)  # groups of ROW_GROUP_ROWS, the smallest
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
    table = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1"})
    for start in range(0, ROWS, 5_000):  # interleaved keys: the merge alternates between the runs
        ids = np.arange(start // 5_000, ROWS, 8)
        table.write(pa.table({"id": ids, "v": ids}, schema=schema))
    table.compact(full=True)
    [split] = table.scan()
    [data_file] = split.files
    metadata = pq.ParquetFile(f"{split.bucket_path}/{data_file.file_name}").metadata
    groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert groups == [ROW_GROUP_ROWS, ROWS - ROW_GROUP_ROWS]


def test_row_groups_hold_about_row_group_bytes(tmp_path, monkeypatch) -> None:
    """Narrow rows make few large row groups, wide rows more, smaller ones: each a whole number of
    ROW_GROUP_ROWS near IN_MEMORY_GROUP_FACTOR x ROW_GROUP_BYTES of Arrow data for a table written
    whole (a scan pays per group and per request), and for a streamed merge while the process has
    room for it; near ROW_GROUP_BYTES for a merge that finds LARGE_GROUP_MERGES others holding
    large groups. Scaled down 32x in bytes and rows, so that the test writes megabytes."""
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 1024 * 1024)
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_ROWS", 1024)
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    rows = 30_000
    narrow = pa.table({"id": np.arange(rows), "v": np.arange(rows)})
    wide = narrow.append_column("text", pa.array(np.char.add("x" * 400, np.arange(rows).astype(str)).tolist()))
    for name, data in (("narrow", narrow), ("wide", wide)):
        table = catalog.create_table(f"db.{name}", data.schema, options={"bucket": "-1"})
        table.write(data)
        groups = _row_groups(table)
        factor = data_file_writer.IN_MEMORY_GROUP_FACTOR
        expected = row_group_rows(data, factor)
        assert groups[:-1] == [expected] * (len(groups) - 1) and 0 < groups[-1] <= expected, (name, groups)
        assert expected % 1024 == 0
        if name == "narrow":
            assert groups == [rows]  # 16 bytes a row: 64k rows a group, one group
            continue
        assert len(groups) == -(-rows // expected) > 2  # about 410 bytes a row: 10k rows a group
        assert factor * 512 * 1024 <= expected * wide.nbytes / rows <= factor * 1024 * 1024
        table.write(data)
        table.compact(full=True)  # a merge of the two files, streamed, with room: large groups
        assert _row_groups(table) == [expected] * (2 * rows // expected) + [2 * rows % expected]
        table.write(data)
        with data_file_writer._large_group_room() as first, data_file_writer._large_group_room() as second:
            assert first and second  # two merges of the process hold large groups: no room for a third
            table.compact(full=True)
        streamed = _row_groups(table)
        assert streamed[:-1] == [row_group_rows(data)] * (len(streamed) - 1) and len(streamed) > 3 * len(groups)


def test_a_failed_merge_gives_back_its_room_for_large_groups(tmp_path) -> None:
    """A merge that fails midway leaves the process's room for large groups as it found it."""
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64())])
    table = catalog.create_table("db.t", schema, options={"bucket": "-1"})
    writer = data_file_writer.DataFileWriter(table.store.file_io, PathFactory(table.path), str(tmp_path / "out"),
                                             TableWrite(table.store).config)

    def failing() -> Iterator[pa.Table]:
        yield pa.table({"id": [1]}, schema=schema)
        raise OSError("the input went away")

    with pytest.raises(OSError, match="went away"):
        writer.write_stream(failing(), level=1)
    with data_file_writer._large_group_room() as first, data_file_writer._large_group_room() as second:
        assert first and second  # both places free again


def _row_groups(table: strata.Table) -> list[int]:
    [split] = table.scan()
    [data_file] = split.files
    metadata = pq.ParquetFile(f"{split.bucket_path}/{data_file.file_name}").metadata
    return [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]


def test_a_writer_samples_cardinality_every_few_files(tmp_path) -> None:
    """A bucket's writer reuses its last sample for ENCODING_SAMPLE_FILES files, then samples
    again: a column that turned low-cardinality gets its dictionary back."""
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("text", pa.string())])
    table = catalog.create_table("db.t", schema, primary_keys=["id"],
                                 options={"bucket": "1", "write-only": "true"})
    writer, commit = table.new_write("w"), table.new_commit("w")

    def encodings(rows: int, unique: bool) -> tuple:
        start = int(writer.commits_prepared) * rows
        text = [f"note {start + i:012d}" if unique else "same" for i in range(rows)]
        writer.write_arrow(pa.table({"id": np.arange(start, start + rows), "text": text}, schema=schema))
        [message] = writer.prepare_commit()
        commit.commit([message])
        [written] = message.new_files
        path = f"{table.path}/bucket-0/{written.file_name}"
        group = pq.ParquetFile(path).metadata.row_group(0)
        [column] = [group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema == "text"]
        return column.encodings

    # a sample of a few rows holds only until a file with more rows comes
    assert "RLE_DICTIONARY" in encodings(100, unique=False)
    assert encodings(5_000, unique=True) == ("RLE", "PLAIN")
    # the sample of a full page of rows still holds: no dictionary, though every value is the same
    for _ in range(data_file_writer.ENCODING_SAMPLE_FILES - 1):
        assert encodings(5_000, unique=False) == ("RLE", "PLAIN")
    assert "RLE_DICTIONARY" in encodings(5_000, unique=False)  # sampled again
