"""LocalFileIO: write_new publishes atomically and never overwrites, even under a race."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from strata.fs import LocalFileIO, file_io_for


@pytest.fixture
def io() -> LocalFileIO:
    return LocalFileIO()


def test_write_new_creates_then_refuses(io: LocalFileIO, tmp_path: Path) -> None:
    target = str(tmp_path / "snapshot" / "snapshot-1")
    assert io.write_new(target, b"first")
    assert not io.write_new(target, b"second")
    assert io.read_bytes(target) == b"first"
    assert os.listdir(tmp_path / "snapshot") == ["snapshot-1"]  # no temp file left behind


def test_write_new_does_not_replace_a_file_written_otherwise(io: LocalFileIO, tmp_path: Path) -> None:
    target = str(tmp_path / "f")
    io.write_bytes(target, b"plain")
    assert not io.write_new(target, b"new")
    assert io.read_bytes(target) == b"plain"


def test_write_new_accepts_file_uris(io: LocalFileIO, tmp_path: Path) -> None:
    target = f"file://{tmp_path}/a/b"
    assert io.write_new(target, b"x")
    assert not io.write_new(target, b"y")
    assert io.exists(target) and io.read_bytes(target) == b"x"


@pytest.mark.parametrize("round_", range(5))
def test_concurrent_write_new_has_exactly_one_winner(io: LocalFileIO, tmp_path: Path, round_: int) -> None:
    target = str(tmp_path / "snapshot-7")
    n = 16
    barrier = threading.Barrier(n)

    def attempt(i: int) -> bool:
        barrier.wait()
        return io.write_new(target, f"writer-{i}".encode() * 1000)

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(attempt, range(n)))
    assert results.count(True) == 1
    winner = results.index(True)
    assert io.read_bytes(target) == f"writer-{winner}".encode() * 1000
    assert os.listdir(tmp_path) == ["snapshot-7"]


def test_write_bytes_replaces_whole_file(io: LocalFileIO, tmp_path: Path) -> None:
    target = str(tmp_path / "LATEST")
    io.write_bytes(target, b"1")
    io.write_bytes(target, b"22")
    assert io.read_bytes(target) == b"22"
    assert io.file_size(target) == 2


def test_listing_deleting_and_missing_paths(io: LocalFileIO, tmp_path: Path) -> None:
    base = str(tmp_path / "t")
    io.mkdirs(f"{base}/bucket-0")
    io.write_bytes(f"{base}/schema-0", b"{}")
    listed = {(s.path.rsplit("/", 1)[-1], s.is_dir) for s in io.list_status(base)}
    assert listed == {("bucket-0", True), ("schema-0", False)}
    assert io.list_status(str(tmp_path / "missing")) == []
    assert io.list_status(f"{base}/schema-0") == []  # a file has no children
    with pytest.raises(FileNotFoundError):
        io.read_bytes(str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError):
        io.file_size(str(tmp_path / "missing"))
    io.delete(f"{base}/schema-0")
    io.delete(f"{base}/schema-0")  # deleting a missing file is fine
    io.delete_dir(base)
    assert not io.exists(base)


def test_file_io_for_dispatches_by_scheme(tmp_path: Path) -> None:
    assert isinstance(file_io_for(str(tmp_path)), LocalFileIO)
    assert not file_io_for(str(tmp_path)).is_object_store
    s3 = file_io_for("s3://bucket/warehouse", {"s3.endpoint": "http://127.0.0.1:1", "s3.access-key": "a",
                                               "s3.secret-key": "b", "s3.conditional-put": "false"})
    assert s3.is_object_store and type(s3).__name__ == "S3FileIO"
    assert s3.arrow_path("s3://bucket/warehouse/db.db/t/x.parquet") == "bucket/warehouse/db.db/t/x.parquet"
