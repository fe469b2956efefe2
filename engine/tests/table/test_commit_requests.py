"""What a commit asks of storage: a commit that publishes an APPEND and then a COMPACT reads the
LATEST hint once (it builds on the snapshot it just read or published, with one probe for a
successor), and a walk back over many snapshots reads a window of them at once on an object store."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import strata
from strata.fs.file_io import LocalFileIO
from strata.snapshot.snapshot_manager import WALK_WINDOW, SnapshotManager

pytestmark = pytest.mark.local_storage_only(reason="counts requests through a wrapper of the local FileIO")

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


class CountingIO(LocalFileIO):
    """Counts reads; with `hold_for` N, a read waits (up to 2 s) until N reads are in flight at
    once, so that reads issued together are seen together however slowly threads start."""

    def __init__(self, object_store: bool = False, hold_for: int = 0) -> None:
        super().__init__()
        self.object_store = object_store
        self.hold_for = hold_for
        self.reads: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._changed = threading.Condition()

    @property
    def is_object_store(self) -> bool:
        return self.object_store

    def read_bytes(self, path: str) -> bytes:
        with self._changed:
            self.reads.append(path)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self._changed.notify_all()
            self._changed.wait_for(lambda: self.most_in_flight >= self.hold_for, timeout=2)
        try:
            return super().read_bytes(path)
        finally:
            with self._changed:
                self.in_flight -= 1


def rows(ids: range, tag: str) -> pa.Table:
    return pa.table({"id": list(ids), "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def test_a_commit_of_an_append_and_its_compaction_reads_latest_once(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "deletion-vectors.enabled": "true"})
    table.write(rows(range(0, 100), "a"))
    io = CountingIO()
    counted = strata.Table(io, table.path, table.identifier, table.schema, catalog=table.catalog)
    writer = counted.new_write(commit_user="job")
    writer.write_arrow(rows(range(50, 150), "b"))
    messages = writer.prepare_commit(wait_compaction=True)
    writer.close()
    io.reads.clear()
    result = counted.new_commit("job").commit(messages, 1)
    assert len(result.snapshot_ids) == 2  # the APPEND, then the compaction that moved level 0 up
    assert sum(path.endswith("/snapshot/LATEST") for path in io.reads) == 1
    assert {r["id"]: r["v"] for r in counted.to_arrow().to_pylist()} == \
        {**{i: f"a{i}" for i in range(50)}, **{i: f"b{i}" for i in range(50, 150)}}


def test_a_walk_back_reads_a_window_of_snapshots_at_once(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA)
    for i in range(40):
        table.write(rows(range(i, i + 1), "r"))
    for expired in (7, 8, 30):
        LocalFileIO().delete(table.snapshot_manager.path(expired))
    io = CountingIO(object_store=True, hold_for=WALK_WINDOW)
    walked = [s.id for s in SnapshotManager(io, table.path).newest_first(40, 2)]
    assert walked == [i for i in range(40, 2, -1) if i not in (7, 8, 30)]
    assert io.most_in_flight == WALK_WINDOW
    local = CountingIO()
    assert [s.id for s in SnapshotManager(local, table.path).newest_first(40, 2)] == walked
    assert local.most_in_flight == 1
