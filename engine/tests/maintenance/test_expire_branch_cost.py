"""Snapshot expiry on a table with branches reads what the branches gained since the last expiry,
not their whole history: the reads of an expiry do not grow with a branch's snapshot count."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata
from strata.fs.file_io import LocalFileIO
from strata.operation.expire import expire_snapshots

pytestmark = pytest.mark.local_storage_only(reason="counts reads through a wrapper of the local FileIO")

SCHEMA = pa.schema([("id", pa.int64())])


class CountingIO(LocalFileIO):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read_bytes(self, path: str) -> bytes:
        self.reads += 1
        return super().read_bytes(path)


def expiry_reads(catalog: strata.Catalog, name: str, branch_snapshots: int) -> tuple[int, int]:
    """Reads of main's expiry with a branch of `branch_snapshots` snapshots: the first expiry in
    the process, and one after the branch and main each committed once more."""
    table = catalog.create_table(name, SCHEMA)
    table.write(pa.table({"id": [0]}, schema=SCHEMA))
    branch = table.create_branch("b", from_snapshot=1)
    for i in range(branch_snapshots - 1):
        branch.write(pa.table({"id": [i]}, schema=SCHEMA))
    io = CountingIO()
    main = strata.Table(io, table.path, table.identifier, table.schema, catalog=table.catalog)
    reads = []
    for i in range(2):
        main.write(pa.table({"id": [100 + i]}, schema=SCHEMA))  # default retention: nothing expires yet
        branch.write(pa.table({"id": [200 + i]}, schema=SCHEMA))
        before = io.reads
        assert expire_snapshots(main, retain_min=1, retain_max=1).expired
        reads.append(io.reads - before)
    return reads[0], reads[1]


def test_expiry_reads_do_not_grow_with_branch_history(catalog: strata.Catalog) -> None:
    short_cold, short_warm = expiry_reads(catalog, "db.short", 10)
    long_cold, long_warm = expiry_reads(catalog, "db.long", 60)
    print(f"expiry reads: 10 branch snapshots {short_cold} cold / {short_warm} after; "
          f"60 branch snapshots {long_cold} cold / {long_warm} after")
    assert long_cold > short_cold  # the first expiry in a process reads each branch once
    assert long_warm == short_warm
