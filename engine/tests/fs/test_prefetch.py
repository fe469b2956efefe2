"""Whole-file prefetch (strata.fs.prefetch) on every storage kind, and a table read through it."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata
from strata.fs import FileIO
from strata.fs.prefetch import PrefetchedFileIO, prefetching, within_budget


def _files(io: FileIO, warehouse: str, sizes: list[int]) -> list[tuple[str, int]]:
    out = []
    for i, size in enumerate(sizes):
        path = f"{warehouse}/f{i}"
        io.write_bytes(path, bytes([i]) * size)
        out.append((path, size))
    return out


def test_local_storage_is_never_prefetched(warehouse_io: FileIO, warehouse: str, storage: str) -> None:
    files = _files(warehouse_io, warehouse, [10, 20])
    io = prefetching(warehouse_io, files)
    assert isinstance(io, PrefetchedFileIO) == (storage == "minio")
    for i, (path, size) in enumerate(files):  # either way the same bytes
        assert io.open_input_file(path).read() == bytes([i]) * size
        assert io.open_input_file(path).read() == bytes([i]) * size  # a second open reads the store


def test_budget_bounds_the_fetched_files() -> None:
    files = [("a", 100), ("b", 100), ("c", 100)]
    assert within_budget(files, 250) == ["a", "b"]
    assert within_budget(files, 300) == ["a", "b", "c"]
    assert within_budget(files, 10) == ["a"]  # one file over the budget: still that one


def test_close_drops_the_unopened_fetches(warehouse_io: FileIO, warehouse: str) -> None:
    files = _files(warehouse_io, warehouse, [100, 100])
    io = prefetching(warehouse_io, files)
    assert io.open_input_file(files[0][0]).read() == bytes([0]) * 100
    if isinstance(io, PrefetchedFileIO):
        assert list(io._pending) == [files[1][0]]
        io.close()
        assert io._pending == {}
    assert io.open_input_file(files[1][0]).read() == bytes([1]) * 100  # closed: plain reads


def test_missing_file_is_file_not_found_when_opened(warehouse_io: FileIO, warehouse: str) -> None:
    io = prefetching(warehouse_io, [(f"{warehouse}/nope", 10)])
    with pytest.raises(FileNotFoundError):
        io.open_input_file(f"{warehouse}/nope")


def test_merged_read_through_prefetch_equals_filtered_ranged_read(catalog: strata.Catalog) -> None:
    """Unfiltered reads prefetch on object stores, filtered ones read ranges: same rows either way."""
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    table = catalog.create_table("db.p", schema, primary_keys=["id"], options={"bucket": "2", "write-only": "true"})
    for round_ in range(4):  # four level-0 runs per bucket, each overwriting the last
        ids = list(range(round_, 200))
        table.write(pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{round_}-{i}" for i in ids]}, schema=schema))
    expected = {i: f"{min(i, 3)}-{i}" for i in range(200)}
    full = table.to_arrow()
    assert dict(zip(full.column("id").to_pylist(), full.column("v").to_pylist(), strict=True)) == expected
    batches = pa.Table.from_batches(list(table.to_batches()), schema=full.schema)
    assert batches.sort_by("id").equals(full.sort_by("id"))
    filtered = table.to_arrow(filter=strata.col("id") >= 150)
    assert sorted(filtered.column("id").to_pylist()) == list(range(150, 200))
