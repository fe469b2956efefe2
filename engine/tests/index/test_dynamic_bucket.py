"""Dynamic bucket mode (bucket = -1) of primary-key tables: placement through the HASH index,
keys that stay in their bucket, concurrent writers, merge engines, deletion vectors, changelog,
compaction, overwrite, expiry and orphan cleanup. Local and MinIO (the `catalog` fixture)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from dynamic_helpers import check_placement, hash_index, partition_row

import strata
from strata.errors import CommitConflictError, SchemaMismatchError
from strata.format.bucket import hash_rows
from strata.snapshot.snapshot import CommitKind

SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("v", pa.int64())])
TARGET = 40


def batch(dt: str, ids: range | list[int], v: int) -> pa.Table:
    ids = list(ids)
    return pa.table({"dt": [dt] * len(ids), "id": ids, "v": [v] * len(ids)}, schema=SCHEMA)


def create(catalog: strata.Catalog, name: str = "db.t", **options: str) -> strata.Table:
    return catalog.create_table(name, SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                options={"dynamic-bucket.target-row-num": str(TARGET), **options})


def as_dict(table: strata.Table) -> dict[tuple[str, int], int]:
    data = table.to_arrow()
    keys = list(zip(data.column("dt").to_pylist(), data.column("id").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "a primary key is read twice"
    return dict(zip(keys, data.column("v").to_pylist(), strict=True))


def test_keys_fill_buckets_to_target_and_stay_put(catalog):
    table = create(catalog)
    assert table.core.bucket == -1
    table.write(pa.concat_tables([batch("a", range(100), 1), batch("b", range(30), 1)]))
    placed = check_placement(table)
    a, b = partition_row("a"), partition_row("b")
    sizes = {key: len(h) for key, h in hash_index(table).items()}
    assert sizes == {(a, 0): 40, (a, 1): 40, (a, 2): 20, (b, 0): 30}
    # the index holds BinaryRow hashes of the trimmed key (id): Paimon's HashIndexFile content
    expected = np.sort(hash_rows([pa.array([i for (p, (i,)), bk in placed.items() if p == a and bk == 1],
                                           pa.int64())]))
    assert np.array_equal(np.sort(hash_index(table)[(a, 1)]), expected)
    # another writer, later: old keys keep their bucket, new ones fill bucket 2 then open bucket 3
    table = catalog.get_table("db.t")
    table.write(batch("a", range(50, 150), 2))
    after = check_placement(table)
    assert all(after[k] == bucket for k, bucket in placed.items())
    assert {key: len(h) for key, h in hash_index(table).items() if key[0] == a} == \
        {(a, 0): 40, (a, 1): 40, (a, 2): 40, (a, 3): 30}
    table.delete(batch("a", [0, 120], 0))
    model = {("a", i): 1 for i in range(50)} | {("a", i): 2 for i in range(50, 150)} | \
        {("b", i): 1 for i in range(30)}
    del model[("a", 0)], model[("a", 120)]
    assert as_dict(catalog.get_table("db.t")) == model
    check_placement(catalog.get_table("db.t"))


def test_streaming_writer_commits_repeatedly(catalog):
    table = create(catalog)
    model = {}
    with table.new_write("w") as write:
        commit = table.new_commit("w")
        for step in range(4):
            ids = range(step * 25, step * 25 + 50)
            write.write_arrow(batch("a", ids, step))
            model |= {("a", i): step for i in ids}
            commit.commit(write.prepare_commit(), identifier=step + 1)
    assert as_dict(catalog.get_table("db.t")) == model
    sizes = sorted(len(h) for h in hash_index(catalog.get_table("db.t")).values())
    assert sizes == [5, 40, 40, 40]  # 125 keys
    check_placement(catalog.get_table("db.t"))
    # each commit replaced index files and removed no row: an APPEND, which Paimon's and
    # Iceberg's incremental readers consume (they skip overwrites)
    manager = catalog.get_table("db.t").store.snapshot_manager
    assert [manager.snapshot(i).commit_kind for i in range(1, 5)] == [CommitKind.APPEND] * 4


def test_concurrent_writers_never_split_a_key(catalog):
    table = create(catalog)
    table.write(batch("a", range(10), 0))
    first, second = table.new_write("w1"), table.new_write("w2")
    first.write_arrow(batch("a", [100, 101], 1))
    second.write_arrow(batch("a", [101, 102], 2))
    third = table.new_write("w3")
    third.write_arrow(batch("b", [101], 3))  # another partition: no conflict
    table.new_commit("w1").commit(first.prepare_commit())
    with pytest.raises(CommitConflictError, match=r"hash index file .* was replaced|placed keys"):
        table.new_commit("w2").commit(second.prepare_commit())
    table.new_commit("w3").commit(third.prepare_commit())
    # an update of indexed keys only changes no index: it commits beside the first writer
    fourth = table.new_write("w4")
    fourth.write_arrow(batch("a", [1, 2], 4))
    table.new_commit("w4").commit(fourth.prepare_commit())
    for w in (first, second, third, fourth):
        w.close()
    got = as_dict(catalog.get_table("db.t"))
    assert got == {("a", i): 0 for i in range(10)} | {("a", 1): 4, ("a", 2): 4, ("a", 100): 1, ("a", 101): 1,
                                                       ("b", 101): 3}
    check_placement(catalog.get_table("db.t"))


def test_new_key_in_a_new_bucket_of_each_writer_is_refused(catalog):
    """Both writers open bucket 1 for different keys, or one writer's key lands in a bucket the
    other opened: the second commit must be refused, never leave a key in two buckets."""
    table = create(catalog, **{"dynamic-bucket.target-row-num": "2"})
    table.write(batch("a", [1, 2], 0))  # bucket 0 full
    first, second = table.new_write("w1"), table.new_write("w2")
    first.write_arrow(batch("a", [7, 8, 9], 1))  # bucket 1 (7, 8), bucket 2 (9)
    second.write_arrow(batch("a", [9], 2))  # bucket 1 (9)
    table.new_commit("w1").commit(first.prepare_commit())
    with pytest.raises(CommitConflictError):
        table.new_commit("w2").commit(second.prepare_commit())
    check_placement(catalog.get_table("db.t"))
    # two writers of one commit placing one new key in different buckets are refused as well
    one, two = table.new_write("s1"), table.new_write("s2")
    one.write_arrow(batch("b", [1, 2, 3], 1))  # 3 -> bucket 1
    two.write_arrow(batch("b", [3], 2))  # 3 -> bucket 0
    with pytest.raises(CommitConflictError, match=r"same new key|replaced|sit beside"):
        table.new_commit("s").commit(one.prepare_commit() + two.prepare_commit())


@pytest.mark.parametrize("options", [
    {"merge-engine": "partial-update"},
    {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum"},
    {"merge-engine": "first-row"},
    {"deletion-vectors.enabled": "true"},
    {"changelog-producer": "lookup"},
    {"changelog-producer": "input"},
], ids=["partial-update", "aggregation", "first-row", "deletion-vectors", "lookup", "input"])
def test_merge_engines_and_changelog(catalog, options):
    table = create(catalog, **options)
    table.write(batch("a", range(60), 1))
    table.write(batch("a", range(30, 90), 2))
    engine = options.get("merge-engine", "deduplicate")
    expected = {("a", i): 1 for i in range(60)}
    for i in range(30, 90):
        if engine == "aggregation":
            expected[("a", i)] = expected.get(("a", i), 0) + 2
        elif engine != "first-row" or ("a", i) not in expected:
            expected[("a", i)] = 2
    table = catalog.get_table("db.t")
    assert as_dict(table) == expected
    table.compact(full=True)
    assert as_dict(catalog.get_table("db.t")) == expected
    check_placement(catalog.get_table("db.t"))
    if "changelog-producer" in options:
        changes = catalog.get_table("db.t").read_incremental(1, 2)
        assert changes.num_rows >= 60


def test_compaction_expiry_and_orphans_keep_the_live_index(catalog):
    table = create(catalog, **{"snapshot.num-retained.min": "1", "snapshot.num-retained.max": "1"})
    for step in range(3):
        table.write(batch("a", range(step * 30, step * 30 + 40), step))
    table = catalog.get_table("db.t")
    table.compact(full=True)
    table.expire_snapshots(retain_min=1, retain_max=1)
    latest = table.snapshot_manager.latest()
    live = {e.file_name for e in table.manifest_store.read_index_manifest(latest.index_manifest)}
    on_disk = {s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/index")}
    assert live and live == on_disk  # replaced index files of expired snapshots are gone
    table.remove_orphan_files(older_than="0 s")
    assert {s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/index")} == live
    assert as_dict(catalog.get_table("db.t")) == {("a", i): min(i // 30, 2) for i in range(100)}
    check_placement(catalog.get_table("db.t"))


def test_overwrite_places_keys_afresh(catalog):
    table = create(catalog)
    table.write(pa.concat_tables([batch("a", range(100), 1), batch("b", range(10), 1)]))
    table.write(batch("a", range(500, 520), 2), mode="overwrite-dynamic")
    table = catalog.get_table("db.t")
    assert as_dict(table) == {("a", i): 2 for i in range(500, 520)} | {("b", i): 1 for i in range(10)}
    sizes = {key: len(h) for key, h in hash_index(table).items()}
    assert sizes == {(partition_row("a"), 0): 20, (partition_row("b"), 0): 10}
    table.write(batch("a", range(510, 560), 3))
    check_placement(catalog.get_table("db.t"))


def test_creation_rules(catalog):
    with pytest.raises(SchemaMismatchError, match=r"cross-partition upsert.*add the partition keys"):
        catalog.create_table("db.x", SCHEMA, partition_keys=["dt"], primary_keys=["id"])
    with pytest.raises(SchemaMismatchError, match="postpone bucket mode"):
        catalog.create_table("db.y", SCHEMA, primary_keys=["id"], options={"bucket": "-2"})
    with pytest.raises(SchemaMismatchError, match=r"log\.system=kafka needs a fixed bucket count"):
        catalog.create_table("db.w", SCHEMA, primary_keys=["id"], options={"log.system": "kafka"})
    fixed = catalog.create_table("db.z", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    assert fixed.core.bucket == 2


def test_cli_creates_dynamic_bucket_tables(tmp_path, capsys):
    from strata.cli import main as cli

    warehouse = str(tmp_path / "wh")
    cli(["--warehouse", warehouse, "create-database", "db"])
    cli(["--warehouse", warehouse, "create-table", "db.t", "--schema", "id BIGINT NOT NULL, v STRING",
         "--primary-key", "id"])
    table = strata.load_catalog(warehouse).get_table("db.t")
    assert table.core.bucket == -1 and "bucket" not in table.schema.options
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}))
    table.write(pa.table({"id": [2], "v": ["c"]}))
    got = strata.load_catalog(warehouse).get_table("db.t").to_arrow().to_pylist()
    assert sorted(got, key=lambda r: r["id"]) == [{"id": 1, "v": "a"}, {"id": 2, "v": "c"}]


def test_prepare_commit_retried_after_a_bucket_failed_writes_the_index_again(catalog):
    """The index files are written while the buckets flush: when a bucket fails, the retry must
    write them again, or the keys placed before it would be missing from the index."""
    table = create(catalog)
    write = table.new_write("w")
    write.write_arrow(pa.concat_tables([batch("a", range(60), 1), batch("b", range(10), 1)]))
    failing = next(iter(write.writers.values()))
    prepare = failing.prepare_commit

    def fail_once(*args, **kwargs):
        failing.prepare_commit = prepare
        raise OSError("disk full")

    failing.prepare_commit = fail_once
    with pytest.raises(OSError, match="disk full"):
        write.prepare_commit()
    table.new_commit("w").commit(write.prepare_commit())
    write.close()
    table = catalog.get_table("db.t")
    assert len(as_dict(table)) == 70
    check_placement(table)
    assert sum(len(h) for h in hash_index(table).values()) == 70
