"""Write/read round trips of primary-key and append tables: upserts, deletes, every type, projection,
filters and pruning, time travel, incremental reads, overwrites, file rolling and streaming reads."""

from __future__ import annotations

import itertools
import time

import pyarrow as pa
import pytest
from table_helpers import ALL_TYPES, all_types_table, live_files, rows, sample_values, snapshot_ids

import strata
from strata import col
from strata.operation.commit import key_decoder

KV_SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string()), ("n", pa.int32())])


def kv_rows(ids, dt="a", tag="v"):
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": [dt] * len(ids),
                     "v": [f"{tag}{i}" for i in ids], "n": pa.array([i * 10 for i in ids], pa.int32())})


def pk_table(catalog, partitioned=False, buckets=1, options=None, name="db.t"):
    opts = {"bucket": str(buckets), **(options or {})}
    return catalog.create_table(name, KV_SCHEMA, partition_keys=["dt"] if partitioned else None,
                                primary_keys=["id", "dt"] if partitioned else ["id"], options=opts)


# -- primary-key tables: upserts and deletes ----------------------------------------------------

@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize("buckets", [1, 3])
def test_pk_upserts_latest_wins(catalog, partitioned, buckets):
    table = pk_table(catalog, partitioned, buckets)
    batches = [pa.concat_tables([kv_rows(range(0, 50), "a"), kv_rows(range(0, 20), "b")]),
               kv_rows(range(10, 30), "a", tag="w"), kv_rows(range(25, 60), "a", tag="x")]
    model = {}
    for batch in batches:
        table.write(batch)
        for r in batch.to_pylist():  # without the partition in the key, "b" rows upsert "a" rows
            model[(r["id"], r["dt"]) if partitioned else r["id"]] = (r["id"], r["dt"], r["v"])
    expected = {(i, d): v for i, d, v in model.values()}
    got = {(r["id"], r["dt"]): r["v"] for r in rows(table)}
    assert got == expected
    assert table.to_arrow().num_rows == len(expected)
    assert snapshot_ids(table) == [1, 2, 3]


def test_pk_duplicate_keys_in_one_batch_keep_the_last(catalog):
    table = pk_table(catalog, buckets=2)
    data = pa.concat_tables([kv_rows([1, 2, 3], tag="a"), kv_rows([2, 3], tag="b"), kv_rows([3], tag="c")])
    table.write(data)
    assert {r["id"]: r["v"] for r in rows(table)} == {1: "a1", 2: "b2", 3: "c3"}


def test_pk_sorted_input_is_written_as_given_and_sorted_duplicates_keep_the_last(catalog):
    # rows that arrive in key order skip the gather; a sorted batch with a repeated key still merges
    table = pk_table(catalog)
    table.write(kv_rows(range(0, 100)))
    files = live_files(table)
    assert len(files) == 1 and files[0].row_count == 100
    table.write(pa.concat_tables([kv_rows(range(200, 203), tag="a"), kv_rows([202, 203], tag="b")]))
    read = rows(table)
    got = {r["id"]: r["v"] for r in read}
    assert len(read) == len(got) == 104 and got[5] == "v5" and got[201] == "a201" and got[202] == "b202"


@pytest.mark.parametrize("partitioned", [False, True])
@pytest.mark.parametrize("buckets", [1, 4])
def test_pk_delete_by_key(catalog, partitioned, buckets):
    table = pk_table(catalog, partitioned, buckets)
    table.write(kv_rows(range(20)))
    table.delete(kv_rows([3, 7, 11, 99]))  # 99 does not exist: a no-op
    assert [r["id"] for r in rows(table)] == [i for i in range(20) if i not in (3, 7, 11)]
    table.write(kv_rows([7], tag="again"))
    got = {r["id"]: r["v"] for r in rows(table)}
    assert got[7] == "again7" and 3 not in got and len(got) == 18


def test_pk_delete_by_key_with_not_null_nested_columns(catalog):
    # the deletion's missing columns are filled with each type's empty value: a NOT NULL ARRAY, MAP or
    # ROW refuses nulls (found by the simulation, seed 11)
    inner = pa.struct([pa.field("a", pa.int32(), nullable=False), pa.field("b", pa.string())])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False),
                        pa.field("tags", pa.list_(pa.string()), nullable=False),
                        pa.field("attrs", pa.map_(pa.string(), pa.int64()), nullable=False),
                        pa.field("s", inner, nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.nested", schema, primary_keys=["id"], options={"bucket": "2"})
    table.write(pa.table({"id": [1, 2, 3], "tags": [["x"], [], ["y", "z"]],
                          "attrs": [[("k", 1)], [], [("j", 2)]],
                          "s": [{"a": 1, "b": "p"}, {"a": 2, "b": None}, {"a": 3, "b": "q"}],
                          "v": ["one", "two", "three"]}, schema=schema))
    table.delete(pa.table({"id": pa.array([2, 9], pa.int64())}))
    assert {r["id"]: (r["tags"], r["s"]["a"], r["v"]) for r in rows(table)} == {
        1: (["x"], 1, "one"), 3: (["y", "z"], 3, "three")}


def test_pk_row_kind_array(catalog):
    table = pk_table(catalog, buckets=2)
    table.write(kv_rows(range(6)))
    data = pa.concat_tables([kv_rows([0, 1], tag="old"), kv_rows([0, 1], tag="new"), kv_rows([2, 3], tag="gone"),
                             kv_rows([10], tag="ins")])
    kinds = ["-U", "-U", "+U", "+U", "-D", "-D", "+I"]
    table.write(data, row_kind=kinds)
    assert {r["id"]: r["v"] for r in rows(table)} == {0: "new0", 1: "new1", 4: "v4", 5: "v5", 10: "ins10"}
    # numeric codes work too, and a lone -U deletes (deduplicate treats retractions as deletes)
    table.write(kv_rows([4, 5]), row_kind=pa.array([1, 3], pa.int8()))
    assert {r["id"] for r in rows(table)} == {0, 1, 10}


def test_rowkind_field_option(catalog):
    schema = pa.schema([("id", pa.int32()), ("v", pa.string()), ("op", pa.string())])
    table = catalog.create_table("db.cdc", schema, primary_keys=["id"],
                                 options={"bucket": "2", "rowkind.field": "op"})
    table.write(pa.table({"id": pa.array([1, 2, 3], pa.int32()), "v": ["a", "b", "c"], "op": ["+I"] * 3}))
    table.write(pa.table({"id": pa.array([1, 1, 2, 4], pa.int32()), "v": ["a", "A", "b", "d"],
                          "op": ["-U", "+U", "-D", "+I"]}))
    assert rows(table) == [{"id": 1, "v": "A", "op": "+U"}, {"id": 3, "v": "c", "op": "+I"},
                           {"id": 4, "v": "d", "op": "+I"}]


@pytest.mark.parametrize("spillable", ["false", "true"])
def test_write_buffer_flushes_many_level0_files_and_reads_merge(catalog, spillable):
    """A full buffer flushes a level-0 file, or with write-buffer-spillable spills to local disk:
    then the commit's flush merges the spilled runs (deletes included) into one run per bucket."""
    # write-only: no compaction, so the level-0 files stay for the reader to merge
    table = pk_table(catalog, buckets=2, options={"write-buffer-size": "1 kb", "write-only": "true",
                                                  "write-buffer-spillable": spillable})
    writer = table.new_write()
    expected = {}
    for round_ in range(6):
        ids = list(range(round_ * 7, round_ * 7 + 30))
        writer.write_arrow(kv_rows(ids, tag=f"r{round_}-"))
        expected.update({i: f"r{round_}-{i}" for i in ids})
    writer.delete(kv_rows([0, 8, 40]))
    for i in (0, 8, 40):
        expected.pop(i)
    table.new_commit().commit(writer.prepare_commit())
    writer.close()
    files = live_files(table)
    per_bucket = {}
    for split in table.scan():
        per_bucket[split.bucket] = len(split.files)
    assert min(per_bucket.values()) >= 4 if spillable == "false" else set(per_bucket.values()) == {1}, per_bucket
    assert all(f.level == 0 for f in files)
    assert {r["id"]: r["v"] for r in rows(table)} == expected
    # a second commit on top, also flushed in pieces, still merges correctly across commits
    table.write(kv_rows(range(0, 60, 2), tag="z"))
    expected.update({i: f"z{i}" for i in range(0, 60, 2)})
    assert {r["id"]: r["v"] for r in rows(table)} == expected
    assert {r["id"]: r["v"] for r in rows(pa.Table.from_batches(list(table.to_batches())))} == expected


@pytest.fixture
def small_roll_checks(monkeypatch):
    """Check the file size every 1024 rows (not every 128K) so small data rolls files."""
    from strata.io import data_file_writer

    monkeypatch.setattr(data_file_writer, "ROLL_CHECK_ROWS", 1024)


def test_target_file_size_rolls_files(catalog, small_roll_checks):
    table = catalog.create_table("db.big", pa.schema([("id", pa.int64()), ("s", pa.string())]),
                                 options={"target-file-size": "16 kb"})
    n = 30_000
    data = pa.table({"id": pa.array(range(n), pa.int64()), "s": pa.array([f"x{i}" for i in range(n)])})
    table.write(data)
    files = live_files(table)
    assert len(files) >= 3
    assert sum(f.row_count for f in files) == n
    got = table.to_arrow()
    assert got.num_rows == n and got.column("id").to_pylist() == list(range(n))


def test_target_file_size_rolls_pk_files_without_key_overlap(catalog, small_roll_checks):
    table = pk_table(catalog, options={"target-file-size": "16 kb", "write-only": "true"})
    table.write(kv_rows(range(30_000)))
    files = live_files(table)
    assert len(files) >= 3
    assert sum(f.row_count for f in files) == 30_000
    # rolled files of one flush cover disjoint key ranges (one sorted run)
    decode = key_decoder(table.schema)
    ranges = sorted((decode(f.min_key), decode(f.max_key)) for f in files)
    assert all(prev[1] < cur[0] for prev, cur in itertools.pairwise(ranges))
    table.write(kv_rows(range(7_000, 7_010), tag="w"))
    got = table.to_arrow(filter=col("id").between(6_995, 7_015))
    assert {r["id"]: r["v"] for r in rows(got)} == {
        i: ("w" if 7_000 <= i < 7_010 else "v") + str(i) for i in range(6_995, 7_016)}
    assert table.to_arrow().num_rows == 30_000


# -- append tables ------------------------------------------------------------------------------

@pytest.mark.parametrize("partitioned", [False, True])
def test_append_unaware_bucket(catalog, partitioned):
    table = catalog.create_table("db.log", KV_SCHEMA, partition_keys=["dt"] if partitioned else None)
    table.write(kv_rows(range(10), "a"))
    table.write(kv_rows(range(5), "b"))
    table.write(kv_rows(range(3), "a"))  # duplicates stay: no primary key
    got = rows(table)
    assert len(got) == 18
    assert sorted((r["id"], r["dt"]) for r in got) == sorted(
        [(i, "a") for i in range(10)] + [(i, "b") for i in range(5)] + [(i, "a") for i in range(3)])
    assert {s.bucket for s in table.scan()} == {0}  # bucket-unaware: everything in bucket-0


@pytest.mark.parametrize("partitioned", [False, True])
def test_append_fixed_bucket_keeps_write_order(catalog, partitioned):
    table = catalog.create_table("db.queue", KV_SCHEMA, partition_keys=["dt"] if partitioned else None,
                                 options={"bucket": "3", "bucket-key": "id"})
    for round_ in range(3):
        table.write(kv_rows([5, 1, 4, 2, 3, 9, 0], tag=f"r{round_}-"))
    splits = table.scan()
    assert sorted({s.bucket for s in splits}) == sorted({s.bucket for s in splits} & {0, 1, 2})
    assert len({s.bucket for s in splits}) > 1
    for split in splits:
        got = table.new_read().to_arrow([split]).to_pylist()
        # inside a bucket, rows come back in write order (oldest commit first)
        tags = [int(r["v"].split("-")[0][1:]) for r in got]
        assert tags == sorted(tags)
        per_round = [r["id"] for r in got if r["v"].startswith("r0-")]
        assert per_round == [i for i in [5, 1, 4, 2, 3, 9, 0] if i in per_round]
    assert len(rows(table)) == 21


# -- every type ---------------------------------------------------------------------------------

@pytest.mark.parametrize("primary_key", [True, False])
def test_every_type_round_trips_with_nulls(catalog, primary_key):
    data = all_types_table(40)
    table = catalog.create_table("db.types", data.schema, primary_keys=["id"] if primary_key else None,
                                 options={"bucket": "2"} if primary_key else None)
    table.write(data.slice(0, 25))
    table.write(data.slice(25))
    got = table.to_arrow().sort_by("id")
    assert got.column_names == data.column_names
    for name, t in [("id", pa.int64()), *ALL_TYPES]:
        assert got.schema.field(name).type == t, name
    assert got.to_pylist() == data.to_pylist()
    # every column has nulls and every null survived
    for name, _ in ALL_TYPES:
        assert got.column(name).null_count == data.column(name).null_count > 0


def test_every_type_upsert_and_delete(catalog):
    data = all_types_table(30)
    table = catalog.create_table("db.types", data.schema, primary_keys=["id"], options={"bucket": "3"})
    table.write(data)
    update = all_types_table(10, id_offset=0).set_column(
        1, "c_bool", pa.array([None] * 10, pa.bool_()))
    table.write(update)
    table.delete(data.slice(20, 5))
    expected = {r["id"]: r for r in data.to_pylist()}
    expected.update({r["id"]: r for r in update.to_pylist()})
    for i in range(20, 25):
        expected.pop(i)
    assert rows(table, ["id"]) == [expected[k] for k in sorted(expected)]


@pytest.mark.parametrize("name,arrow_type", ALL_TYPES, ids=[n for n, _ in ALL_TYPES])
def test_every_type_as_primary_key(catalog, name, arrow_type):
    keys = sample_values(arrow_type, 12)
    if pa.types.is_boolean(arrow_type):
        keys = [False, True]
    n = len(keys)
    schema = pa.schema([("k", arrow_type), ("v", pa.int64())])
    table = catalog.create_table("db.keyed", schema, primary_keys=["k"], options={"bucket": "3"})
    table.write(pa.table({"k": pa.array(keys, arrow_type), "v": pa.array(range(n), pa.int64())}))
    table.write(pa.table({"k": pa.array(keys[::2], arrow_type), "v": pa.array(range(100, 100 + len(keys[::2])))}))
    table.delete(pa.table({"k": pa.array(keys[1:2], arrow_type), "v": pa.array([0], pa.int64())}))
    expected = {k: i for i, k in enumerate(keys)}
    expected.update({k: 100 + i for i, k in enumerate(keys[::2])})
    expected.pop(keys[1])
    got = table.to_arrow()
    assert dict(zip(got.column("k").to_pylist(), got.column("v").to_pylist(), strict=True)) == expected
    assert got.num_rows == len(expected)
    # point lookups by key find exactly the row (bucket and key pruning must not lose it)
    for k in keys[:4]:
        found = table.to_arrow(filter=col("k") == k).column("v").to_pylist()
        assert found == ([expected[k]] if k in expected else [])


@pytest.mark.parametrize("name,arrow_type",
                         [t for t in ALL_TYPES if t[0] not in ("c_float", "c_double")],
                         ids=[n for n, _ in ALL_TYPES if n not in ("c_float", "c_double")])
def test_every_type_as_partition(catalog, name, arrow_type):
    values = sample_values(arrow_type, 3)
    schema = pa.schema([("p", arrow_type), ("id", pa.int32())])
    table = catalog.create_table("db.parts", schema, partition_keys=["p"])
    data = pa.table({"p": pa.array([*values, None], arrow_type), "id": pa.array(range(4), pa.int32())})
    table.write(data)
    assert rows(table, ["id"]) == data.to_pylist()
    got = table.to_arrow(filter=col("p") == values[1])
    assert got.to_pylist() == [{"p": values[1], "id": 1}]
    got = table.to_arrow(filter=col("p").is_null())
    assert got.to_pylist() == [{"p": None, "id": 3}]


# -- projection and filters ---------------------------------------------------------------------

def test_projection(catalog):
    table = pk_table(catalog, partitioned=True, buckets=2)
    table.write(kv_rows(range(10), "a"))
    table.write(kv_rows(range(5), "a", tag="w"))
    got = table.to_arrow(columns=["v", "id"])
    assert got.column_names == ["v", "id"]
    assert rows(got, ["id"]) == [{"v": ("w" if i < 5 else "v") + str(i), "id": i} for i in range(10)]
    # a filter on a column that is not projected
    got = table.to_arrow(columns=["v"], filter=col("n") >= 80)
    assert rows(got) == [{"v": "v8"}, {"v": "v9"}]
    with pytest.raises(strata.errors.SchemaMismatchError, match="nope"):
        table.to_arrow(columns=["nope"])


def test_partition_pruning(catalog):
    table = pk_table(catalog, partitioned=True, buckets=2)
    for dt in ("a", "b", "c"):
        table.write(kv_rows(range(10), dt, tag=dt))
    plan = table.new_scan(col("dt") == "b").plan()
    assert plan.stats.files_skipped > 0
    assert {s.partition_values for s in plan.splits} == {("b",)}
    got = table.to_arrow(filter=col("dt") == "b")
    assert rows(got, ["id"]) == rows(kv_rows(range(10), "b", tag="b"), ["id"])
    got = table.to_arrow(filter=col("dt").isin(["a", "c"]) & (col("id") < 3))
    assert sorted((r["dt"], r["id"]) for r in got.to_pylist()) == [(d, i) for d in "ac" for i in range(3)]


def test_partition_pruning_mixed_commit(catalog):
    table = pk_table(catalog, partitioned=True, buckets=1)
    table.write(pa.concat_tables([kv_rows(range(5), d) for d in "abcd"]))
    plan = table.new_scan(col("dt") >= "c").plan()
    assert plan.stats.files_skipped == 2
    assert rows(table.to_arrow(filter=col("dt") >= "c"), ["dt", "id"]) == rows(
        pa.concat_tables([kv_rows(range(5), d) for d in "cd"]), ["dt", "id"])


def test_key_pruning_pk(catalog):
    table = pk_table(catalog)
    table.write(kv_rows(range(0, 100)))
    table.write(kv_rows(range(1000, 1100)))
    table.write(kv_rows(range(50, 60), tag="w"))
    plan = table.new_scan(col("id") == 1050).plan()
    assert plan.stats.files_skipped == 2
    assert table.to_arrow(filter=col("id") == 1050).to_pylist() == kv_rows([1050]).to_pylist()
    plan = table.new_scan(col("id").between(55, 57)).plan()
    assert plan.stats.files_skipped == 1
    got = table.to_arrow(filter=col("id").between(55, 57))
    assert rows(got) == rows(kv_rows([55, 56, 57], tag="w"))
    # a filter on a value column cannot prune files of a PK table (older versions would leak)
    plan = table.new_scan(col("n") == 550).plan()
    assert plan.stats.files_skipped == 0
    assert table.to_arrow(filter=col("n") == 550).to_pylist() == kv_rows([55], tag="w").to_pylist()
    table.write(kv_rows([55], tag="x").set_column(3, "n", pa.array([1], pa.int32())))
    assert table.to_arrow(filter=col("n") == 550).num_rows == 0


def test_bucket_pruning(catalog):
    table = pk_table(catalog, buckets=8)
    table.write(kv_rows(range(200)))
    plan = table.new_scan(col("id") == 17).plan()
    assert len(plan.splits) == 1
    assert plan.stats.files_skipped >= 6
    assert table.to_arrow(filter=col("id") == 17).to_pylist() == kv_rows([17]).to_pylist()
    assert rows(table.to_arrow(filter=col("id").isin([3, 150, 999]))) == rows(kv_rows([3, 150]))


def test_value_stats_pruning_append(catalog):
    table = catalog.create_table("db.log", KV_SCHEMA)
    table.write(kv_rows(range(0, 100)))
    table.write(kv_rows(range(100, 200)))
    plan = table.new_scan(col("n") > 1500).plan()
    assert plan.stats.files_skipped == 1
    got = table.to_arrow(filter=col("n") > 1500)
    assert rows(got) == rows(kv_rows(range(151, 200)))
    assert table.to_arrow(filter=col("v").startswith("v19")).num_rows == 11
    assert table.to_arrow(filter=col("v").is_null()).num_rows == 0
    assert table.to_arrow(filter=~(col("id") < 199)).to_pylist() == kv_rows([199]).to_pylist()
    assert table.to_arrow(filter=(col("id") == 3) | (col("id") == 150)).num_rows == 2


def test_filters_with_nulls(catalog):
    table = catalog.create_table("db.n", pa.schema([("id", pa.int32()), ("x", pa.int32())]),
                                 primary_keys=["id"], options={"bucket": "1"})
    table.write(pa.table({"id": pa.array([1, 2, 3], pa.int32()), "x": pa.array([None, 5, None], pa.int32())}))
    table.write(pa.table({"id": pa.array([4], pa.int32()), "x": pa.array([None], pa.int32())}))
    assert sorted(table.to_arrow(filter=col("x").is_null()).column("id").to_pylist()) == [1, 3, 4]
    assert table.to_arrow(filter=col("x").is_not_null()).column("id").to_pylist() == [2]
    assert table.to_arrow(filter=col("x") > 1).column("id").to_pylist() == [2]


# -- time travel and incremental reads ----------------------------------------------------------

def test_time_travel_by_snapshot_and_timestamp(catalog):
    table = pk_table(catalog, buckets=2)
    table.write(kv_rows(range(5)))
    time.sleep(0.005)
    table.write(kv_rows(range(3, 8), tag="w"))
    time.sleep(0.005)
    table.delete(kv_rows([0, 4]))
    states = {1: {i: f"v{i}" for i in range(5)}}
    states[2] = {**states[1], **{i: f"w{i}" for i in range(3, 8)}}
    states[3] = {k: v for k, v in states[2].items() if k not in (0, 4)}
    for sid, state in states.items():
        assert {r["id"]: r["v"] for r in rows(table.to_arrow(snapshot_id=sid))} == state
        snap = table.snapshot_manager.snapshot(sid)
        assert {r["id"]: r["v"] for r in rows(table.to_arrow(timestamp_millis=snap.time_millis))} == state
        batches = list(table.to_batches(snapshot_id=sid))
        assert {r["id"]: r["v"] for r in rows(pa.Table.from_batches(batches, table.to_arrow().schema))} == state
    with pytest.raises(strata.errors.SnapshotNotFoundError):
        table.to_arrow(timestamp_millis=table.snapshot_manager.snapshot(1).time_millis - 1000)
    with pytest.raises(strata.errors.SnapshotNotFoundError):
        table.to_arrow(snapshot_id=9)


def test_read_incremental_row_kinds(catalog):
    table = pk_table(catalog, partitioned=True, buckets=2)
    table.write(kv_rows([1, 2, 3]))
    table.write(kv_rows([1, 1]), row_kind=["-U", "+U"])
    table.delete(kv_rows([2]))
    got = table.read_incremental(0, 3)
    assert got.column_names[0] == "_ROW_KIND"
    assert sorted((r["_ROW_KIND"], r["id"]) for r in got.to_pylist()) == sorted(
        [("+I", 1), ("+I", 2), ("+I", 3), ("+U", 1), ("-D", 2)])
    # the write merged -U/+U of key 1 inside the batch; only one snapshot's delta
    got = table.read_incremental(2, 3)
    assert got.to_pylist() == [{"_ROW_KIND": "-D", "id": 2, "dt": "a", "v": "v2", "n": 20}]
    got = table.read_incremental(1, 1)
    assert got.num_rows == 0 and got.column_names[0] == "_ROW_KIND"
    got = table.read_incremental(0, 3, columns=["id"])
    assert got.column_names == ["_ROW_KIND", "id"]


def test_read_incremental_append(catalog):
    table = catalog.create_table("db.log", KV_SCHEMA)
    table.write(kv_rows([1, 2]))
    table.write(kv_rows([3]))
    got = table.read_incremental(1, 2)
    assert got.column_names == ["_ROW_KIND", *KV_SCHEMA.names]
    assert got.to_pylist() == [{"_ROW_KIND": "+I", **kv_rows([3]).to_pylist()[0]}]
    assert table.read_incremental(0, 2).num_rows == 3


# -- overwrite --------------------------------------------------------------------------------------

@pytest.mark.parametrize("primary_key", [True, False])
def test_overwrite_whole_table(catalog, primary_key):
    table = catalog.create_table("db.o", KV_SCHEMA, partition_keys=["dt"],
                                 primary_keys=["id", "dt"] if primary_key else None,
                                 options={"bucket": "2"} if primary_key else None)
    table.write(pa.concat_tables([kv_rows(range(5), "a"), kv_rows(range(5), "b")]))
    result = table.write(kv_rows([7, 8], "c"), mode="overwrite")
    assert rows(table) == rows(kv_rows([7, 8], "c"))
    snap = table.latest_snapshot()
    assert snap.commit_kind == "OVERWRITE" and snap.id == result.snapshot_ids[0]
    assert snap.total_record_count == 2
    assert rows(table.to_arrow(snapshot_id=1)) == rows(
        pa.concat_tables([kv_rows(range(5), "a"), kv_rows(range(5), "b")]))
    # overwriting with nothing truncates
    table.write(kv_rows([], "c"), mode="overwrite")
    assert table.to_arrow().num_rows == 0
    assert table.latest_snapshot().total_record_count == 0


@pytest.mark.parametrize("primary_key", [True, False])
def test_overwrite_static_partition(catalog, primary_key):
    table = catalog.create_table("db.o", KV_SCHEMA, partition_keys=["dt"],
                                 primary_keys=["id", "dt"] if primary_key else None,
                                 options={"bucket": "2"} if primary_key else None)
    table.write(pa.concat_tables([kv_rows(range(5), "a"), kv_rows(range(5), "b")]))
    table.write(kv_rows([1, 9], "a", tag="new"), mode="overwrite", partition={"dt": "a"})
    assert rows(table) == rows(pa.concat_tables([kv_rows([1, 9], "a", tag="new"), kv_rows(range(5), "b")]))
    # a static partition with no data empties that partition only
    table.write(kv_rows([], "b"), mode="overwrite", partition={"dt": "b"})
    assert rows(table) == rows(kv_rows([1, 9], "a", tag="new"))
    with pytest.raises(ValueError, match="partition"):
        table.write(kv_rows([1], "a"), mode="overwrite", partition={"nope": "a"})


def test_overwrite_static_partition_rejects_rows_of_other_partitions(catalog):
    table = catalog.create_table("db.o", KV_SCHEMA, partition_keys=["dt"])
    table.write(pa.concat_tables([kv_rows(range(3), "a"), kv_rows(range(3), "b")]))
    with pytest.raises(ValueError, match="dt"):
        table.write(kv_rows([5], "b"), mode="overwrite", partition={"dt": "a"})
    assert snapshot_ids(table) == [1]
    assert table.to_arrow().num_rows == 6


@pytest.mark.parametrize("primary_key", [True, False])
def test_overwrite_dynamic(catalog, primary_key):
    table = catalog.create_table("db.o", KV_SCHEMA, partition_keys=["dt"],
                                 primary_keys=["id", "dt"] if primary_key else None,
                                 options={"bucket": "2"} if primary_key else None)
    table.write(pa.concat_tables([kv_rows(range(5), d) for d in "abc"]))
    table.write(pa.concat_tables([kv_rows([1], "a", tag="n"), kv_rows([2, 3], "c", tag="n")]),
                mode="overwrite-dynamic")
    expected = pa.concat_tables([kv_rows([1], "a", tag="n"), kv_rows(range(5), "b"), kv_rows([2, 3], "c", tag="n")])
    assert rows(table) == rows(expected)
    # dynamic overwrite with no rows changes nothing
    before = snapshot_ids(table)
    table.write(kv_rows([], "a"), mode="overwrite-dynamic")
    assert snapshot_ids(table) == before and rows(table) == rows(expected)


def test_overwrite_then_upsert_keeps_sequence_order(catalog):
    table = pk_table(catalog, partitioned=True, buckets=1)
    table.write(kv_rows(range(5), "a"))
    table.write(kv_rows(range(5), "a", tag="o"), mode="overwrite", partition={"dt": "a"})
    table.write(kv_rows([2], "a", tag="u"))
    got = {r["id"]: r["v"] for r in rows(table)}
    assert got == {0: "o0", 1: "o1", 2: "u2", 3: "o3", 4: "o4"}


# -- streaming reads ------------------------------------------------------------------------------

@pytest.mark.parametrize("primary_key", [True, False])
def test_to_batches_equals_to_arrow(catalog, primary_key):
    table = catalog.create_table("db.s", KV_SCHEMA, partition_keys=["dt"],
                                 primary_keys=["id", "dt"] if primary_key else None,
                                 options={"bucket": "3"} if primary_key else None)
    for round_ in range(3):
        table.write(pa.concat_tables([kv_rows(range(round_ * 100, round_ * 100 + 300), d, tag=f"r{round_}")
                                      for d in "ab"]))
    whole = table.to_arrow()
    batches = list(table.to_batches())
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert rows(pa.Table.from_batches(batches, whole.schema)) == rows(whole)
    reader = table.new_read().to_record_batch_reader(table.scan())
    assert rows(reader.read_all()) == rows(whole)
    filtered = list(table.to_batches(columns=["id"], filter=col("id") < 50))
    assert sorted(r["id"] for b in filtered for r in b.to_pylist()) == sorted(
        r["id"] for r in whole.to_pylist() if r["id"] < 50)


@pytest.mark.parametrize("cores", [2, 4])
def test_parallel_read_of_uneven_buckets_equals_the_model(catalog, monkeypatch, cores):
    """to_arrow decodes files as separate tasks, largest first, and merges each bucket from them:
    a bucket of many runs (deletes included) beside single-file buckets reads as the model."""
    monkeypatch.setattr("strata.table.read.os.cpu_count", lambda: cores)
    table = pk_table(catalog, partitioned=True, options={"write-only": "true"})
    model: dict[tuple[int, str], str] = {}
    table.write(kv_rows(range(0, 400), "b", tag="base"))
    for round_ in range(5):  # partition a: five level-0 runs with updates and deletes
        ids = range(round_ * 50, round_ * 50 + 200)
        table.write(kv_rows(ids, "a", tag=f"r{round_}"))
        model.update({(i, "a"): f"r{round_}{i}" for i in ids})
        doomed = list(range(round_ * 50, round_ * 50 + 10))
        table.delete(kv_rows(doomed, "a"))
        for i in doomed:
            model.pop((i, "a"), None)
    model.update({(i, "b"): f"base{i}" for i in range(400)})
    assert [len(s.files) for s in sorted(table.scan(), key=lambda s: s.bucket_path)] == [10, 1]
    whole = table.to_arrow()
    assert {(r["id"], r["dt"]): r["v"] for r in whole.to_pylist()} == model
    assert rows(whole) == rows(pa.Table.from_batches(list(table.to_batches()), whole.schema))
    filtered = table.to_arrow(columns=["v"], filter=col("id") >= 150)
    assert sorted(filtered.column("v").to_pylist()) == sorted(v for (i, _), v in model.items() if i >= 150)


def test_empty_table_reads(catalog):
    table = pk_table(catalog, partitioned=True, buckets=2)
    assert table.to_arrow().num_rows == 0
    assert table.to_arrow().schema.names == KV_SCHEMA.names
    assert list(table.to_batches()) == []
    assert table.latest_snapshot() is None
    table.write(kv_rows([]))
    assert table.latest_snapshot() is None  # an empty batch write commits nothing


def test_pandas_round_trip(catalog):
    table = pk_table(catalog, buckets=2)
    df = kv_rows(range(5)).to_pandas()
    table.write(df)
    out = table.to_pandas().sort_values("id").reset_index(drop=True)
    assert out.to_dict("records") == df.to_dict("records")


def test_reopened_table_continues_sequence(catalog):
    table = pk_table(catalog, buckets=2)
    table.write(kv_rows(range(10)))
    again = catalog.get_table("db.t")
    again.write(kv_rows(range(5), tag="w"))
    assert {r["id"]: r["v"] for r in rows(catalog.get_table("db.t"))} == {
        i: ("w" if i < 5 else "v") + str(i) for i in range(10)}


def test_partition_directory_names_follow_java_legacy_names(catalog):
    """Other engines locate data files from the partition values: names must be Java's toString."""
    import datetime as dt
    from decimal import Decimal

    schema = pa.schema([("d", pa.date32()), ("ts", pa.timestamp("ms")), ("f", pa.float64()),
                        ("dec", pa.decimal128(6, 3)), ("s", pa.string()), ("id", pa.int32())])
    table = catalog.create_table("db.names", schema, partition_keys=["d", "ts", "f", "dec", "s"])
    table.write(pa.table({"d": pa.array([dt.date(2024, 2, 29), None]),
                          "ts": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5, 6000), dt.datetime(2024, 1, 2, 3, 4)],
                                         pa.timestamp("ms")),
                          "f": [1e-5, 12.0],
                          "dec": pa.array([Decimal("1.500"), Decimal("-2.000")], pa.decimal128(6, 3)),
                          "s": ["a/b:c}", "   "], "id": pa.array([1, 2], pa.int32())}))
    dirs = sorted(s.bucket_path.removeprefix(f"{table.path}/") for s in table.scan())
    assert dirs == sorted([
        "d=19782/ts=2024-01-02T03%3A04%3A05.006/f=1.0E-5/dec=1.500/s=a%2Fb%3Ac%7D/bucket-0",
        "d=__DEFAULT_PARTITION__/ts=2024-01-02T03%3A04/f=12.0/dec=-2.000/s=__DEFAULT_PARTITION__/bucket-0",
    ])
    assert all(table.file_io.exists(f"{table.path}/{d}") for d in dirs)
    assert rows(table, ["id"])[1]["s"] == "   "


@pytest.mark.parametrize("layout", ["append", "pk-value", "pk-key"])
@pytest.mark.parametrize("name,arrow_type", ALL_TYPES, ids=[n for n, _ in ALL_TYPES])
def test_filters_on_every_type_are_exact(catalog, name, arrow_type, layout):
    """Pruning by partition, bucket, file and row-group statistics must never lose a row."""
    values = sample_values(arrow_type, 12)
    if pa.types.is_boolean(arrow_type):
        values = [False, True]
    n = len(values)
    column = values if layout == "pk-key" else [*values[:-1], None]
    data = pa.table({"x": pa.array(column, arrow_type), "id": pa.array(range(n), pa.int32())})
    key = {"append": None, "pk-value": ["id"], "pk-key": ["x"]}[layout]
    table = catalog.create_table("db.f", data.schema, primary_keys=key,
                                 options={"bucket": "2"} if key else None)
    half = n // 2
    table.write(data.slice(0, half))  # two commits: files with disjoint ranges of x
    table.write(data.slice(half))
    present = [v for v in column if v is not None]
    probes = [present[0], present[len(present) // 2], present[-1]]
    checks = [(lambda v: col("x") == v, lambda a, v: a == v), (lambda v: col("x") < v, lambda a, v: a < v),
              (lambda v: col("x") >= v, lambda a, v: a >= v), (lambda v: col("x") != v, lambda a, v: a != v)]
    for probe in probes:
        for build, test in checks:
            got = sorted(table.to_arrow(filter=build(probe)).column("id").to_pylist())
            expected = [i for i, v in enumerate(column) if v is not None and test(v, probe)]
            assert got == expected, (probe, build(probe))
    got = sorted(table.to_arrow(filter=col("x").isin(probes)).column("id").to_pylist())
    assert got == sorted({i for i, v in enumerate(column) if v in probes})
    got = sorted(table.to_arrow(filter=col("x").is_null()).column("id").to_pylist())
    assert got == [i for i, v in enumerate(column) if v is None]


def test_read_incremental_skips_overwrites(catalog):
    """Java's delta mode reads APPEND snapshots only: an overwrite is not a changelog (its new rows
    without the removed ones would corrupt any consumer replaying the changes)."""
    table = pk_table(catalog, buckets=2)
    table.write(kv_rows([1, 2]))
    table.write(kv_rows([7]), mode="overwrite")
    table.write(kv_rows([8]))
    got = table.read_incremental(0, 3)
    assert sorted((r["_ROW_KIND"], r["id"]) for r in got.to_pylist()) == [("+I", 1), ("+I", 2), ("+I", 8)]


def test_partition_filter_with_compaction_spanning_partitions(catalog):
    """A compaction commit holds DELETE entries of several partitions in one manifest; pruning
    the manifests that added those files by partition must not leave orphan DELETEs."""
    table = pk_table(catalog, partitioned=True, buckets=1, options={"write-only": "true"})
    table.write(kv_rows([0], "a"))
    table.write(kv_rows([0], "b"))
    table.write(pa.concat_tables([kv_rows([0], "a", tag="w"), kv_rows([0], "b", tag="w")]))
    table.compact(full=True)
    for part in "ab":
        got = table.to_arrow(filter=col("dt") == part)
        assert got.to_pylist() == kv_rows([0], part, tag="w").to_pylist()
        plan = table.new_scan(col("dt") == part).plan()
        assert plan.stats.files_skipped > 0


def test_files_compacted_before_commit_still_reach_the_append_snapshot(catalog):
    """A writer that compacts its own new level-0 files before committing must still report
    them as new (Java's MergeTreeWriter drops only intermediate compaction outputs): otherwise
    the APPEND snapshot misses rows and incremental readers, which skip COMPACT snapshots, lose
    those changes for good."""
    table = pk_table(catalog, buckets=1, options={"num-sorted-run.compaction-trigger": "2"})
    table.write(kv_rows(range(10)))
    writer = table.new_write()
    writer.write_arrow(kv_rows([1, 2], tag="w"))
    writer.delete(kv_rows([3]))
    writer.compact(full=True)  # compacts the fresh level-0 file before any commit saw it
    result = table.new_commit().commit(writer.prepare_commit())
    writer.close()
    expected = {i: ("w" if i in (1, 2) else "v") + str(i) for i in range(10) if i != 3}
    kinds = [table.snapshot_manager.snapshot(s).commit_kind for s in result.snapshot_ids]
    assert kinds == ["APPEND", "COMPACT"]
    for sid in result.snapshot_ids:
        assert {r["id"]: r["v"] for r in rows(table.to_arrow(snapshot_id=sid))} == expected
    changes = table.read_incremental(1, table.latest_snapshot().id)
    assert sorted((r["_ROW_KIND"], r["id"]) for r in changes.to_pylist()) == [("+I", 1), ("+I", 2), ("-D", 3)]
