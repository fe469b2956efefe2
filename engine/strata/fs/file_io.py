"""The storage abstraction every part of the engine goes through.

Paths are strings: plain local paths, ``file://`` URIs, or ``s3://bucket/key`` URIs. The one
operation with a strong contract is ``write_new``: publish a complete file at a path only if
nothing is there, atomically, never overwriting. Snapshot commits rely on it.

An ``OSError`` from a write is ambiguous: a lost reply or a timeout after the request landed looks
the same as a request that never arrived. ``publish_new`` (schema files, tags) settles it by
reading the file back, and raises ``CommitStateUnknownError`` when that fails too.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.fs as pafs

from strata.errors import CommitStateUnknownError

T = TypeVar("T")
READ_BACK_ATTEMPTS = 6  # reads after an ambiguous write, backing off from 50 ms to 1 s (~3 s in all)


@dataclass(frozen=True)
class FileStatus:
    path: str
    size: int
    mtime_millis: int
    is_dir: bool = False


class FileIO(ABC):
    """Byte-level storage operations used by catalogs, commits, readers and writers."""

    @abstractmethod
    def read_bytes(self, path: str) -> bytes: ...

    @abstractmethod
    def write_bytes(self, path: str, data: bytes) -> None:
        """Write (or replace) a whole file; readers never see a partial file."""

    @abstractmethod
    def write_new(self, path: str, data: bytes) -> bool:
        """Atomically create `path` with `data` if absent. False if it already exists."""

    @abstractmethod
    def exists(self, path: str) -> bool: ...

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete a file; deleting a missing file is not an error."""

    @abstractmethod
    def delete_dir(self, path: str) -> None: ...

    def delete_empty_dir(self, path: str) -> bool:
        """Remove a directory only if it is empty; False (harmlessly) if it is not, or if the
        store cannot tell atomically enough."""
        return False

    @abstractmethod
    def list_status(self, path: str) -> list[FileStatus]:
        """Direct children of a directory; an empty list if it does not exist."""

    @abstractmethod
    def mkdirs(self, path: str) -> None: ...

    @abstractmethod
    def arrow_fs(self) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem and the prefix to strip from our paths, for Parquet I/O."""

    def arrow_path(self, path: str) -> str:
        return strip_scheme(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        """A seekable reader of a whole file (what Parquet reads go through)."""
        fs, _ = self.arrow_fs()
        return fs.open_input_file(self.arrow_path(path))

    @property
    def is_object_store(self) -> bool:
        return False

    def exclusive_lock(self, path: str) -> contextlib.AbstractContextManager[object] | None:
        """An exclusive lock on a lock file, held by one caller at a time across threads and
        processes of this machine; None where the store has none (object stores: a catalog lock)."""
        return None

    def file_size(self, path: str) -> int:
        info = self.arrow_fs()[0].get_file_info(self.arrow_path(path))
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(path)
        return int(info.size or 0)


def _same_file(fd: int, path: str) -> bool:
    try:
        return os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def strip_scheme(path: str) -> str:
    if path.startswith("file://"):
        return path[len("file://"):]
    if "://" in path:
        return path.split("://", 1)[1]
    return path


class LocalFileIO(FileIO):
    """Local filesystem; atomic publish uses link(2), which fails if the target exists."""

    def __init__(self) -> None:
        self._fs = pafs.LocalFileSystem()

    def read_bytes(self, path: str) -> bytes:
        with open(strip_scheme(path), "rb") as f:
            return f.read()

    def _write_temp(self, target: str, data: bytes) -> str:
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        tmp = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        return tmp

    def write_bytes(self, path: str, data: bytes) -> None:
        target = strip_scheme(path)
        tmp = self._write_temp(target, data)
        os.replace(tmp, target)

    def write_new(self, path: str, data: bytes) -> bool:
        target = strip_scheme(path)
        tmp = self._write_temp(target, data)
        try:
            os.link(tmp, target)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)

    def exists(self, path: str) -> bool:
        return os.path.exists(strip_scheme(path))

    @contextlib.contextmanager
    def exclusive_lock(self, path: str) -> Iterator[object]:
        """flock(2) on `path` (created if absent): each call opens the file anew, so threads of one
        process exclude each other as processes do."""
        import fcntl

        target = strip_scheme(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        while True:
            with open(target, "a+b") as handle:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
                try:
                    if not _same_file(handle.fileno(), target):
                        continue  # deleted (or replaced) while we waited: lock the file now there
                    yield handle
                    return
                finally:
                    fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(strip_scheme(path))

    def delete_dir(self, path: str) -> None:
        import shutil

        shutil.rmtree(strip_scheme(path), ignore_errors=True)

    def delete_empty_dir(self, path: str) -> bool:
        try:
            os.rmdir(strip_scheme(path))  # fails if a concurrent writer put a file there meanwhile
            return True
        except OSError:
            return False

    def list_status(self, path: str) -> list[FileStatus]:
        local = strip_scheme(path)
        try:
            entries = list(os.scandir(local))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in entries:
            try:
                st = e.stat()
            except FileNotFoundError:
                continue  # removed since the scan (e.g. a committer's temp file): not a child any more
            out.append(FileStatus(os.path.join(path, e.name), st.st_size, int(st.st_mtime * 1000), e.is_dir()))
        return out

    def mkdirs(self, path: str) -> None:
        os.makedirs(strip_scheme(path), exist_ok=True)

    def arrow_fs(self) -> tuple[pafs.FileSystem, str]:
        return self._fs, ""


def read_back(read: Callable[[], T], attempts: int | None = None) -> T:
    """`read()` retried on OSError (not FileNotFoundError, a definite answer) with a short
    backoff: after an ambiguous write, the outage that broke it often breaks the next read too.
    The last OSError escapes when no read succeeds. `attempts` defaults to READ_BACK_ATTEMPTS."""
    attempts = attempts or READ_BACK_ATTEMPTS
    wait = 0.05
    for attempt in range(attempts):
        try:
            return read()
        except FileNotFoundError:
            raise
        except OSError:
            if attempt == attempts - 1:
                raise
            time.sleep(wait * random.uniform(0.5, 1.0))
            wait = min(wait * 2, 1.0)
    raise AssertionError("unreachable")  # pragma: no cover


def publish_new(file_io: FileIO, path: str, data: bytes, what: str) -> bool:
    """``write_new`` with its outcome settled: True if `path` now holds our `data`, False if
    another writer's file is there. After an ambiguous write the file is read back: our bytes
    count as written, absent re-raises the write's error (nothing was published), and a failed
    read raises CommitStateUnknownError (the file, if it landed, is kept). `what` names the
    file for the messages (e.g. "schema 3 of db.t")."""
    try:
        return file_io.write_new(path, data)
    except OSError as exc:
        write_error = exc
    try:
        found = read_back(lambda: file_io.read_bytes(path))
    except FileNotFoundError:
        raise write_error from None
    except OSError as exc:
        raise CommitStateUnknownError(
            f"{what}: unknown whether {path} was written: the write failed ambiguously ({write_error}) and "
            f"reading it back failed too ({exc}). Nothing was deleted; read it again once the store answers: "
            "if it holds what was written, the change is done, else retry it.") from write_error
    return found == data
