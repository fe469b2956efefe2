"""Finding a snapshot by time (time travel, streaming from a timestamp): the answers of a walk
over the snapshots, from a binary search that reads O(log n) of them."""

from __future__ import annotations

import math
import time

import pyarrow as pa
import pytest

import strata
import strata.operation.commit as commit_module
from strata.errors import SnapshotNotFoundError


class _Clock:
    """The committer's time module, whose time() gives the commit times a test chooses."""

    def __init__(self, millis: list[int]):
        self.millis = list(millis)

    def time(self) -> float:
        return self.millis.pop(0) / 1000

    def __getattr__(self, name: str):
        return getattr(time, name)


def _table_committed_at(catalog: strata.Catalog, millis: list[int], monkeypatch: pytest.MonkeyPatch):
    """An append table with one snapshot per entry of `millis`, each stamped with it (and kept:
    stamped in 1970, they are past any time retention)."""
    table = catalog.create_table("db.t", pa.schema([("id", pa.int64())]),
                                 options={"snapshot.num-retained.min": str(len(millis))})
    with monkeypatch.context() as patch:
        patch.setattr(commit_module, "time", _Clock(millis))
        for i in range(len(millis)):
            table.write(pa.table({"id": [i]}))
    return table


def _walked(snapshots, t: int):
    """What a walk over the snapshots (oldest first) answers: the newest at or before t, the
    oldest at or after t."""
    before = [s.id for s in snapshots if s.time_millis <= t]
    after = [s.id for s in snapshots if s.time_millis >= t]
    return (before[-1] if before else None), (after[0] if after else None)


def _found(manager, t: int):
    before, after = manager.latest_at_or_before(t), manager.earliest_at_or_after(t)
    return (before.id if before else None), (after.id if after else None)


def test_by_time_answers_as_a_walk_with_equal_times_expiry_and_rollback(catalog, monkeypatch):
    # equal times (commits within one millisecond) and gaps between them
    millis = [1000, 1000, 1005, 1010, 1010, 1010, 1020, 1030, 1031, 1031, 1040, 1050]
    table = _table_committed_at(catalog, millis, monkeypatch)
    manager = table.snapshot_manager
    for state in ("all", "expired", "rolled back"):
        live = table.snapshots()
        for t in range(990, 1060):
            assert _found(manager, t) == _walked(live, t), (state, t)
        if state == "all":
            table.expire_snapshots(retain_max=8, retain_min=8)
            assert table.snapshots()[0].id == 5
        elif state == "expired":
            table.rollback_to(9)
            assert table.latest_snapshot().id == 9


@pytest.mark.local_storage_only(reason="counts snapshot reads, the same on every store; 128 commits")
def test_by_time_reads_logarithmically_many_snapshots(catalog, monkeypatch):
    count = 128
    table = _table_committed_at(catalog, [1000 + 10 * i for i in range(count)], monkeypatch)
    manager = table.snapshot_manager
    probes = (1000 + 10 * (count // 2) + 5, 995, 1000 + 10 * count)
    walked = {t: _walked(table.snapshots(), t) for t in probes}
    reads: list[int] = []
    read = manager.snapshot
    monkeypatch.setattr(manager, "snapshot", lambda sid: reads.append(sid) or read(sid))
    for t in probes:
        reads.clear()
        assert _found(manager, t) == walked[t]
        # two searches, each over the live range found from the hints: a walk read up to `count`
        assert len(reads) <= 2 * (math.ceil(math.log2(count)) + 2), (t, len(reads))


def test_by_time_searches_again_when_a_snapshot_vanishes_under_it(catalog, monkeypatch):
    millis = [1000 + 10 * i for i in range(20)]
    table = _table_committed_at(catalog, millis, monkeypatch)
    manager = table.snapshot_manager
    read = manager.snapshot
    vanished = []

    def expired_once(sid):
        if not vanished:
            vanished.append(sid)
            raise SnapshotNotFoundError(f"snapshot {sid} expired meanwhile")
        return read(sid)

    monkeypatch.setattr(manager, "snapshot", expired_once)
    assert manager.latest_at_or_before(1095).id == 10
    assert vanished, "the search read no snapshot"

