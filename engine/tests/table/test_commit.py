"""The commit protocol: duplicate detection, races for a snapshot id, conflicts, hints and the
snapshot JSON."""

from __future__ import annotations

import json
import os
import threading

import pyarrow as pa
import pytest
from table_helpers import rows, snapshot_ids

from strata.errors import CommitConflictError, CommitFailedError
from strata.manifest.commit_message import CommitMessage
from strata.manifest.manifest_entry import FileKind

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def data(ids, tag="v"):
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


@pytest.fixture(params=["pk", "append"])
def table(request, catalog):
    if request.param == "pk":
        return catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    return catalog.create_table("db.t", SCHEMA)


def prepare(table, batch):
    with table.new_write() as writer:
        writer.write_arrow(batch)
        return writer.prepare_commit()


def snapshot_json(table, sid):
    return json.loads(table.file_io.read_bytes(table.snapshot_manager.path(sid)))


# -- duplicate detection ------------------------------------------------------------------------

def test_replayed_commit_is_skipped(table):
    messages = prepare(table, data(range(5)))
    first = table.new_commit("job-1").commit(messages, identifier=1)
    assert first.snapshot_ids == [1] and not first.skipped_as_duplicate
    # a restarted job replays the same identifier with a fresh TableCommit
    again = table.new_commit("job-1").commit(messages, identifier=1)
    assert again.skipped_as_duplicate and again.snapshot_ids == []
    assert snapshot_ids(table) == [1]
    assert table.to_arrow().num_rows == 5


def test_older_identifiers_are_skipped_other_users_are_not(table):
    commit = table.new_commit("job-1")
    commit.commit(prepare(table, data(range(3))), identifier=5)
    assert commit.last_committed_identifier() == 5
    assert commit.commit(prepare(table, data(range(3, 6))), identifier=4).skipped_as_duplicate
    assert commit.commit(prepare(table, data(range(3, 6))), identifier=5).skipped_as_duplicate
    # another commit user has its own identifiers
    other = table.new_commit("job-2").commit(prepare(table, data(range(10, 12))), identifier=1)
    assert other.snapshot_ids == [2]
    # job-1 is still recognized behind job-2's snapshot
    assert table.new_commit("job-1").commit(prepare(table, data([99])), identifier=5).skipped_as_duplicate
    assert table.new_commit("job-1").commit(prepare(table, data([6])), identifier=6).snapshot_ids == [3]
    assert sorted(r["id"] for r in rows(table)) == [0, 1, 2, 6, 10, 11]


def test_replayed_overwrite_is_skipped(table):
    table.write(data(range(5)))
    commit = table.new_commit("job-1")
    commit.overwrite(prepare(table, data([7])), identifier=3)
    assert commit.overwrite(prepare(table, data([8])), identifier=3).skipped_as_duplicate
    assert [r["id"] for r in rows(table)] == [7]
    assert snapshot_ids(table) == [1, 2]


def test_batch_commits_are_never_deduplicated(table):
    table.write(data([1]), commit_user="u")
    table.write(data([2]), commit_user="u")
    assert snapshot_ids(table) == [1, 2]


def test_streaming_empty_commit_records_progress(table):
    commit = table.new_commit("job-1")
    commit.commit([], identifier=1)
    assert commit.last_committed_identifier() == 1
    assert commit.commit([], identifier=1).skipped_as_duplicate


# -- races for a snapshot id ------------------------------------------------------------------------

def test_lost_race_retries_on_top_of_the_winner(table):
    """Another writer publishes snapshot N between our planning and our publish."""
    table.write(data(range(3)))
    ours = table.new_commit("ours")
    theirs_messages = prepare(table, data(range(100, 103)))
    ours_messages = prepare(table, data(range(200, 203)))
    inner = ours._commit.publish
    raced = []

    def publish(manager, snapshot):
        if not raced:
            raced.append(snapshot.id)
            table.new_commit("theirs").commit(theirs_messages)  # takes snapshot.id first
        return inner(manager, snapshot)

    ours._commit.publish = publish
    result = ours.commit(ours_messages)
    assert raced == [2]
    assert result.snapshot_ids == [3] and result.attempts == 2
    assert snapshot_ids(table) == [1, 2, 3]
    assert table.snapshot_manager.snapshot(2).commit_user == "theirs"
    assert table.snapshot_manager.snapshot(3).commit_user == "ours"
    assert sorted(r["id"] for r in rows(table)) == [0, 1, 2, 100, 101, 102, 200, 201, 202]
    assert table.snapshot_manager.snapshot(3).total_record_count == 9


def test_precreated_snapshot_file_is_never_overwritten(table):
    """A snapshot-N that appears (another process) must not be replaced by ours."""
    table.write(data(range(3)))
    foreign = table.new_commit("foreign")
    foreign_messages = prepare(table, data([50]))
    ours = table.new_commit("ours")
    messages = prepare(table, data([60]))
    inner = ours._commit.publish
    calls = []

    def publish(manager, snapshot):
        calls.append(snapshot.id)
        if len(calls) == 1:
            foreign.commit(foreign_messages)
            before = manager.file_io.read_bytes(manager.path(snapshot.id))
            assert inner(manager, snapshot) is False  # write_new refuses an existing snapshot
            assert manager.file_io.read_bytes(manager.path(snapshot.id)) == before
            return False
        return inner(manager, snapshot)

    ours._commit.publish = publish
    assert ours.commit(messages).snapshot_ids == [3]
    assert calls == [2, 3]
    assert sorted(r["id"] for r in rows(table)) == [0, 1, 2, 50, 60]


def test_ambiguous_publish_failure_that_landed_counts_as_success(table):
    commit = table.new_commit("ours")
    inner = commit._commit.publish

    def publish(manager, snapshot):
        inner(manager, snapshot)
        raise OSError("connection reset after the write")

    commit._commit.publish = publish
    result = commit.commit(prepare(table, data([1, 2])), identifier=1)
    assert result.snapshot_ids == [1]
    assert snapshot_ids(table) == [1]
    assert table.to_arrow().num_rows == 2


def test_concurrent_committers_lose_nothing(table):
    threads, per_thread, errors = 4, 3, []
    barrier = threading.Barrier(threads)
    prepared = {t: [prepare(table, data(range(t * 100 + k * 10, t * 100 + k * 10 + 3)))
                    for k in range(per_thread)] for t in range(threads)}

    def run(t):
        try:
            commit = table.new_commit(f"job-{t}")
            barrier.wait()
            for k in range(per_thread):
                commit.commit(prepared[t][k], identifier=k + 1)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors, errors
    assert snapshot_ids(table) == list(range(1, threads * per_thread + 1))
    expected = sorted(t * 100 + k * 10 + j for t in range(threads) for k in range(per_thread) for j in range(3))
    assert sorted(r["id"] for r in rows(table)) == expected
    users = [table.snapshot_manager.snapshot(s).commit_user for s in snapshot_ids(table)]
    assert sorted(users) == sorted(f"job-{t}" for t in range(threads) for _ in range(per_thread))
    assert table.latest_snapshot().total_record_count == len(expected)


# -- conflicts ------------------------------------------------------------------------------------

def test_deleting_a_file_that_is_not_live_conflicts(table):
    table.write(data(range(5)))
    live = table.scan()[0]
    gone = live.files[0]
    table.write(data([9]), mode="overwrite")  # removes `gone`
    before = snapshot_ids(table)
    stale = CommitMessage(live.partition, live.bucket, live.total_buckets, compact_before=[gone],
                          compact_after=[])
    with pytest.raises(CommitConflictError, match=gone.file_name):
        table.new_commit().commit([stale])
    assert snapshot_ids(table) == before
    assert [r["id"] for r in rows(table)] == [9]


def test_deleting_a_file_twice_conflicts(table):
    table.write(data(range(5)))
    split = table.scan()[0]
    message = CommitMessage(split.partition, split.bucket, split.total_buckets,
                            compact_before=list(split.files), compact_after=[])
    table.new_commit().commit([message])  # a (degenerate) compaction that removes the files
    assert table.to_arrow().num_rows == sum(s.row_count for s in table.scan())
    with pytest.raises(CommitConflictError):
        table.new_commit().commit([message])
    assert len(snapshot_ids(table)) == 2


def test_mixed_bucket_counts_conflict(catalog):
    table = catalog.create_table("db.b", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    table.write(data(range(4)))
    # a compaction output claiming another bucket count for the same partition
    fresh = prepare(table, data([10]))[0]
    wrong = CommitMessage(fresh.partition, fresh.bucket, 5, compact_after=fresh.new_files)
    with pytest.raises(CommitConflictError, match="bucket"):
        table.new_commit().commit([wrong])
    assert snapshot_ids(table) == [1]


# -- hints and snapshot JSON ------------------------------------------------------------------------

def hint(table, name):
    return table.file_io.read_bytes(f"{table.snapshot_manager.dir}/{name}").decode().strip()


def test_latest_and_earliest_hints(table):
    manager = table.snapshot_manager
    for i in range(3):
        table.write(data([i]))
    hint_dir = manager.dir
    assert hint(table, "LATEST") == "3"
    assert hint(table, "EARLIEST") == "1"
    # a stale LATEST hint: readers probe forward; the next commit repairs it
    table.file_io.write_bytes(f"{hint_dir}/LATEST", b"1")
    assert manager.latest_id() == 3
    assert table.to_arrow().num_rows == 3
    table.write(data([3]))
    assert hint(table, "LATEST") == "4"
    # missing or garbage hints: readers list the directory
    table.file_io.delete(f"{hint_dir}/LATEST")
    table.file_io.write_bytes(f"{hint_dir}/EARLIEST", b"garbage")
    assert manager.latest_id() == 4 and manager.earliest_id() == 1
    table.write(data([4]))
    assert snapshot_ids(table) == [1, 2, 3, 4, 5]
    assert hint(table, "LATEST") == "5"


def test_snapshot_json_fields(catalog):
    table = catalog.create_table("db.j", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    table.write(data(range(10)), commit_user="writer", identifier=7)
    table.delete(data([1, 2]))
    table.write(data([5]), mode="overwrite")
    s1, s2, s3 = (snapshot_json(table, i) for i in (1, 2, 3))
    assert s1["version"] == 3 and s1["id"] == 1 and s1["schemaId"] == 0
    assert s1["commitUser"] == "writer" and s1["commitIdentifier"] == 7
    assert s1["commitKind"] == "APPEND"
    assert s1["totalRecordCount"] == 10 and s1["deltaRecordCount"] == 10
    for key in ("baseManifestList", "deltaManifestList", "timeMillis", "baseManifestListSize",
                "deltaManifestListSize"):
        assert key in s1
    assert s2["commitKind"] == "APPEND"
    assert s2["totalRecordCount"] == 12 and s2["deltaRecordCount"] == 2  # -D records are records
    assert s2["commitIdentifier"] == 2**63 - 1
    assert s3["commitKind"] == "OVERWRITE"
    assert s3["totalRecordCount"] == 1 and s3["deltaRecordCount"] == 1 - 12
    assert s1["timeMillis"] <= s2["timeMillis"] <= s3["timeMillis"]
    for s in (s1, s2, s3):
        assert os_exists(table, s["baseManifestList"]) and os_exists(table, s["deltaManifestList"])


def os_exists(table, manifest_name):
    return table.file_io.exists(f"{table.path}/manifest/{manifest_name}")


def test_commit_kinds_of_a_compaction_message(catalog):
    table = catalog.create_table("db.c", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(data(range(3)))
    split = table.scan()[0]
    # re-register the same rows as a compaction output (level 5), removing the level-0 input
    message = CommitMessage(split.partition, split.bucket, split.total_buckets,
                            compact_before=list(split.files), compact_after=[])
    result = table.new_commit().commit([message])
    snap = table.snapshot_manager.snapshot(result.snapshot_ids[0])
    assert snap.commit_kind == "COMPACT"
    assert snap.delta_record_count == -3 and snap.total_record_count == 0
    entries = table.manifest_store.read_entries(
        table.manifest_store.read_manifest_list(snap.delta_manifest_list))
    assert [e.kind for e in entries] == [FileKind.DELETE]


@pytest.mark.local_storage_only(reason="races os.scandir of the local FileIO")
def test_listing_survives_files_vanishing_during_the_scan(table, monkeypatch):
    """Committers create and remove temp files in snapshot/; a concurrent listing must not fail."""
    table.write(data([1]))
    manager = table.snapshot_manager
    vanishing = os.path.join(manager.dir, ".LATEST.tmp")
    real_scandir = os.scandir

    def scandir(path):
        open(vanishing, "w").close()
        entries = list(real_scandir(path))
        os.unlink(vanishing)  # gone before the listing stats it
        return iter(entries)

    monkeypatch.setattr(os, "scandir", scandir)
    os.remove(os.path.join(manager.dir, "LATEST"))
    assert manager.latest_id() == 1


@pytest.mark.parametrize("partitioned", [False, True])
def test_many_commits_with_manifest_merging(catalog, partitioned):
    """Base manifests are merged every few commits: ADD/DELETE pairs must cancel correctly and every
    snapshot must stay readable by time travel."""
    schema = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string())])
    table = catalog.create_table("db.m", schema, partition_keys=["dt"] if partitioned else None,
                                 primary_keys=["id", "dt"] if partitioned else ["id"],
                                 options={"bucket": "2", "manifest.merge-min-count": "3"})
    model, history = {}, {}

    def batch(ids, part, tag):
        return pa.table({"id": pa.array(ids, pa.int64()), "dt": [part] * len(ids),
                         "v": [f"{tag}{i}" for i in ids]})

    for step in range(12):
        part = "ab"[step % 2]
        ids = list(range(step, step + 6))
        if step % 5 == 4:
            table.write(batch(ids, part, f"o{step}-"), mode="overwrite",
                        partition={"dt": part} if partitioned else None)
            model = {k: v for k, v in model.items() if partitioned and k[1] != part}
        elif step % 3 == 2:
            table.delete(batch(ids[:2], part, ""))
            for i in ids[:2]:
                model.pop((i, part if partitioned else None), None)
            ids = []
        else:
            table.write(batch(ids, part, f"s{step}-"))
        if not partitioned:
            model = {(k[0], None): v for k, v in model.items()}
        for i in ids:
            model[(i, part if partitioned else None)] = (part, f"{'o' if step % 5 == 4 else 's'}{step}-{i}")
        history[table.latest_snapshot().id] = dict(model)

    def state(sid):
        return {(r["id"], r["dt"] if partitioned else None): (r["dt"], r["v"])
                for r in table.to_arrow(snapshot_id=sid).to_pylist()}

    for sid, expected in history.items():
        assert state(sid) == expected, sid
    snap = table.latest_snapshot()
    metas = table.manifest_store.read_manifest_list(snap.base_manifest_list)
    assert len(metas) < 12  # merged, not one manifest per commit
    assert snap.total_record_count == sum(f.row_count for s in table.scan() for f in s.files)


def test_retries_exhausted_publish_nothing(catalog):
    table = catalog.create_table("db.r", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "commit.max-retries": "2", "commit.min-retry-wait": "1 ms"})
    ours = table.new_commit("ours")
    messages = prepare(table, data([1]))
    inner = ours._commit.publish
    stolen = []

    def publish(manager, snapshot):
        table.new_commit("thief").commit(prepare(table, data([100 + len(stolen)])))
        stolen.append(snapshot.id)
        return inner(manager, snapshot)  # always one snapshot too late

    ours._commit.publish = publish
    with pytest.raises(CommitFailedError, match="3 attempts"):
        ours.commit(messages)
    assert stolen == [1, 2, 3]
    assert [table.snapshot_manager.snapshot(s).commit_user for s in snapshot_ids(table)] == ["thief"] * 3
    assert sorted(r["id"] for r in rows(table)) == [100, 101, 102]
