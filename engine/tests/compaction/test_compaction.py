"""Compaction of primary-key and append tables, checked against a plain dict model."""

from __future__ import annotations

import collections
import itertools
from concurrent.futures import Executor, Future

import numpy as np
import pyarrow as pa
import pytest

import strata
from strata.errors import CommitConflictError
from strata.format import binary_row
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def make_table(catalog: strata.Catalog, **options: str) -> Table:
    opts = {"bucket": "1", "write-buffer-size": "32 kb", **options}
    return catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options=opts)


def as_dict(table: pa.Table) -> dict[int, int]:
    return dict(zip(table.column("id").to_pylist(), table.column("v").to_pylist(), strict=True))


def levels_of(table: Table) -> collections.Counter[int]:
    return collections.Counter(f.level for s in table.scan() for f in s.files)


def sorted_runs(table: Table) -> int:
    files = [f for s in table.scan() for f in s.files]
    return sum(1 for f in files if f.level == 0) + len({f.level for f in files if f.level > 0})


def churn(table: Table, commits: int, seed: int = 1, bounded: bool = True) -> dict[int, int]:
    """Random upserts and deletes, one commit each; the model is checked after every commit."""
    rng = np.random.default_rng(seed)
    model: dict[int, int] = {}
    commit = table.new_commit("churn")
    with table.new_write() as writer:
        for i in range(commits):
            ids, values = rng.integers(0, 3000, 1500), rng.integers(0, 10**9, 1500)
            writer.write_arrow(pa.table({"id": ids, "v": values}, schema=SCHEMA))
            model.update(zip(ids.tolist(), values.tolist(), strict=True))
            if i % 4 == 1:
                doomed = rng.integers(0, 3000, 80)
                writer.delete(pa.table({"id": doomed, "v": doomed}, schema=SCHEMA))
                for key in doomed.tolist():
                    model.pop(key, None)
            commit.commit(writer.prepare_commit(), identifier=i)
            assert as_dict(table.to_arrow()) == model, f"commit {i}"
            if bounded:
                assert sorted_runs(table) <= int(table.core.stop_trigger) + 1
    return model


def test_automatic_compaction_keeps_runs_bounded_and_rows_exact(catalog) -> None:
    table = make_table(catalog)
    model = churn(table, 25)
    kinds = collections.Counter(s.commit_kind for s in table.snapshots())
    assert kinds["COMPACT"] >= 2
    assert max(levels_of(table)) >= 1
    assert as_dict(table.to_arrow()) == model


def test_full_compaction_on_demand_leaves_one_top_level_run(catalog) -> None:
    table = make_table(catalog, **{"write-only": "true"})
    model = churn(table, 8, bounded=False)
    assert set(levels_of(table)) == {0}  # write-only writers never compact
    result = table.compact(full=True)
    assert table.snapshot_manager.snapshot(result.snapshot_ids[0]).commit_kind == "COMPACT"
    assert set(levels_of(table)) == {table.core.num_levels - 1}
    assert as_dict(table.to_arrow()) == model
    assert as_dict(table.to_arrow(read_optimized=True)) == model


def test_full_compaction_every_commit_is_copy_on_write(catalog) -> None:
    table = make_table(catalog, **{"full-compaction.delta-commits": "1"})
    churn(table, 5)
    assert set(levels_of(table)) == {table.core.num_levels - 1}


class _LateFuture(Future):
    """A compaction that has not finished whenever the writer merely looks (done() is False, as
    on a busy machine), and runs when its result is waited for."""

    def __init__(self, call) -> None:
        super().__init__()
        self._call = call

    def result(self, timeout=None):
        if self._call is not None:
            call, self._call = self._call, None
            try:
                self.set_result(call())
            except BaseException as exc:  # handed to the waiter, as an executor would
                self.set_exception(exc)
        return super().result(timeout)


class _LateExecutor(Executor):
    def submit(self, fn, /, *args, **kwargs):
        return _LateFuture(lambda: fn(*args, **kwargs))


def test_waiting_commit_compacts_its_own_flush_as_paimon_does(catalog) -> None:
    """prepare_commit(wait_compaction=True) is Paimon's end of input: it collects the running
    compaction, picks again with the flush's new run in view, and waits for that pick too."""
    table = make_table(catalog, **{"num-sorted-run.compaction-trigger": "2"})
    model: dict[int, int] = {}
    commit = table.new_commit("late")
    with table.new_write() as writer:
        writer._executor = _LateExecutor()
        for i in range(5):
            rows = pa.table({"id": np.arange(i * 100, i * 100 + 150), "v": np.full(150, i)}, schema=SCHEMA)
            writer.write_arrow(rows)
            model.update(zip(rows.column("id").to_pylist(), rows.column("v").to_pylist(), strict=True))
            # commit 2 starts a compaction of three runs; it is still running at commits 3 and 4
            commit.commit(writer.prepare_commit(wait_compaction=i == 4), identifier=i)
    # without the second pick, the runs of commits 3 and 4 would sit beside the compacted one
    assert sorted_runs(table) <= 2
    assert as_dict(table.to_arrow()) == model


def test_concurrent_compactions_of_one_bucket_conflict(catalog) -> None:
    table = make_table(catalog, **{"write-only": "true"})
    model = churn(table, 4)
    first, second = table.new_write(), table.new_write()
    for writer in (first, second):
        writer.write_only = False
    first.compact(full=True)
    second.compact(full=True)
    table.new_commit("a").commit(first.prepare_commit())
    snapshots = len(table.snapshots())
    with pytest.raises(CommitConflictError):
        table.new_commit("b").commit(second.prepare_commit())
    assert len(table.snapshots()) == snapshots
    assert as_dict(table.to_arrow()) == model


def test_append_compaction_merges_small_files_and_keeps_order(catalog) -> None:
    table = catalog.create_table("db.q", SCHEMA, options={"bucket": "1", "bucket-key": "id"})
    for i in range(7):
        table.write(pa.table({"id": np.arange(i * 10, i * 10 + 10), "v": np.full(10, i)}, schema=SCHEMA))
    before = table.to_arrow()
    assert len(table.scan()[0].files) == 7
    table.compact()
    assert len(table.scan()[0].files) == 1
    assert table.to_arrow().equals(before)  # same rows, same (write) order


def test_first_row_writers_leave_no_level_zero_files(catalog) -> None:
    # Paimon readers skip level 0 of first-row tables, so every commit must push it up
    table = catalog.create_table("db.f", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "merge-engine": "first-row"})
    table.write(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA))
    table.write(pa.table({"id": [2, 3], "v": [99, 30]}, schema=SCHEMA))
    assert 0 not in levels_of(table)
    assert as_dict(table.to_arrow()) == {1: 10, 2: 20, 3: 30}
    assert as_dict(table.to_arrow(read_optimized=True)) == {1: 10, 2: 20, 3: 30}


def test_compact_only_the_planned_buckets_from_their_planned_files(catalog) -> None:
    """TableWrite.compact(buckets=...): a distributed job's task compacts just the buckets its
    driver planned, from the files the driver saw, and the other buckets keep their files."""
    from strata.table.write import TableWrite

    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])
    table = catalog.create_table("db.planned", schema, primary_keys=["id"],
                                 options={"bucket": "4", "write-only": "true"})
    for round_no in range(3):
        table.write(pa.table({"id": pa.array(range(200), pa.int64()), "v": [f"r{round_no}"] * 200}))
    live: dict[tuple[bytes, int], list] = {}
    for entry in table.new_scan().plan_entries():
        live.setdefault((entry.partition, entry.bucket), []).append(entry.file)
    chosen = dict(sorted(live.items(), key=lambda kv: kv[0][1])[:2])
    with TableWrite(table, compaction=True) as writer:
        writer.compact(full=True, buckets=chosen)
        messages = writer.prepare_commit()
    assert sorted(m.bucket for m in messages if not m.is_empty()) == sorted(b for _, b in chosen)
    table.new_commit("compactor").commit(messages)
    after: dict[tuple[bytes, int], list] = {}
    for entry in table.new_scan().plan_entries():
        after.setdefault((entry.partition, entry.bucket), []).append(entry.file)
    for key, files in after.items():
        assert len(files) == (1 if key in chosen else 3), key
    assert table.to_arrow().sort_by("id").column("v").to_pylist() == ["r2"] * 200



def _id_range(f) -> tuple[int, int]:
    """A file's keys as [first, last + 1)."""
    low, high = (binary_row.deserialize(k, [pa.int64()])[0] for k in (f.min_key, f.max_key))
    return low, high + 1


def test_compaction_moves_large_files_of_lone_runs_up_and_merges_the_overlapping(catalog) -> None:
    """Paimon's compaction by sections: a file whose key range overlaps no other file of the unit,
    and is at least 70% of target-file-size, changes level unrewritten; files that overlap are
    merged, and the output level is still one sorted run."""
    table = make_table(catalog, **{"write-only": "true", "target-file-size": "16 kb"})
    model: dict[int, int] = {}
    rng = np.random.default_rng(3)
    for low, count in ((0, 6000), (20_000, 6000), (10_000, 3000), (21_000, 500)):  # the last overlaps the second
        ids, values = np.arange(low, low + count), rng.integers(0, 2**62, count)  # values that do not compress
        table.write(pa.table({"id": ids, "v": values}, schema=SCHEMA))
        model.update(zip(ids.tolist(), values.tolist(), strict=True))
    before = {f.file_name: _id_range(f) for s in table.scan() for f in s.files}
    sizes = {f.file_name: f.file_size for s in table.scan() for f in s.files}
    overlapping = {n for n, (lo, hi) in before.items()
                   if any(o != n and lo < o_hi and o_lo < hi for o, (o_lo, o_hi) in before.items())}
    lone_large = {n for n in before if n not in overlapping and sizes[n] >= 16 * 1024 // 10 * 7}
    assert lone_large and overlapping
    table.compact(full=True)
    after = [f for s in table.scan() for f in s.files]
    assert {f.level for f in after} == {table.core.num_levels - 1}
    assert as_dict(table.to_arrow()) == model
    kept = {f.file_name for f in after} & set(before)
    assert lone_large <= kept and not kept & overlapping
    bounds = sorted(_id_range(f) for f in after)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(bounds)), "the top level's files overlap"
