"""Property test of dynamic buckets: random upserts and deletes through several writers that
overlap in time (each opened on the snapshot of its moment), committed in random order. A commit
refused as a conflict drops that writer's rows; the table must then equal a dict model, and no
key may sit in two buckets. A `sequence.field` decides between writers (the latest row wins
whatever the commit order), so the model is exact."""

from __future__ import annotations

import itertools
import uuid

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from dynamic_helpers import check_placement, hash_index
from hypothesis import HealthCheck, given, settings

import strata
from strata.errors import CommitConflictError

SCHEMA = pa.schema([("p", pa.string()), ("k", pa.int32()), ("ts", pa.int64()), ("v", pa.int64())])
WRITERS = 3
ROW = st.tuples(st.sampled_from("ab"), st.integers(0, 14), st.booleans())  # partition, key, delete?
STEP = st.tuples(st.integers(0, WRITERS - 1), st.sampled_from(["write", "write", "commit"]),
                 st.lists(ROW, min_size=1, max_size=8, unique_by=lambda r: (r[0], r[1])))
EXAMPLES = {"local": 25, "minio": 5}


def run_history(catalog: strata.Catalog, steps: list[tuple[int, str, list]], target: int) -> None:
    name = f"db.m{uuid.uuid4().hex[:10]}"
    table = catalog.create_table(name, SCHEMA, partition_keys=["p"], primary_keys=["p", "k"],
                                 options={"dynamic-bucket.target-row-num": str(target), "sequence.field": "ts",
                                          "write-only": "true"})  # a commit is one snapshot: refused or not
    clock = itertools.count(1)
    committed: dict[tuple[str, int], tuple[int, bool, int]] = {}  # key -> (ts, deleted, value)
    writers: dict[int, tuple[strata.TableWrite, list]] = {}

    def commit(w: int) -> None:
        write, rows = writers.pop(w)
        try:
            table.new_commit(f"w{w}").commit(write.prepare_commit())
        except CommitConflictError:
            return  # refused: none of its rows count
        finally:
            write.close()
        for p, k, ts, deleted, value in rows:
            if (p, k) not in committed or committed[(p, k)][0] < ts:
                committed[(p, k)] = (ts, deleted, value)

    for w, action, batch in steps:
        if action == "commit":
            if w in writers:
                commit(w)
            continue
        if w not in writers:
            writers[w] = (catalog.get_table(name).new_write(f"w{w}"), [])
        write, rows = writers[w]
        stamped = [(p, k, next(clock), deleted, len(rows)) for p, k, deleted in batch]
        data = pa.table({"p": [r[0] for r in stamped], "k": pa.array([r[1] for r in stamped], pa.int32()),
                         "ts": [r[2] for r in stamped], "v": [r[4] for r in stamped]}, schema=SCHEMA)
        write.write_arrow(data, row_kind=["-D" if r[3] else "+I" for r in stamped])
        rows.extend(stamped)
    for w in list(writers):
        commit(w)
    final = catalog.get_table(name)
    got = final.to_arrow()
    keys = list(zip(got.column("p").to_pylist(), got.column("k").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)), "a key is read twice"
    expected = {key: value for key, (_, deleted, value) in committed.items() if not deleted}
    assert dict(zip(keys, got.column("v").to_pylist(), strict=True)) == expected
    check_placement(final)


def test_writers_match_a_dict(storage: str, catalog: strata.Catalog) -> None:
    @settings(max_examples=EXAMPLES[storage], deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(steps=st.lists(STEP, min_size=2, max_size=10), target=st.sampled_from([2, 5, 100]))
    def history(steps: list[tuple[int, str, list]], target: int) -> None:
        run_history(catalog, steps, target)

    history()


@pytest.mark.parametrize("overlap", [False, True])
def test_two_writers_of_one_commit_share_a_partition(catalog: strata.Catalog, overlap: bool) -> None:
    """Spark tasks given rows of one partition: their index files of one bucket merge into one."""
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["p"], primary_keys=["p", "k"])
    table.write(pa.table({"p": ["a"], "k": pa.array([0], pa.int32()), "ts": [0], "v": [0]}, schema=SCHEMA))
    one, two = table.new_write("t1"), table.new_write("t2")
    one.write_arrow(pa.table({"p": ["a"] * 3, "k": pa.array([1, 2, 3], pa.int32()), "ts": [1] * 3, "v": [1] * 3},
                             schema=SCHEMA))
    second = [3, 4] if overlap else [4, 5]
    two.write_arrow(pa.table({"p": ["a"] * 2, "k": pa.array(second, pa.int32()), "ts": [2] * 2, "v": [2] * 2},
                             schema=SCHEMA))
    table.new_commit("t").commit(one.prepare_commit() + two.prepare_commit())
    table = catalog.get_table("db.t")
    placed = check_placement(table)
    assert set(placed.values()) == {0}
    assert table.to_arrow().num_rows == 1 + 3 + 2 - overlap


def test_two_writers_of_one_overwrite_share_a_partition(catalog: strata.Catalog) -> None:
    """An overwrite's writers start from an empty index: their files of one bucket merge as well."""
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["p"], primary_keys=["p", "k"])
    table.write(pa.table({"p": ["a"] * 3, "k": pa.array([0, 1, 2], pa.int32()), "ts": [0] * 3, "v": [0] * 3},
                         schema=SCHEMA))
    one, two = table.new_write("t1", overwrite=True), table.new_write("t2", overwrite=True)
    one.write_arrow(pa.table({"p": ["a"], "k": pa.array([5], pa.int32()), "ts": [1], "v": [1]}, schema=SCHEMA))
    two.write_arrow(pa.table({"p": ["a"], "k": pa.array([6], pa.int32()), "ts": [1], "v": [2]}, schema=SCHEMA))
    table.new_commit("t").overwrite(one.prepare_commit() + two.prepare_commit())
    table = catalog.get_table("db.t")
    check_placement(table)
    assert sorted(table.to_arrow().column("k").to_pylist()) == [5, 6]
    assert [len(h) for h in hash_index(table).values()] == [2]
