"""Format-2 position-delete files (strata.iceberg.manifests.position_delete_file): the layout Trino
skips by (one data file, sorted positions, exact file_path and pos bounds), read back with pyarrow."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from strata.fs import FileIO, file_io_for
from strata.iceberg import manifests as im

DATA = "s3://bucket/db.db/t/dt=1/bucket-0/data-7.parquet"


def _write(tmp: str, positions: np.ndarray) -> tuple[FileIO, str, im.DataFile]:
    io = file_io_for(tmp, {})
    target = f"{tmp}/deletes.parquet"
    return io, target, im.position_delete_file(io, target, DATA, positions, ("2026-11-27",))


def test_positions_are_sorted_bounded_and_tied_to_one_data_file(tmp_path: Path) -> None:
    io, target, entry = _write(str(tmp_path), np.array([70_000, 3, 5, 2**33, 5, 9]))
    rows = pq.read_table(io.arrow_fs()[0].open_input_file(io.arrow_path(target)))
    assert rows.column("pos").to_pylist() == [3, 5, 9, 70_000, 2**33], "sorted, each position once"
    assert set(rows.column("file_path").to_pylist()) == {DATA}
    fields = pq.read_schema(io.arrow_fs()[0].open_input_file(io.arrow_path(target)))
    assert [f.metadata[b"PARQUET:field_id"] for f in fields] == [str(im.FILE_PATH_ID).encode(), str(im.POS_ID).encode()]
    assert str(fields.field("file_path").type) == "string", "a plain string column for readers"
    assert entry.content == im.DELETES and entry.referenced_data_file == DATA and entry.record_count == 5
    assert entry.lower_bounds[im.FILE_PATH_ID] == entry.upper_bounds[im.FILE_PATH_ID] == DATA.encode()
    assert struct.unpack("<q", entry.lower_bounds[im.POS_ID]) == (3,)
    assert struct.unpack("<q", entry.upper_bounds[im.POS_ID]) == (2**33,)
    assert entry.null_counts == {im.FILE_PATH_ID: 0, im.POS_ID: 0}
    assert entry.file_size == io.file_size(target) and entry.partition == ("2026-11-27",)


def test_no_positions_have_no_pos_bounds(tmp_path: Path) -> None:
    _, _, entry = _write(str(tmp_path), np.empty(0, np.int64))
    assert entry.record_count == 0 and im.POS_ID not in entry.lower_bounds and im.POS_ID not in entry.upper_bounds
