"""Orphan file removal (the age guard), partition expiry and consumer files."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from maintenance_helpers import PK_SCHEMA, advance_clock, exists, files_on_disk, live_paths, pk_batch, read_json, rows

from strata.iceberg import latest_metadata_location
from strata.operation.partition_expire import java_pattern_to_strptime, parse_partition_time

# -- orphan files -----------------------------------------------------------------------------------


@pytest.fixture
def table(catalog):
    t = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                             options={"bucket": "2"})
    t.write(pk_batch("a", [1, 2, 3], 1))
    t.write(pk_batch("b", [1, 2], 2))
    t.create_tag("first", 1)
    t.write(pk_batch("a", [1, 2, 3], 3), mode="overwrite", partition={"dt": "a"})
    return t


def _plant_orphans(table):
    """Files a crashed writer or committer would leave: an uncommitted data file, a manifest and
    manifest list of a lost commit attempt, a temporary snapshot file and a stray tag temp file."""
    with table.new_write() as writer:
        writer.write_arrow(pk_batch("c", [7], 7))
        messages = writer.prepare_commit()  # never committed
    data = [f"{table.paths.bucket_dir(table.partition_dir(['c']), m.bucket)}/{f.file_name}"
            for m in messages for f in m.new_files]
    extra = []
    for rel in ("manifest/manifest-deadbeef-0", "manifest/manifest-list-deadbeef-1",
                "snapshot/.snapshot-9.abc.tmp", "tag/.tag-x.abc.tmp"):
        path = f"{table.path}/{rel}"
        table.file_io.write_bytes(path, b"x")
        extra.append(path)
    return data + extra


def test_orphans_older_than_the_guard_are_removed(table, monkeypatch):
    state = {s.id: rows(table, snapshot_id=s.id) for s in table.snapshots()}
    tagged = rows(table, tag="first")
    orphans = _plant_orphans(table)
    assert all(exists(table, p) for p in orphans)
    # young: the default one-day guard keeps them (a writer may be about to commit them)
    result = table.remove_orphan_files()
    assert result.deleted == [] and result.kept_young == len(orphans)
    advance_clock(monkeypatch, 2 * 86400)  # two days later (directories are only removed when old too)
    assert sorted(table.remove_orphan_files(dry_run=True).deleted) == sorted(orphans)
    assert all(exists(table, p) for p in orphans)
    result = table.remove_orphan_files()
    assert sorted(result.deleted) == sorted(orphans) and result.deleted_bytes > 0
    assert not any(exists(table, p) for p in orphans)
    assert not exists(table, f"{table.path}/dt=c")  # the emptied, old partition directory went too
    # nothing referenced was touched: every snapshot and the tag read as before
    for sid, expected in state.items():
        assert rows(table, snapshot_id=sid) == expected
    assert rows(table, tag="first") == tagged
    needed = set().union(*(live_paths(table, s) for s in table.snapshots()))
    assert needed <= files_on_disk(table)


def test_guard_by_explicit_age_and_timestamp(table, monkeypatch):
    orphans = _plant_orphans(table)
    advance_clock(monkeypatch, 3 * 3600)  # the orphans are three hours old
    assert table.remove_orphan_files(older_than="4 h").deleted == []
    assert table.remove_orphan_files(older_than=dt.datetime.now() - dt.timedelta(hours=5)).deleted == []
    assert sorted(table.remove_orphan_files(older_than=dt.timedelta(hours=2)).deleted) == sorted(orphans)
    with pytest.raises(ValueError, match="future"):
        table.remove_orphan_files(older_than=dt.datetime.now() + dt.timedelta(hours=4))  # 1 h after the clock


def test_in_flight_commit_files_survive(table):
    """Files written for a commit that has not published yet are unreferenced but young."""
    with table.new_write() as writer:
        writer.write_arrow(pk_batch("a", [43], 43))
        messages = writer.prepare_commit()
    result = table.remove_orphan_files()
    assert result.deleted == [] and result.kept_young == len(messages)
    table.new_commit().commit(messages)
    assert ("a", 43, 43) in rows(table)


# -- partition expiry ---------------------------------------------------------------------------


SALES = pa.schema([("day", pa.string()), ("id", pa.int32()), ("v", pa.int64())])


def _day(offset: int, fmt: str = "%Y%m%d") -> str:
    return (dt.date.today() - dt.timedelta(days=offset)).strftime(fmt)


def _sales(day: str, ids: list[int]) -> pa.Table:
    return pa.table({"day": [day] * len(ids), "id": pa.array(ids, pa.int32()), "v": pa.array(ids, pa.int64())})


def test_expire_partitions_by_values_time(catalog):
    t = catalog.create_table("db.sales", SALES, partition_keys=["day"], options={
        "partition.timestamp-formatter": "yyyyMMdd", "write-only": "true"})
    for offset in (0, 3, 10, 40):
        t.write(_sales(_day(offset), [offset, offset + 100]))
    before = t.latest_snapshot().id
    assert t.expire_partitions("7 d", dry_run=True) == [{"day": _day(40)}, {"day": _day(10)}]
    assert t.latest_snapshot().id == before
    dropped = t.expire_partitions("7 d")
    assert dropped == [{"day": _day(40)}, {"day": _day(10)}]
    latest = t.latest_snapshot()
    assert latest.id == before + 1 and latest.commit_kind == "OVERWRITE"
    assert sorted(set(t.to_arrow().column("day").to_pylist())) == sorted([_day(0), _day(3)])
    assert t.to_arrow(snapshot_id=before).num_rows == 8  # time travel still sees them
    assert t.expire_partitions("7 d") == []
    # once the snapshots before the drop expire, the partitions' files are gone
    t.expire_snapshots(retain_min=1, time_retained=0)
    assert not any(f"day={_day(40)}" in p for p in files_on_disk(t))


def test_expired_partitions_leave_the_iceberg_mirror_current(catalog):
    """Expiring partitions is a commit of its own: Iceberg readers see the partitions gone at once,
    not at the table's next commit."""
    t = catalog.create_table("db.sales", SALES, partition_keys=["day"], options={
        "partition.timestamp-formatter": "yyyyMMdd", "write-only": "true",
        "metadata.iceberg.storage": "table-location"})
    for offset in (0, 10):
        t.write(_sales(_day(offset), [offset]))
    assert t.expire_partitions("7 d") == [{"day": _day(10)}]
    metadata = json.loads(t.file_io.read_bytes(latest_metadata_location(t)))
    assert metadata["current-snapshot-id"] == t.latest_snapshot().id == 3


def test_partition_expiry_runs_after_commits(catalog):
    t = catalog.create_table("db.auto", SALES, partition_keys=["day"], options={
        "partition.expiration-time": "7 d", "partition.timestamp-formatter": "yyyy-MM-dd",
        "partition.expiration-check-interval": "0 ms"})
    t.write(_sales(_day(30, "%Y-%m-%d"), [1]))
    assert t.to_arrow().num_rows == 0  # the commit itself dropped the old partition
    t.write(_sales(_day(1, "%Y-%m-%d"), [2]))
    assert t.to_arrow().column("id").to_pylist() == [2]
    assert [s.commit_kind for s in t.snapshots()] == ["APPEND", "OVERWRITE", "APPEND"]


def test_partition_time_from_a_pattern_over_two_keys(catalog):
    schema = pa.schema([("d", pa.string()), ("h", pa.string()), ("x", pa.int32())])
    t = catalog.create_table("db.hourly", schema, partition_keys=["d", "h"], options={
        "partition.timestamp-pattern": "$d $h:00:00", "write-only": "true"})
    now = dt.datetime.now()
    old, new = now - dt.timedelta(hours=30), now - dt.timedelta(hours=2)
    for when in (old, new):
        t.write(pa.table({"d": [when.strftime("%Y-%m-%d")], "h": [when.strftime("%H")],
                          "x": pa.array([when.hour], pa.int32())}))
    t.write(pa.table({"d": ["not-a-date"], "h": ["00"], "x": pa.array([0], pa.int32())}))
    assert t.expire_partitions("1 d") == [{"d": old.strftime("%Y-%m-%d"), "h": old.strftime("%H")}]
    assert t.to_arrow().num_rows == 2  # the unparsable partition never expires


def test_update_time_strategy(catalog):
    t = catalog.create_table("db.u", SALES, partition_keys=["day"], options={"write-only": "true"})
    t.write(_sales("x", [1]))
    assert t.expire_partitions("1 h", strategy="update-time") == []
    assert t.expire_partitions("0 ms", strategy="update-time") == [{"day": "x"}]


def test_java_formatter_patterns():
    assert java_pattern_to_strptime("yyyyMMdd") == "%Y%m%d"
    assert java_pattern_to_strptime("yyyy-MM-dd'T'HH:mm:ss") == "%Y-%m-%dT%H:%M:%S"
    assert parse_partition_time("20240105", "yyyyMMdd") == dt.datetime(2024, 1, 5)
    assert parse_partition_time("2024-01-05 13:00:00", None) == dt.datetime(2024, 1, 5, 13)
    assert parse_partition_time("2024-1-5", None) == dt.datetime(2024, 1, 5)
    with pytest.raises(ValueError):
        parse_partition_time("2024/01/05", None)


# -- consumers ----------------------------------------------------------------------------------------


def test_consumer_files(table, monkeypatch):
    assert table.consumers.consumers() == {}
    table.reset_consumer("etl", 3)
    table.reset_consumer("audit", 2)
    assert read_json(table, f"{table.path}/consumer/consumer-etl") == {"nextSnapshot": 3}
    assert table.consumers.consumer("etl") == 3 and table.consumers.consumer("nope") is None
    assert table.consumers.min_next_snapshot() == 2
    assert {r["consumer_id"]: r["next_snapshot_id"] for r in table.system_table("consumers").to_pylist()} == \
        {"etl": 3, "audit": 2}
    table.reset_consumer("etl-2", 4)  # the latest snapshot (3) + 1: at most that
    assert table.clear_consumers("etl.*", excluding="etl") == ["etl-2"]
    assert table.consumers.expire(3600_000) == []
    advance_clock(monkeypatch, 7200)  # neither consumer moved for two hours
    assert sorted(table.consumers.expire(3600_000)) == ["audit", "etl"]
    assert table.clear_consumers() == []
    with pytest.raises(ValueError):
        table.reset_consumer("bad/id", 1)
