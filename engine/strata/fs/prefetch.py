"""Whole-file prefetch for reads from object stores.

Reading a Parquet file through a seekable S3 stream costs several serialized round trips (size,
footer, then the column chunks), and a merged read opens the files of a split one after another.
``PrefetchedFileIO`` instead starts one GET per file for all the files of a split at once, on a
shared pool, and serves ``open_input_file`` from memory as soon as that file has arrived: the
round trips overlap each other and the merge of the files already there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs

from strata.fs.file_io import FileIO, FileStatus

FETCH_THREADS = 16  # GETs in flight across all readers of the process: latency-bound, not CPU-bound
DEFAULT_BUDGET_BYTES = 256 << 20  # per split: larger splits read their remaining files as ranged reads

_pool: list[ThreadPoolExecutor] = []  # created on first use, shared by every reader
_pool_lock = threading.Lock()
os.register_at_fork(after_in_child=_pool.clear)  # a forked child has the pool's object, not its threads


def fetch_pool() -> ThreadPoolExecutor:
    """The process's pool for latency-bound reads from object stores."""
    with _pool_lock:
        if not _pool:
            _pool.append(ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="strata-fetch"))
        return _pool[0]


def prefetching(base: FileIO, files: Sequence[tuple[str, int]],
                budget_bytes: int = DEFAULT_BUDGET_BYTES) -> FileIO:
    """`base` itself for local storage; on an object store, a FileIO that fetched `files` ((path, size)
    pairs, in the order they will be read) as whole objects, up to `budget_bytes` in total."""
    if not base.is_object_store or not files:
        return base
    return PrefetchedFileIO(base, within_budget(files, budget_bytes))


def within_budget(files: Sequence[tuple[str, int]], budget_bytes: int) -> list[str]:
    """The leading files whose sizes add up to at most `budget_bytes` (at least the first one)."""
    chosen: list[str] = []
    total = 0
    for path, size in files:
        if total + size > budget_bytes and chosen:
            break
        chosen.append(path)
        total += size
    return chosen


class PrefetchedFileIO(FileIO):
    """`base`, except that each of `paths` is fetched in one GET (started now) and its first
    ``open_input_file`` is served from memory; the buffer is released once handed out."""

    def __init__(self, base: FileIO, paths: Sequence[str]):
        self.base = base
        pool = fetch_pool()
        self._pending: dict[str, Future[bytes]] = {p: pool.submit(base.read_bytes, p) for p in dict.fromkeys(paths)}
        self._lock = threading.Lock()

    def open_input_file(self, path: str) -> pa.NativeFile:
        with self._lock:
            pending = self._pending.pop(path, None)
        if pending is None:
            return self.base.open_input_file(path)
        return pa.BufferReader(pending.result())  # re-raises the fetch's error (FileNotFoundError, OSError)

    def close(self) -> None:
        """Drop the fetches nobody opened (a read that stopped early)."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.cancel()

    # -- everything else is the wrapped FileIO ---------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        return self.base.read_bytes(path)

    def write_bytes(self, path: str, data: bytes) -> None:
        self.base.write_bytes(path, data)

    def write_new(self, path: str, data: bytes) -> bool:
        return self.base.write_new(path, data)

    def exists(self, path: str) -> bool:
        return self.base.exists(path)

    def delete(self, path: str) -> None:
        self.base.delete(path)

    def delete_dir(self, path: str) -> None:
        self.base.delete_dir(path)

    def list_status(self, path: str) -> list[FileStatus]:
        return self.base.list_status(path)

    def mkdirs(self, path: str) -> None:
        self.base.mkdirs(path)

    def arrow_fs(self) -> tuple[pafs.FileSystem, str]:
        return self.base.arrow_fs()

    def arrow_path(self, path: str) -> str:
        return self.base.arrow_path(path)

    @property
    def is_object_store(self) -> bool:
        return self.base.is_object_store

    def file_size(self, path: str) -> int:
        return self.base.file_size(path)
