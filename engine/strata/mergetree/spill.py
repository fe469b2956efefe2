"""Sorted runs a primary-key writer spilled to local disk (Paimon's ``write-buffer-spillable``).

A writer whose buffer passes ``write-buffer-size`` writes it, sorted and merged, to a local
temporary file instead of to a level-0 file. Its flush then merges the spilled runs with what is
still buffered into one sorted run: a large write leaves one level-0 run per bucket and commit, not
one per buffer's worth, so there is less to compact and less for readers to merge (Trino opens
fewer, larger files).

The files are unnamed (``tempfile.TemporaryFile``): they vanish when closed or when the process
dies, so a failed write leaves nothing behind on the local disk.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import IO

import pyarrow as pa

# rows per record batch of a spilled run: what a merge holds of each run at a time
SPILL_BATCH_ROWS = 64 * 1024


class SpilledRuns:
    """The sorted runs one writer spilled since its last flush, oldest first."""

    def __init__(self, compression: str | None, compression_level: int | None):
        codec = None if compression is None else pa.Codec(compression, compression_level)
        self._options = pa.ipc.IpcWriteOptions(compression=codec)
        self._files: list[IO[bytes]] = []
        self.disk_bytes = 0

    def __bool__(self) -> bool:
        return bool(self._files)

    def add(self, run: pa.Table) -> int:
        """Spill `run` (sorted by key, each key once, in file layout); the bytes written."""
        file = tempfile.TemporaryFile(prefix="strata-spill-")  # noqa: SIM115 (kept open until the flush)
        try:
            with pa.ipc.new_stream(pa.PythonFile(file, mode="w"), run.schema, options=self._options) as out:
                for batch in run.to_batches(max_chunksize=SPILL_BATCH_ROWS):
                    out.write_batch(batch)
            written = file.tell()
        except BaseException:
            file.close()
            raise
        self._files.append(file)
        self.disk_bytes += written
        return written

    def runs(self) -> list[Iterator[pa.Table]]:
        """Each spilled run as a stream of tables, read from its start."""
        return [_read(file) for file in self._files]

    def close(self) -> None:
        """Drop the runs (their disk space is freed)."""
        for file in self._files:
            file.close()
        self._files, self.disk_bytes = [], 0


def _read(file: IO[bytes]) -> Iterator[pa.Table]:
    file.seek(0)
    with pa.ipc.open_stream(pa.PythonFile(file, mode="r")) as reader:
        for batch in reader:
            yield pa.Table.from_batches([batch])
