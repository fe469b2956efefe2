"""Branches in Paimon's layout (``branch/branch-<name>/``): management, reads and writes on a branch
with main untouched, fast-forward, and expiry / orphan cleanup that keep what another branch uses."""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pyarrow as pa
import pytest

import strata
from strata.errors import CommitConflictError, InvalidNameError, SnapshotNotFoundError, TableNotFoundError
from strata.snapshot.branches import BranchManager, BranchNotFoundError, split_branch_table
from strata.snapshot.snapshot_manager import PUBLISH_LOCK

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def batch(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def rows(table: strata.Table, **at: object) -> list[tuple]:
    data = table.to_arrow(**at)
    return sorted(zip(*(data.column(c).to_pylist() for c in data.column_names), strict=True))


@pytest.fixture
def table(catalog):
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                             options={"bucket": "1", "deletion-vectors.enabled": "true"})
    t.write(batch([1, 2, 3], "m"))
    t.create_tag("t1")
    t.write(batch([4], "m"))
    return t


def test_names_are_validated_as_paimon_does(table):
    for bad, message in (("main", "default branch"), ("123", "pure numeric"), ("  ", "blank"),
                         ("a/b", "must not contain")):
        with pytest.raises(ValueError, match=message):
            table.create_branch(bad)
    table.create_branch("b1")
    with pytest.raises(ValueError, match="already exists"):
        table.create_branch("b1")
    with pytest.raises(SnapshotNotFoundError, match="nope"):
        table.create_branch("b2", from_tag="nope")
    with pytest.raises(SnapshotNotFoundError, match="snapshot 99"):
        table.create_branch("b3", from_snapshot=99)
    with pytest.raises(BranchNotFoundError, match="'zz' doesn't exist"):
        table.delete_branch("zz")
    with pytest.raises(BranchNotFoundError):
        table.fast_forward("zz")
    with pytest.raises(ValueError, match="do not use in fast-forward"):
        table.fast_forward("main")
    assert table.list_branches() == ["b1"]


@pytest.mark.parametrize("tag", ["../../snapshot/snapshot-1", "../tag-t1", "%2e%2e", " t1"])
def test_a_branch_from_a_malformed_tag_name_is_refused(table, warehouse_io, tag):
    """The tag name becomes a path (tag/tag-<name>): one that climbs out would branch from a file
    that is not a tag."""
    with pytest.raises(InvalidNameError, match="tag name"):
        table.create_branch("b1", from_tag=tag)
    assert table.list_branches() == []
    assert not warehouse_io.exists(f"{table.path}/branch/branch-b1")


def test_split_branch_table_names():
    assert split_branch_table("t$branch_b1") == ("t", "b1", None)
    assert split_branch_table("t$branch_b1$files") == ("t", "b1", "files")
    assert split_branch_table("t$snapshots") == ("t", None, "snapshots")
    assert split_branch_table("t") == ("t", None, None)


def test_layout_list_delete_and_branches_table(table, catalog, warehouse_io):
    table.create_branch("from_tag", from_tag="t1")
    table.create_branch("from_snap", from_snapshot=2)
    table.create_branch("empty")
    root = f"{table.path}/branch"
    assert warehouse_io.exists(f"{root}/branch-from_tag/tag/tag-t1")
    tagged = table.tags.get("t1").id
    assert warehouse_io.exists(f"{root}/branch-from_tag/snapshot/snapshot-{tagged}")
    assert warehouse_io.exists(f"{root}/branch-from_snap/snapshot/snapshot-2")
    assert warehouse_io.exists(f"{root}/branch-empty/schema/schema-0")
    assert warehouse_io.list_status(f"{root}/branch-empty/snapshot") == []
    listed = catalog.get_table("db.t$branches").to_arrow()
    assert sorted(listed.column("branch_name").to_pylist()) == ["empty", "from_snap", "from_tag"]
    assert listed.schema.field("create_time").type == pa.timestamp("ms")
    assert rows(catalog.get_table("db.t$branch_from_tag")) == rows(table, tag="t1")
    assert rows(catalog.get_table("db.t$branch_from_snap")) == rows(table, snapshot_id=2)
    assert rows(catalog.get_table("db.t$branch_empty")) == []
    table.delete_branch("from_snap")
    assert table.list_branches() == ["empty", "from_tag"]
    with pytest.raises(TableNotFoundError, match="from_snap"):
        catalog.get_table("db.t$branch_from_snap")


def test_branch_is_a_table_of_its_own_and_main_is_untouched(table, catalog):
    main_before = rows(table)
    main_snapshots = [s.id for s in table.snapshots()]
    b = table.create_branch("b1", from_tag="t1")
    forked = b.latest_snapshot().id
    b.write(batch([2, 5], "b"))  # upsert and insert
    b.delete(batch([1], "m"))
    b.compact(full=True)
    b.create_tag("bt")
    b = b.add_column("extra", pa.int32())  # schema evolution on the branch alone
    b.write(pa.table({"id": [6], "v": ["b6"], "extra": [60]}))
    b = catalog.get_table("db.t$branch_b1")
    assert b.branch == "b1" and [f.name for f in b.schema.fields] == ["id", "v", "extra"]
    assert rows(b) == [(2, "b2", None), (3, "m3", None), (5, "b5", None), (6, "b6", 60)]
    assert rows(b, tag="bt") == [(2, "b2"), (3, "m3"), (5, "b5")]  # time travel, old schema
    assert rows(b, snapshot_id=forked) == [(1, "m1"), (2, "m2"), (3, "m3")]
    changes = b.read_incremental(forked, forked + 1)
    assert sorted(changes.column("id").to_pylist()) == [2, 5]
    assert [t.name for t in b.list_tags()] == ["t1", "bt"]
    # main: same rows, snapshots, schema and tags as before
    main = catalog.get_table("db.t")
    assert rows(main) == main_before
    assert [s.id for s in main.snapshots()] == main_snapshots
    assert [f.name for f in main.schema.fields] == ["id", "v"]
    assert [t.name for t in main.list_tags()] == ["t1"]
    listed = catalog.get_table("db.t$branch_b1$snapshots").to_arrow().column("snapshot_id").to_pylist()
    assert listed == list(range(forked, b.latest_snapshot().id + 1))


def test_the_branch_option_picks_the_branch(table, catalog):
    table.create_branch("b1", from_tag="t1").write(batch([9], "b"))
    schema = dataclasses.replace(table.schema, options={**table.schema.options, "branch": "b1"})
    by_option = strata.Table(table.file_io, table.path, table.identifier, schema)
    assert by_option.branch == "b1"
    assert rows(by_option) == rows(catalog.get_table("db.t$branch_b1"))
    assert (9, "b9") not in rows(table)


def test_fast_forward_takes_snapshots_schemas_and_tags(table, catalog, warehouse_io):
    table.create_tag("t2")  # on snapshot 2: the branch starts at 1, so t2 goes
    b = table.create_branch("b1", from_tag="t1")
    b.write(batch([7], "b"))
    b = b.add_column("extra", pa.int32())
    b.write(pa.table({"id": [8], "v": ["b8"], "extra": [80]}))
    b.create_tag("bt")
    expected, latest = rows(b), b.latest_snapshot().id
    if warehouse_io.is_object_store:  # conditional PUT: main's committers take no lock, so it is refused
        before = [s.id for s in table.snapshots()]
        with pytest.raises(CommitConflictError, match="needs the table's commit lock"):
            table.fast_forward("b1")
        assert [s.id for s in table.snapshots()] == before
        exclusive = threading.Lock()  # stands for a catalog lock every commit takes
        assert BranchManager(table.file_io, table.path).fast_forward("b1", lock=lambda: exclusive) == latest
    else:  # local disk: every publish holds the snapshot directory's file lock, and so does this
        assert table.fast_forward("b1") == latest
    main = catalog.get_table("db.t")
    assert rows(main) == expected
    assert [s.id for s in main.snapshots()] == list(range(1, latest + 1))
    assert main.latest_snapshot() == b.latest_snapshot()
    assert main.schema.id == 1 and [f.name for f in main.schema.fields] == ["id", "v", "extra"]
    assert sorted(t.name for t in main.list_tags()) == ["bt", "t1"]
    assert warehouse_io.read_bytes(f"{table.path}/snapshot/LATEST").decode() == str(latest)
    main.write(pa.table({"id": [10], "v": ["m10"], "extra": [1]}))  # main goes on from there
    assert main.latest_snapshot().id > latest and (10, "m10", 1) in rows(main)


def test_fast_forward_with_fewer_snapshots_drops_mains_later_ones_under_the_lock(table, catalog):
    table.write(batch([5], "m"))
    b = table.create_branch("b1", from_snapshot=2)  # the first write's compaction
    assert rows(b) == [(1, "m1"), (2, "m2"), (3, "m3")]
    exclusive = threading.Lock()  # stands for a catalog lock every commit takes
    assert BranchManager(table.file_io, table.path).fast_forward("b1", lock=lambda: exclusive) == 2
    main = catalog.get_table("db.t")
    assert [s.id for s in main.snapshots()] == [1, 2] and rows(main) == rows(b)
    main.write(batch([6], "m"))
    assert main.snapshot_manager.snapshot(3).commit_kind == "APPEND"
    assert rows(main) == [(1, "m1"), (2, "m2"), (3, "m3"), (6, "m6")]


def test_fast_forward_after_main_was_rolled_back_below_the_branch_point_is_refused(table, catalog):
    # main rolled back below the branch's first snapshot and written (under a newer schema) keeps
    # snapshots of another history; fast-forward deleted their schema, and main's reads failed
    # (found by the simulation, seed 5000)
    table.write(batch([5], "m"))
    latest = table.latest_snapshot().id
    table.create_branch("b1", from_snapshot=latest)
    main = table.add_column("extra", pa.int32())
    main.write(pa.table({"id": [7], "v": ["m7"], "extra": pa.array([1], pa.int32())}))
    main.rollback_to(2)
    main = catalog.get_table("db.t")
    main.write(pa.table({"id": [8], "v": ["m8"], "extra": pa.array([2], pa.int32())}))
    before = rows(main)
    exclusive = threading.Lock()
    with pytest.raises(CommitConflictError, match="rolled back below it"):
        BranchManager(table.file_io, table.path).fast_forward("b1", lock=lambda: exclusive)
    main = catalog.get_table("db.t")
    assert rows(main) == before
    for snapshot in main.snapshots():  # each reads (its schema is still there)
        rows(main, snapshot_id=snapshot.id)


def test_a_branchs_first_snapshot_names_no_changelog_main_expires(catalog):
    # the changelog of the commit a branch starts from is main's, and main's expiry deletes it with
    # the snapshot: the branch's copy named missing files (found by the simulation, seed 5024)
    t = catalog.create_table("db.c", SCHEMA, primary_keys=["id"],
                             options={"bucket": "1", "changelog-producer": "input"})
    for i in range(1, 4):
        t.write(batch([i], "m"))
    t.create_tag("t2", 2)
    for kind, branch in (("snapshot", t.create_branch("bs", from_snapshot=2)),
                         ("tag", t.create_branch("bt", from_tag="t2"))):
        first = branch.snapshot_manager.snapshot(2)
        assert first.changelog_manifest_list is None, kind
    t.expire_snapshots(retain_min=1, retain_max=1)
    for name in ("bs", "bt"):
        branch = t.on_branch(name)
        snapshot = branch.snapshot_manager.snapshot(2)
        names = [snapshot.base_manifest_list, snapshot.delta_manifest_list]
        assert all(t.file_io.exists(branch.manifest_store.path(n)) for n in names)
        assert rows(branch) == [(1, "m1"), (2, "m2")]


def test_fast_forward_is_refused_where_commits_take_no_lock(table, catalog, warehouse_io):
    """On an object store with conditional PUT main's committers publish create-if-absent without a
    lock, so replacing main's snapshots could delete a commit after it was acknowledged: refused,
    main unchanged. On local disk the publish lock makes it Paimon's fast-forward."""
    table.write(batch([5], "m"))
    b = table.create_branch("b1", from_snapshot=2)
    before = [s.id for s in table.snapshots()]
    if warehouse_io.is_object_store:
        with pytest.raises(CommitConflictError, match=r"needs the table's commit lock.*retry"):
            table.fast_forward("b1")
        main = catalog.get_table("db.t")
        assert [s.id for s in main.snapshots()] == before and (5, "m5") in rows(main)
    else:
        assert table.fast_forward("b1") == 2
        main = catalog.get_table("db.t")
        assert [s.id for s in main.snapshots()] == [1, 2] and rows(main) == rows(b)


def test_fast_forward_copies_schemas_before_its_snapshots_are_visible(table, catalog, warehouse_io):
    b = table.create_branch("b1", from_tag="t1")
    b = b.add_column("extra", pa.int32())
    for i in range(3):
        b.write(pa.table({"id": [20 + i], "v": ["b"], "extra": [i]}))
    seen = []
    real_write_new = warehouse_io.write_new

    real_write_bytes = warehouse_io.write_bytes

    def seen_at(path: str) -> None:
        if "/snapshot/snapshot-" in path:  # the moment a branch snapshot becomes main's
            seen.append(warehouse_io.exists(f"{table.path}/schema/schema-1"))

    def watch_new(path: str, data: bytes) -> bool:
        seen_at(path)
        return real_write_new(path, data)

    def watch_bytes(path: str, data: bytes) -> None:
        seen_at(path)
        real_write_bytes(path, data)

    manager = BranchManager(warehouse_io, table.path)
    warehouse_io.write_new = watch_new  # type: ignore[method-assign]
    warehouse_io.write_bytes = watch_bytes  # type: ignore[method-assign]
    exclusive = threading.Lock()  # stands for the table's commit lock
    try:
        manager.fast_forward("b1", lock=lambda: exclusive)
    finally:
        del warehouse_io.write_new
        del warehouse_io.write_bytes
    assert seen and all(seen), "a claimed snapshot was visible before the schema it uses"
    assert catalog.get_table("db.t").schema.id == 1


def test_fast_forward_races_main_committers(catalog, warehouse_io):
    """Threads on one warehouse: main's writer commits while fast-forwards run. On local disk each
    fast-forward takes the lock every publish holds and wins whole (main is the branch; main's
    commits published before it go, as in Paimon, those after it stay on top); on an object store
    without a catalog lock each is refused. Either way main is one contiguous, readable chain whose
    rows are the branch's (if one won) plus the main commits it still holds."""
    table = catalog.create_table("db.race", SCHEMA, primary_keys=["id"], options={"bucket": "1", "write-only": "true"})
    table.write(batch([1, 2, 3], "m"))
    b = table.create_branch("b1", from_snapshot=1)
    for i in range(12):  # well ahead of main
        b.write(batch([100 + i], "b"))
    branch_rows = set(rows(b))
    done, errors, acknowledged = threading.Event(), [], []

    def main_writer():
        try:
            writer = catalog.get_table("db.race")
            for i in range(8):
                commit = writer.write(batch([1000 + i], "w"), commit_user=f"writer-{i}")
                acknowledged.append((commit.snapshot_ids, 1000 + i))
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=main_writer)
    thread.start()
    outcomes = []
    while not done.is_set() or not outcomes:
        try:
            outcomes.append(("won", catalog.get_table("db.race").fast_forward("b1")))
        except CommitConflictError as exc:
            if "needs the table's commit lock" in str(exc):
                outcomes.append(("refused", None))
                break
            outcomes.append(("conflict", None))
    thread.join(120)
    assert not errors, errors
    main = catalog.get_table("db.race")
    ids = [s.id for s in main.snapshots()]
    assert ids == list(range(ids[0], ids[-1] + 1)), "one contiguous chain"
    for sid in ids:  # every snapshot readable
        main.to_arrow(snapshot_id=sid)
    print(f"fast-forward outcomes: {outcomes}")
    won = [latest for outcome, latest in outcomes if outcome == "won"]
    assert bool(won) == (not warehouse_io.is_object_store), outcomes
    held = {s.commit_user for s in main.snapshots()}
    kept = {(k, f"w{k}") for _, k in acknowledged if f"writer-{k - 1000}" in held}
    if won:
        assert set(rows(main)) == branch_rows | kept, outcomes
    else:
        assert {(k, f"w{k}") for _, k in acknowledged} <= set(rows(main))


def test_fast_forward_racing_a_main_commit_fails_whole(table, catalog):
    b = table.create_branch("b1", from_tag="t1")
    b.write(batch([7], "b"))
    before, ids = rows(table), [s.id for s in table.snapshots()]

    class CommitInside:  # a main commit lands between the plan and the lock
        def __enter__(self):
            table.write(batch([11], "m"))

        def __exit__(self, *exc):
            return False

    with pytest.raises(CommitConflictError, match="conflicts with a commit to main"):
        BranchManager(table.file_io, table.path).fast_forward("b1", lock=CommitInside)
    assert rows(catalog.get_table("db.t")) == sorted([*before, (11, "m11")])
    after = [s.id for s in catalog.get_table("db.t").snapshots()]
    assert after[:len(ids)] == ids and all(s.commit_user != b.latest_snapshot().commit_user
                                           for s in catalog.get_table("db.t").snapshots())


def test_expiry_on_either_side_keeps_what_the_other_uses(table, catalog):
    b = table.create_branch("b1", from_snapshot=table.latest_snapshot().id)  # not tagged: only the branch keeps it
    branch_rows = rows(b)
    for i in range(3):  # main rewrites everything the branch shares, then expires its history
        table.write(batch([1, 2, 3, 4], f"x{i}"))
        table.compact(full=True)
    table.expire_snapshots(retain_min=1, retain_max=1)
    assert [s.id for s in table.snapshots()] == [table.latest_snapshot().id]
    b = catalog.get_table("db.t$branch_b1")
    assert rows(b) == branch_rows  # every file of the branch's snapshot survived
    main_rows = rows(table)
    for i in range(3):  # and the reverse: the branch rewrites and expires the snapshot it forked
        b.write(batch([1, 2, 3, 4], f"y{i}"))
        b.compact(full=True)
    b.expire_snapshots(retain_min=1, retain_max=1)
    assert rows(catalog.get_table("db.t")) == main_rows
    # orphan cleanup counts every branch's snapshots and tags: nothing live goes
    branch_rows = rows(b)
    table.remove_orphan_files(older_than=_now())
    assert rows(catalog.get_table("db.t")) == main_rows
    assert rows(catalog.get_table("db.t$branch_b1")) == branch_rows
    # once the branch is gone, the files only it used are orphans
    table.delete_branch("b1")
    gone = table.remove_orphan_files(older_than=_now()).deleted
    assert any("/bucket-0/data-" in p for p in gone) and any("/manifest/" in p for p in gone)
    assert rows(catalog.get_table("db.t")) == main_rows


def _now() -> int:
    """A guard of now: every unreferenced file counts as old (no writer is in flight here)."""
    return int(time.time() * 1000)


def test_branch_commits_leave_mains_iceberg_metadata_alone(catalog, warehouse_io):
    table = catalog.create_table("db.ice", SCHEMA, options={"metadata.iceberg.storage": "table-location"})
    table.write(batch([1], "m"))
    table.create_tag("t1")
    hint = f"{table.path}/metadata/version-hint.text"
    before = warehouse_io.read_bytes(hint)
    b = table.create_branch("b1", from_tag="t1")
    b.write(batch([2], "b"))
    b.add_column("extra", pa.int32())
    assert warehouse_io.read_bytes(hint) == before
    table.write(batch([3], "m"))  # main's next sync publishes the tag as a ref
    latest = warehouse_io.read_bytes(hint).decode().strip()
    metadata = json.loads(warehouse_io.read_bytes(f"{table.path}/metadata/v{latest}.metadata.json"))
    assert metadata["refs"]["t1"] == {"snapshot-id": 1, "type": "tag"} and "b1" not in metadata["refs"]


def test_rollback_of_main_keeps_a_later_branchs_files(table, catalog):
    latest = table.latest_snapshot().id
    b = table.create_branch("b1", from_snapshot=latest)  # after the tag main rolls back to
    expected = rows(b)
    table.rollback_to("t1")
    assert rows(catalog.get_table("db.t$branch_b1")) == expected
    b.write(batch([9], "b"))
    assert rows(catalog.get_table("db.t$branch_b1")) == sorted([*expected, (9, "b9")])


def test_publish_lock_excludes_and_survives_orphan_cleanup(tmp_path) -> None:
    """The local publish lock: while one holds it nobody else gets it, and orphan cleanup keeps the
    lock file (deleting it under a holder would let the next one lock a new file)."""
    import datetime
    import fcntl

    catalog = strata.load_catalog(str(tmp_path))
    catalog.create_database("db")
    table = catalog.create_table("db.locked", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(batch([1], "a"))
    lock_file = f"{table.snapshot_manager.dir}/{PUBLISH_LOCK}"
    lock = table.snapshot_manager.publish_lock()
    assert lock is not None
    with lock, open(lock_file, "rb") as other, pytest.raises(BlockingIOError):
        fcntl.flock(other.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    table.remove_orphan_files(older_than=datetime.timedelta(0))
    assert table.file_io.exists(lock_file)
    table.write(batch([2], "b"))  # publishing still works
    assert rows(catalog.get_table("db.locked")) == [(1, "a1"), (2, "b2")]


def test_fast_forward_after_another_brings_the_schemas_the_branch_files_need(catalog):
    """A fast-forward replaced main's history and deleted schemas a second branch's files were
    written under: fast-forwarding that branch must bring them back (the simulation, seed 20264068:
    reading main then failed, 'schema file schema-1 is missing')."""
    t = catalog.create_table("db.s", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    t.write(batch([1], "a"))  # snapshot 1, schema 0
    t = t.add_column("x", pa.int32())
    t.write(pa.table({"id": [2], "v": ["b2"], "x": [2]}))  # files of schema 1
    t = t.add_column("y", pa.int32())
    t.write(pa.table({"id": [3], "v": ["c3"], "x": [3], "y": [3]}))
    late = t.create_branch("late", from_snapshot=t.latest_snapshot().id)  # first schema 2, needs 1
    expected = rows(late)
    t.create_branch("early", from_snapshot=1)
    exclusive = threading.Lock()  # stands for a catalog lock every commit takes
    manager = BranchManager(t.file_io, t.path)
    manager.fast_forward("early", lock=lambda: exclusive)  # main: schema 0 only
    main = catalog.get_table("db.s")
    for i in range(4):
        main.write(batch([10 + i], "m"))
    main.expire_snapshots(retain_max=1, retain_min=1, time_retained=0)  # main starts past the fork
    assert main.snapshots()[0].id >= late.snapshots()[0].id
    manager.fast_forward("late", lock=lambda: exclusive)
    assert rows(catalog.get_table("db.s")) == expected
