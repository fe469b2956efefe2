"""Snapshot expiry: what expires (num-retained.min/max, time-retained, expire.limit, consumers), that
nothing a retained snapshot or tag needs is deleted and everything else is, and that snapshot files
go before the data files."""

from __future__ import annotations

import pyarrow as pa
import pytest
from maintenance_helpers import (
    PK_SCHEMA,
    advance_clock,
    exists,
    files_on_disk,
    live_paths,
    pk_batch,
    read_json,
    read_text,
    rows,
    write_json,
)

from strata.catalog.filesystem import FileSystemCatalog
from strata.fs import FileIO
from strata.operation import expire as expire_mod
from strata.operation.expire import expire_snapshots

APPEND_SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.int64())])
KINDS = ["pk", "pk-changelog", "append"]


def make_table(catalog, kind, **options):
    opts = {"write-only": "true", **options}
    if kind.startswith("pk"):
        opts["bucket"] = "2"
        if kind == "pk-changelog":
            opts["changelog-producer"] = "input"
        return catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"], options=opts)
    return catalog.create_table("db.t", APPEND_SCHEMA, partition_keys=["dt"], options=opts)


def build_history(table):
    """A dozen snapshots: appends to two partitions, updates, a full compaction, a partition
    overwrite and (PK) deletes."""
    table.write(pk_batch("a", [1, 2, 3], 1))
    table.write(pk_batch("b", [1, 2], 1))
    table.write(pk_batch("a", [2, 4], 2))
    table.write(pk_batch("b", [3], 2))
    table.compact(full=True)
    table.write(pk_batch("a", [5], 3))
    table.write(pk_batch("c", [1, 2], 3), mode="overwrite", partition={"dt": "c"})
    table.write(pk_batch("b", [1, 7], 4), mode="overwrite", partition={"dt": "b"})
    if table.schema.primary_keys:
        table.delete(pk_batch("a", [1], 0))
    table.write(pk_batch("a", [6, 2], 5))
    table.compact(full=True)
    table.write(pk_batch("c", [3], 6))


def snapshot_state(table):
    return {s.id: (rows(table, snapshot_id=s.id), live_paths(table, s)) for s in table.snapshots()}


@pytest.mark.parametrize("kind", KINDS)
def test_expiry_keeps_what_retained_snapshots_and_tags_need(catalog, kind):
    table = make_table(catalog, kind)
    build_history(table)
    table.create_tag("early", 2)
    table.create_tag("middle", 6)
    state = snapshot_state(table)
    tags = {name: rows(table, tag=name) for name in ("early", "middle")}
    latest = table.snapshot_manager.latest_id()
    assert latest >= 10

    result = table.expire_snapshots(retain_min=3, time_retained=0)

    assert result.expired == list(range(1, latest - 2))
    retained = [s.id for s in table.snapshots()]
    assert retained == [latest - 2, latest - 1, latest]
    assert read_text(table, f"{table.path}/snapshot/EARLIEST") == str(latest - 2)
    for sid in range(1, latest - 2):
        assert not exists(table, table.snapshot_manager.path(sid))
    # every retained snapshot and tag reads as before
    for sid in retained:
        assert rows(table, snapshot_id=sid) == state[sid][0]
    for name, expected in tags.items():
        assert rows(table, tag=name) == expected
    # every file they need is there; every file only expired snapshots needed is gone
    tag_needs = [live_paths(table, table.tags.info(name).snapshot, changelog=False) for name in tags]
    needed = set().union(*(state[sid][1] for sid in retained), *tag_needs)
    assert all(exists(table, p) for p in needed)
    expired_only = set().union(*(state[sid][1] for sid in result.expired)) - needed
    assert expired_only
    assert not any(exists(table, p) for p in expired_only)
    # and nothing unreferenced is left behind
    assert files_on_disk(table) <= needed | {p for p in files_on_disk(table) if "/index/" in p}
    assert table.remove_orphan_files(older_than="0 ms", dry_run=True).deleted == []


@pytest.mark.parametrize("kind", ["pk", "append"])
def test_expire_everything_but_latest_then_tags_alone_hold_files(catalog, kind):
    table = make_table(catalog, kind)
    build_history(table)
    table.create_tag("t4", 4)
    expected = rows(table, tag="t4")
    table.expire_snapshots(retain_min=1, time_retained=0)
    assert [s.id for s in table.snapshots()] == [table.snapshot_manager.latest_id()]
    assert rows(table, tag="t4") == expected


def recording(io: FileIO) -> list[tuple[str, str]]:
    """Record the deletes and whole-file writes of `io` (in order) in the returned list."""
    log: list[tuple[str, str]] = []
    delete, write_bytes = io.delete, io.write_bytes

    def recorded_delete(path: str) -> None:
        log.append(("delete", path))
        delete(path)

    def recorded_write(path: str, data: bytes) -> None:
        log.append(("write", path))
        write_bytes(path, data)

    io.delete = recorded_delete  # type: ignore[method-assign]
    io.write_bytes = recorded_write  # type: ignore[method-assign]
    return log


def test_snapshot_files_are_deleted_before_data_files(warehouse, warehouse_io):
    log = recording(warehouse_io)
    catalog = FileSystemCatalog(warehouse, file_io=warehouse_io)
    catalog.create_database("db")
    table = make_table(catalog, "pk")
    build_history(table)
    log.clear()
    table.expire_snapshots(retain_min=2, time_retained=0)
    snapshot_deletes = [i for i, (op, p) in enumerate(log) if op == "delete" and "/snapshot/snapshot-" in p]
    earliest_write = [i for i, (op, p) in enumerate(log) if op == "write" and p.endswith("/snapshot/EARLIEST")]
    file_deletes = [i for i, (op, p) in enumerate(log) if op == "delete" and "/snapshot/" not in p]
    assert snapshot_deletes and earliest_write and file_deletes
    assert max(snapshot_deletes) < earliest_write[0] < min(file_deletes)
    # oldest first: the live ids stay one contiguous range while deleting
    ids = [int(log[i][1].rsplit("-", 1)[1]) for i in snapshot_deletes]
    assert ids == sorted(ids)


def test_crash_after_unpublishing_leaves_only_orphans(catalog, monkeypatch):
    """Killed after the snapshot files went but before the data files: every retained snapshot is
    intact, and the leftovers are orphans that remove_orphan_files takes once old enough."""
    table = make_table(catalog, "pk")
    build_history(table)
    state = snapshot_state(table)

    def crash(self, entries):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(expire_mod.TableFiles, "delete_data_files", crash)
    with pytest.raises(KeyboardInterrupt):
        table.expire_snapshots(retain_min=2, time_retained=0)
    monkeypatch.undo()
    retained = [s.id for s in table.snapshots()]
    assert len(retained) == 2
    for sid in retained:
        assert rows(table, snapshot_id=sid) == state[sid][0]
    needed = set().union(*(state[sid][1] for sid in retained))
    leftovers = files_on_disk(table) - needed
    assert leftovers
    assert table.remove_orphan_files().deleted == []  # younger than the default one-day guard
    advance_clock(monkeypatch, 2 * 86400)
    removed = set(table.remove_orphan_files().deleted)
    assert removed == leftovers
    assert any("/data-" in p for p in removed) and any("/manifest/" in p for p in removed)
    for sid in retained:
        assert rows(table, snapshot_id=sid) == state[sid][0]
    table.write(pk_batch("a", [9], 9))
    assert (("a", 9, 9) in rows(table))


def _set_times(table, base_millis):
    """Rewrite snapshot N's timeMillis to base + N seconds (for time-retained tests)."""
    for sid in range(1, table.snapshot_manager.latest_id() + 1):
        path = table.snapshot_manager.path(sid)
        obj = read_json(table, path)
        obj["timeMillis"] = base_millis + sid * 1000
        write_json(table, path, obj)


@pytest.fixture
def ten(catalog):
    table = make_table(catalog, "append")
    for i in range(10):
        table.write(pk_batch("a", [i], i))
    return table


def test_time_retained_keeps_snapshots_current_within_the_window(ten):
    base = 1_700_000_000_000
    _set_times(ten, base)
    # snapshot N expires only if N+1 is older than now - retained: t(N+1) < base + 7.5 s -> N <= 6
    result = expire_snapshots(ten, retain_min=1, time_retained_ms=2500, now_millis=base + 10_000)
    assert result.expired == [1, 2, 3, 4, 5, 6]
    assert [s.id for s in ten.snapshots()] == [7, 8, 9, 10]


def test_num_retained_max_expires_young_snapshots(ten):
    result = ten.expire_snapshots(retain_min=1, retain_max=4, time_retained="1 h")
    assert result.expired == [1, 2, 3, 4, 5, 6]
    assert rows(ten) == sorted(("a", i, i) for i in range(10))


def test_num_retained_min_and_expire_limit(ten):
    assert ten.expire_snapshots(retain_min=8, time_retained=0).expired == [1, 2]
    assert ten.expire_snapshots(retain_min=1, time_retained=0, max_deletes=3).expired == [3, 4, 5]
    assert ten.expire_snapshots(retain_min=1, time_retained=0, max_deletes=3).expired == [6, 7, 8]
    assert ten.expire_snapshots(retain_min=1, time_retained=0, max_deletes=3).expired == [9]
    assert ten.expire_snapshots(retain_min=1, time_retained=0).expired == []
    with pytest.raises(ValueError, match="must not be less than"):
        ten.expire_snapshots(retain_min=5, retain_max=2)


def test_default_options_expire_nothing_young(ten):
    assert not ten.expire_snapshots()  # time-retained 1 h, num-retained.min 10
    assert len(ten.snapshots()) == 10


def test_consumers_keep_their_next_snapshot(ten):
    state = snapshot_state(ten)
    ten.reset_consumer("slow", 4)
    ten.reset_consumer("fast", 9)
    assert ten.expire_snapshots(retain_min=1, time_retained=0).expired == [1, 2, 3]
    for sid in range(4, 11):
        assert rows(ten, snapshot_id=sid) == state[sid][0]
    ten.reset_consumer("slow", None)
    assert ten.expire_snapshots(retain_min=1, time_retained=0).expired == [4, 5, 6, 7, 8]


def test_commits_expire_automatically_unless_write_only(catalog):
    table = catalog.create_table("db.auto", APPEND_SCHEMA, options={
        "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "3"})
    for i in range(6):
        table.write(pk_batch("a", [i], i))
    assert [s.id for s in table.snapshots()] == [4, 5, 6]
    assert rows(table) == sorted(("a", i, i) for i in range(6))

    quiet = catalog.create_table("db.quiet", APPEND_SCHEMA, options={
        "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "3", "write-only": "true"})
    for i in range(6):
        quiet.write(pk_batch("a", [i], i))
    assert len(quiet.snapshots()) == 6


def test_expired_consumers_stop_blocking(catalog, monkeypatch):
    table = catalog.create_table("db.c", APPEND_SCHEMA, options={
        "snapshot.num-retained.min": "1", "snapshot.time-retained": "0 ms", "consumer.expiration-time": "1 h"})
    table.write(pk_batch("a", [0], 0))
    table.reset_consumer("abandoned", 1)
    for i in range(1, 5):
        table.write(pk_batch("a", [i], i))
    assert [s.id for s in table.snapshots()] == [1, 2, 3, 4, 5]  # pinned by the consumer
    advance_clock(monkeypatch, 2 * 3600)  # the consumer has not moved for two hours
    table.write(pk_batch("a", [5], 5))
    assert table.consumers.consumers() == {}
    table.expire_snapshots()  # the commit's own expiry may have run before the consumer expired
    assert [s.id for s in table.snapshots()] == [6]
    assert rows(table) == sorted(("a", i, i) for i in range(6))


def test_changelog_of_retained_snapshots_still_reads(catalog):
    table = make_table(catalog, "pk-changelog")
    build_history(table)
    latest = table.snapshot_manager.latest_id()
    before = table.read_incremental(latest - 3, latest)
    table.expire_snapshots(retain_min=4, time_retained=0)
    after = table.read_incremental(latest - 3, latest)
    assert sorted(map(str, after.to_pylist())) == sorted(map(str, before.to_pylist()))
