"""Sorted runs a primary-key writer spilled to local disk (Paimon's ``write-buffer-spillable``).

A writer whose buffer passes ``write-buffer-size`` writes it, sorted and merged, to a local
temporary file instead of to a level-0 file. Its flush then merges the spilled runs with what is
still buffered into one sorted run: a large write leaves one level-0 run per bucket and commit, not
one per buffer's worth, so there is less to compact and less for readers to merge (Trino opens
fewer, larger files).

The files live in the temporary directory (``TMPDIR``) and are deleted when the runs are merged
into the flush, dropped, or the writer is closed.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

# a spilled run is written in record batches of about this many bytes of Arrow data: what a merge
# holds of each run at a time (a flush's merge holds at most max_runs of them)
SPILL_BATCH_BYTES = 4 * 1024 * 1024

Merge = Callable[[list[Iterator[pa.Table]]], Iterator[pa.Table]]


class SpilledRuns:
    """The sorted runs one writer spilled since its last flush, oldest first. Past `max_runs`
    (Paimon's ``local-sort.max-num-file-handles``) the runs are merged into one on disk, so that
    the flush's merge holds a bounded number of batches."""

    def __init__(self, compression: str | None, compression_level: int | None, max_runs: int = 128):
        codec = None if compression is None else pa.Codec(compression, compression_level)
        self._options = pa.ipc.IpcWriteOptions(compression=codec)
        self._files: list[Any] = []  # tempfile._TemporaryFileWrapper: deleted on close
        self.max_runs = max(2, max_runs)
        self.disk_bytes = 0

    def __bool__(self) -> bool:
        return bool(self._files)

    def __len__(self) -> int:
        return len(self._files)

    def add(self, run: pa.Table, merge: Merge) -> int:
        """Spill `run` (sorted by key, each key once, in file layout); with `max_runs` runs, merge
        them all into one with `merge`. The bytes written."""
        written = self._write(_batches(run))
        if len(self._files) >= self.max_runs:
            older, self._files = self._files, []
            try:
                written += self._write(merge([_read(file) for file in older]))
            except BaseException:
                self._files = older + self._files
                raise
            for file in older:
                file.close()
            self.disk_bytes = sum(_size(file) for file in self._files)
        return written

    def runs(self) -> list[Iterator[pa.Table]]:
        """Each spilled run as a stream of tables, read from its start."""
        return [_read(file) for file in self._files]

    def close(self) -> None:
        """Drop the runs (their disk space is freed)."""
        for file in self._files:
            file.close()
        self._files, self.disk_bytes = [], 0

    def _write(self, tables: Iterable[pa.Table]) -> int:
        """One new run from `tables` (in key order), written as they come (through Arrow's own
        file IO: a Python file object would copy every buffer through the interpreter)."""
        file = tempfile.NamedTemporaryFile(prefix="strata-spill-", suffix=".arrows")  # noqa: SIM115 (kept until the flush)
        out = None
        try:
            with pa.OSFile(file.name, "wb") as sink:
                for table in tables:
                    if out is None:
                        out = pa.ipc.new_stream(sink, table.schema, options=self._options)
                    for batch in table.to_batches():
                        out.write_batch(batch)
                if out is not None:
                    out.close()
                written = sink.tell()
        except BaseException:
            file.close()
            raise
        if out is None:  # nothing to spill
            file.close()
            return 0
        self._files.append(file)
        self.disk_bytes += written
        return written


def _batches(run: pa.Table) -> Iterator[pa.Table]:
    rows = max(1, SPILL_BATCH_BYTES * run.num_rows // max(1, run.nbytes))
    for start in range(0, run.num_rows, rows):
        yield run.slice(start, rows)


def _size(file: Any) -> int:
    return os.path.getsize(file.name)


def _read(file: Any) -> Iterator[pa.Table]:
    with pa.memory_map(file.name) as source, pa.ipc.open_stream(source) as reader:
        for batch in reader:
            yield pa.Table.from_batches([batch])
