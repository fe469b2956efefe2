"""Tags (create, list, delete, retention, time travel, the files they keep alive) and rollback to a
snapshot or a tag."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from maintenance_helpers import PK_SCHEMA, exists, files_on_disk, live_paths, pk_batch, read_json, read_text, rows

from strata.errors import SnapshotNotFoundError
from strata.operation.expire import expire_tags
from strata.operation.orphan import used_files


@pytest.fixture
def table(catalog):
    t = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                             options={"bucket": "1", "write-only": "true"})
    for i in range(1, 7):  # snapshot i upserts id i and overwrites id 1
        t.write(pk_batch("a", [1, i], i))
    return t


# -- tags ---------------------------------------------------------------------------------------


def test_create_list_delete_and_time_travel(table):
    expected = {sid: rows(table, snapshot_id=sid) for sid in range(1, 7)}
    table.create_tag("v2", 2)
    table.create_tag("latest")
    assert table.tags.names() == ["latest", "v2"]
    assert [(t.name, t.snapshot.id) for t in table.list_tags()] == [("v2", 2), ("latest", 6)]
    assert rows(table, tag="v2") == expected[2]
    assert rows(table, tag="latest") == expected[6]
    with pytest.raises(ValueError, match="already exists"):
        table.create_tag("v2", 3)
    table.create_tag("v2", 3, ignore_if_exists=True)
    assert table.tags.get("v2").id == 2
    assert table.delete_tag("v2") and not table.delete_tag("v2")
    assert table.tags.names() == ["latest"]
    with pytest.raises(SnapshotNotFoundError):
        table.to_arrow(tag="v2")
    with pytest.raises(ValueError, match="blank"):
        table.create_tag(" ")


def test_tag_file_is_paimons_shape(table):
    table.create_tag("plain", 2)
    plain = read_json(table, table.tags.path("plain"))
    assert plain["id"] == 2 and "tagCreateTime" not in plain and "tagTimeRetained" not in plain
    table.create_tag("kept", 3, time_retained="1 h")
    kept = read_json(table, table.tags.path("kept"))
    assert isinstance(kept["tagCreateTime"], list) and len(kept["tagCreateTime"]) == 7
    assert kept["tagTimeRetained"] == 3600.0
    info = table.tags.info("kept")
    assert info.time_retained_ms == 3600_000 and info.expires_at() > dt.datetime.now()
    assert "tagCreateTime" not in json.loads(info.snapshot.to_json())  # trimmed to the snapshot
    # the $tags system table reads the same fields
    tags = table.system_table("tags").to_pylist()
    assert {t["tag_name"]: t["time_retained"] for t in tags} == {"plain": None, "kept": "PT1H"}


def test_tag_time_retention_and_max_count(table):
    table.create_tag("short", 1, time_retained="1 min")
    table.create_tag("long", 2, time_retained="1 d")
    table.create_tag("forever", 3)
    assert expire_tags(table, now=dt.datetime.now() + dt.timedelta(hours=1)) == ["short"]
    assert table.tags.names() == ["forever", "long"]
    assert table.expire_tags() == []

    capped = table.set_options(**{"tag.num-retained-max": "2"})
    capped.create_tag("newest", 5)  # three tags now: the oldest (by snapshot) goes
    assert capped.tags.names() == ["forever", "newest"]


def test_default_time_retained_applies_to_new_tags(catalog):
    t = catalog.create_table("db.d", PK_SCHEMA, primary_keys=["dt", "id"],
                             options={"bucket": "1", "tag.default-time-retained": "2 h"})
    t.write(pk_batch("a", [1], 1))
    t.create_tag("x")
    assert t.tags.info("x").time_retained_ms == 2 * 3600_000


def test_tag_keeps_files_after_expiry_and_delete_cleans_them(table):
    table.write(pk_batch("a", [1, 2, 3, 4, 5, 6], 0), mode="overwrite")  # snapshot 7 drops all old files
    table.create_tag("v3", 3)
    table.create_tag("v5", 5)
    v3, v5 = rows(table, tag="v3"), rows(table, tag="v5")
    table.expire_snapshots(retain_min=1, time_retained=0)
    assert [s.id for s in table.snapshots()] == [7]
    assert rows(table, tag="v3") == v3 and rows(table, tag="v5") == v5
    paths3 = live_paths(table, table.tags.info("v3").snapshot, changelog=False)
    paths5 = live_paths(table, table.tags.info("v5").snapshot, changelog=False)
    latest = live_paths(table, table.latest_snapshot())
    assert table.delete_tag("v5")
    assert rows(table, tag="v3") == v3
    assert all(exists(table, p) for p in paths3 | latest)
    assert not any(exists(table, p) for p in paths5 - paths3 - latest)
    assert table.delete_tag("v3")
    assert files_on_disk(table) == latest


# -- rollback -----------------------------------------------------------------------------------


def test_rollback_to_snapshot(table):
    expected = {sid: rows(table, snapshot_id=sid) for sid in range(1, 7)}
    keep = live_paths(table, table.snapshot_manager.snapshot(3))
    table.create_tag("v2", 2)
    table.create_tag("v5", 5)
    result = table.rollback_to(3)
    assert result.deleted_snapshots == [4, 5, 6] and result.deleted_tags == ["v5"]
    assert [s.id for s in table.snapshots()] == [1, 2, 3]
    assert read_text(table, f"{table.path}/snapshot/LATEST") == "3"
    assert rows(table) == expected[3]
    assert rows(table, tag="v2") == expected[2]
    assert table.tags.names() == ["v2"]
    needed = keep | set().union(*(live_paths(table, table.snapshot_manager.snapshot(s)) for s in (1, 2)))
    assert files_on_disk(table) == needed  # the later snapshots' own files are gone
    # the table goes on from there
    table.write(pk_batch("a", [9], 9))
    assert table.latest_snapshot().id == 4
    assert rows(table) == sorted([*expected[3], ("a", 9, 9)])


def test_rollback_to_tag_and_to_a_tag_whose_snapshot_expired(table):
    expected = {sid: rows(table, snapshot_id=sid) for sid in range(1, 7)}
    table.create_tag("v2", 2)
    table.create_tag("v4", 4)
    table.expire_snapshots(retain_min=1, time_retained=0)  # only snapshot 6 is left
    table.rollback_to("v4")
    assert [s.id for s in table.snapshots()] == [4]
    assert table.snapshot_manager.earliest_id() == 4 and table.snapshot_manager.latest_id() == 4
    assert "tagCreateTime" not in read_json(table, table.snapshot_manager.path(4))
    assert rows(table) == expected[4]
    assert rows(table, tag="v2") == expected[2]
    table.rollback_to(2)  # an expired snapshot id: found through its tag, as Paimon does
    assert rows(table) == expected[2]
    assert table.tags.names() == ["v2"]
    table.write(pk_batch("a", [7], 7))
    assert rows(table) == sorted([*expected[2], ("a", 7, 7)])
    assert table.remove_orphan_files(older_than="0 ms", dry_run=True).deleted == []


def test_rollback_to_a_tag_whose_snapshot_and_changelog_expired(catalog):
    # a tag keeps its snapshot's data files, not its changelog, which expiry deletes with the
    # snapshot: the snapshot published again must not name it (found by the simulation, seed 133)
    t = catalog.create_table("db.c", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                             options={"bucket": "1", "changelog-producer": "input"})
    for i in range(1, 5):
        t.write(pk_batch("a", [1, i], i))
    expected = rows(t, snapshot_id=2)
    t.create_tag("v2", 2)
    assert t.tags.info("v2").snapshot.changelog_manifest_list is not None
    t.expire_snapshots(retain_min=1, time_retained=0)  # snapshot 2 and its changelog are gone
    t.rollback_to("v2")
    restored = t.latest_snapshot()
    assert restored.id == 2 and restored.changelog_manifest_list is None
    assert all(exists(t, path) for path in live_paths(t, restored))
    assert rows(t) == expected
    t.write(pk_batch("a", [9], 9))
    changes = t.read_incremental(2, 3)
    assert changes.column("id").to_pylist() == [9]
    # the restored snapshot's changes: its changelog is gone, the records its commit wrote stand
    # in (the simulation, seed 20262048: an incremental read returned none of them)
    restored_changes = t.read_incremental(1, 2)
    assert sorted(restored_changes.column("id").to_pylist()) == [1, 2]
    assert set(restored_changes.column("_ROW_KIND").to_pylist()) == {"+I"}



def test_rollback_to_a_tag_whose_changelog_expiry_stopped_part_way(catalog):
    """Expiry deletes a changelog file by file, the list last: one that stopped part way leaves the
    list naming manifests and files that are gone. The restored snapshot must not name them
    (the simulation, seed 20263052: a rollback left a retained snapshot naming two missing files)."""
    t = catalog.create_table("db.c", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                             options={"bucket": "1", "changelog-producer": "input"})
    for i in range(1, 5):
        t.write(pk_batch("a", [1, i], i))
    t.create_tag("v2", 2)
    listed = t.tags.info("v2").snapshot.changelog_manifest_list
    list_path = t.store.manifest_store.path(listed)
    saved = t.store.file_io.read_bytes(list_path)
    t.expire_snapshots(retain_min=1, time_retained=0)
    t.store.file_io.write_bytes(list_path, saved)  # the list outlived its manifests and files
    t.rollback_to("v2")
    restored = t.latest_snapshot()
    assert restored.id == 2 and restored.changelog_manifest_list is None
    assert used_files(t.store) <= {path.rsplit("/", 1)[-1] for path in files_on_disk(t)}
    assert sorted(t.read_incremental(1, 2).column("id").to_pylist()) == [1, 2]

def test_rollback_to_unknown_target(table):
    with pytest.raises(SnapshotNotFoundError):
        table.rollback_to(42)
    with pytest.raises(SnapshotNotFoundError):
        table.rollback_to("nope")
    assert table.latest_snapshot().id == 6


def test_rollback_keeps_files_moved_by_a_later_compaction(catalog):
    """A later compaction may re-level a file without rewriting it; the target still needs it."""
    t = catalog.create_table("db.c", PK_SCHEMA, primary_keys=["dt", "id"], options={"bucket": "1"})
    t.write(pk_batch("a", list(range(50)), 1))
    before = rows(t)
    t.compact(full=True)
    t.write(pk_batch("a", [1], 2))
    t.rollback_to(1)
    assert rows(t) == before


def test_rollback_append_table(catalog):
    t = catalog.create_table("db.ap", pa.schema([("x", pa.int64())]))
    for i in range(4):
        t.write(pa.table({"x": [i]}))
    t.rollback_to(2)
    assert sorted(t.to_arrow().column("x").to_pylist()) == [0, 1]
