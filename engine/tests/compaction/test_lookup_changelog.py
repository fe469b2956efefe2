"""The `lookup` changelog producer: each commit moves only its level-0 files up (the top level is
not rewritten), and its changelog equals the change of every written key, per merge engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.simple_stats import SimpleStats
from strata.mergetree.compact.universal import UniversalCompaction
from strata.mergetree.levels import SortedRun
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("a", pa.int64()),
                    pa.field("b", pa.string())])
Row = tuple[int | None, str | None]
KIND_ORDER = {"-D": 0, "-U": 0, "+U": 1, "+I": 2}


def _top_files(table: Table) -> set[str]:
    top = table.core.num_levels - 1
    return {f.file_name for s in table.new_scan().plan().splits for f in s.files if f.level == top}


def _levels(table: Table) -> list[int]:
    return sorted(f.level for s in table.new_scan().plan().splits for f in s.files)


def _state(table: Table) -> dict[int, Row]:
    out = table.to_arrow()
    return {k: (a, b) for k, a, b in zip(*(out.column(c).to_pylist() for c in ("k", "a", "b")), strict=True)}


def _changes(table: Table, start: int) -> list[tuple[Any, ...]]:
    changes = table.read_incremental(start, table.snapshot_manager.latest_id() or 0)
    rows = zip(*(changes.column(c).to_pylist() for c in ("_ROW_KIND", "k", "a", "b")), strict=True)
    return sorted(rows, key=lambda r: (r[1], KIND_ORDER[r[0]]))


def _expected(before: dict[int, Row], after: dict[int, Row], touched: set[int], row_deduplicate: bool,
              insert_only: bool) -> list[tuple[Any, ...]]:
    """The changelog of a commit from the model: per written key, its value before and after."""
    out: list[tuple[Any, ...]] = []
    for k in sorted(touched):
        old, new = before.get(k), after.get(k)
        if old is None and new is not None:
            out.append(("+I", k, *new))
        elif insert_only:
            continue
        elif old is not None and new is None:
            out.append(("-D", k, *old))
        elif old is not None and new is not None and not (row_deduplicate and old == new):
            out += [("-U", k, *old), ("+U", k, *new)]
    return out


# -- models of the merge engines: apply one written record to the state ---------------------------
def _deduplicate(state: dict[int, Row], kind: str, k: int, a: int | None, b: str | None) -> None:
    if kind == "-D":
        state.pop(k, None)
    else:
        state[k] = (a, b)


def _partial_update(state: dict[int, Row], kind: str, k: int, a: int | None, b: str | None) -> None:
    if kind == "-D":  # partial-update.remove-record-on-delete
        state.pop(k, None)
        return
    old_a, old_b = state.get(k, (None, None))
    state[k] = (a if a is not None else old_a, b if b is not None else old_b)


def _aggregation(state: dict[int, Row], kind: str, k: int, a: int | None, b: str | None) -> None:
    old_a, old_b = state.get(k, (None, None))
    if kind == "-D":  # a retraction: sum subtracts, max ignores it (fields.b.ignore-retract)
        state[k] = (old_a if a is None else (old_a or 0) - a, old_b)
        return
    total = old_a if a is None else (a if old_a is None else old_a + a)
    state[k] = (total, b if old_b is None else (old_b if b is None else max(old_b, b)))


def _first_row(state: dict[int, Row], kind: str, k: int, a: int | None, b: str | None) -> None:
    state.setdefault(k, (a, b))


ENGINES: dict[str, tuple[dict[str, str], Callable[..., None], bool]] = {
    # name: (table options, model, whether deletes are written)
    "deduplicate": ({}, _deduplicate, True),
    "partial-update": ({"merge-engine": "partial-update", "partial-update.remove-record-on-delete": "true"},
                       _partial_update, True),
    "aggregation": ({"merge-engine": "aggregation", "fields.a.aggregate-function": "sum",
                     "fields.b.aggregate-function": "max", "fields.b.ignore-retract": "true"}, _aggregation, True),
    "first-row": ({"merge-engine": "first-row"}, _first_row, False),
}


def _commit_batches(rng: np.random.Generator, state: dict[int, Row], deletes: bool) -> list[tuple[str, pa.Table]]:
    """Upserts of new and existing keys (some rewriting the current value), then deletes."""
    keys = np.unique(rng.integers(0, 200, 40))
    a = rng.integers(-1, 3, len(keys)).astype(object)
    a[rng.random(len(keys)) < 0.2] = None
    b = np.array([None if x < 0.2 else f"s{int(x * 4)}" for x in rng.random(len(keys))], dtype=object)
    live = sorted(state)
    same = rng.choice(live, min(5, len(live)), replace=False) if live else np.array([], dtype=np.int64)
    for k in same:  # the same value again: an unchanged row (dropped with row-deduplicate)
        i = np.searchsorted(keys, k)
        if i < len(keys) and keys[i] == k:
            a[i], b[i] = state[k]
    batches = [("+I", pa.table({"k": keys, "a": list(a), "b": list(b)}, schema=SCHEMA))]
    if deletes and live and rng.random() < 0.5:  # commits without retractions stay partial for every engine
        doomed = np.array(sorted(rng.choice(live, min(6, len(live)), replace=False)), dtype=np.int64)
        values = [state[k][0] if k in state else 0 for k in doomed.tolist()]
        batches.append(("-D", pa.table({"k": doomed, "a": values, "b": [None] * len(doomed)}, schema=SCHEMA)))
    return batches


@pytest.mark.parametrize("row_deduplicate", [False, True])
@pytest.mark.parametrize("engine", list(ENGINES))
def test_changelog_equals_the_model(catalog, engine: str, row_deduplicate: bool) -> None:
    options, model, deletes = ENGINES[engine]
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "changelog-producer": "lookup", "num-sorted-run.compaction-trigger": "3",
        "changelog-producer.row-deduplicate": str(row_deduplicate).lower(), **options})
    rng = np.random.default_rng(11)
    state: dict[int, Row] = {}
    commit = table.new_commit("u")
    with table.new_write() as writer:
        for i in range(10):
            before, start = dict(state), table.snapshot_manager.latest_id() or 0
            touched: set[int] = set()
            for kind, rows in _commit_batches(rng, state, deletes):
                writer.write_arrow(rows, row_kind=kind)
                for k, a, b in zip(*(rows.column(c).to_pylist() for c in ("k", "a", "b")), strict=True):
                    model(state, kind, k, a, b)
                    touched.add(k)
            commit.commit(writer.prepare_commit(), identifier=i)
            assert 0 not in _levels(table), "level-0 files must move up at commit"
            assert _state(table) == state
            assert _changes(table, start) == _expected(before, state, touched, row_deduplicate,
                                                       insert_only=engine == "first-row"), f"commit {i}"


@pytest.mark.parametrize("engine", list(ENGINES))
def test_commits_do_not_rewrite_the_top_level(catalog, engine: str) -> None:
    options, model, _ = ENGINES[engine]
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                 options={"bucket": "1", "changelog-producer": "lookup", **options})
    base = 2000
    # random values: the top file is clearly larger than a commit's (keys alone delta-encode to
    # almost nothing), so the size ratio never merges a commit's level-0 file into it
    values = np.random.default_rng(1).integers(0, 2**40, base)
    table.write(pa.table({"k": np.arange(base), "a": values, "b": ["x"] * base}, schema=SCHEMA))
    table.compact(full=True)
    top = _top_files(table)
    assert top
    rng = np.random.default_rng(3)
    state = _state(table)
    commit = table.new_commit("u")
    with table.new_write() as writer:
        for i in range(8):
            start, before = table.snapshot_manager.latest_id() or 0, dict(state)
            keys = np.unique(np.concatenate([rng.integers(0, base, 20), np.arange(base + 10 * i, base + 10 * i + 5)]))
            rows = pa.table({"k": keys, "a": rng.integers(0, 5, len(keys)), "b": ["y"] * len(keys)}, schema=SCHEMA)
            writer.write_arrow(rows)
            messages = writer.prepare_commit()
            commit.commit(messages, identifier=i)
            for k, a, b in zip(*(rows.column(c).to_pylist() for c in ("k", "a", "b")), strict=True):
                model(state, "+I", k, a, b)
            assert _top_files(table) == top, f"commit {i} rewrote the top level"
            assert 0 not in _levels(table)
            rewritten = sum(f.row_count for m in messages for f in m.compact_after)
            assert rewritten < base // 2, f"commit {i} rewrote {rewritten} rows"
            assert _changes(table, start) == _expected(before, state, set(keys.tolist()), False,
                                                       insert_only=engine == "first-row")
    assert _state(table) == state


def test_composite_keys_and_a_full_compaction(catalog) -> None:
    """Two key columns (matched by a hash join); a later full compaction adds no changelog,
    since every change was already produced when its level-0 file moved up."""
    schema = pa.schema([pa.field("g", pa.string(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                        pa.field("v", pa.int64())])
    table = catalog.create_table("db.c", schema, primary_keys=["g", "k"],
                                 options={"bucket": "1", "changelog-producer": "lookup"})
    table.write(pa.table({"g": ["a", "a", "b"], "k": [1, 2, 1], "v": [1, 2, 3]}, schema=schema))
    start = table.snapshot_manager.latest_id() or 0
    with table.new_write() as writer:
        writer.write_arrow(pa.table({"g": ["a", "b", "c"], "k": [2, 1, 1], "v": [20, 3, 5]}, schema=schema))
        writer.delete(pa.table({"g": ["a"], "k": [1], "v": [None]}, schema=schema))
        table.new_commit("u").commit(writer.prepare_commit())
    changes = table.read_incremental(start, table.snapshot_manager.latest_id() or 0)
    got = sorted(changes.select(["_ROW_KIND", "g", "k", "v"]).to_pylist(), key=lambda r: (r["g"], r["k"], r["v"]))
    assert got == [
        {"_ROW_KIND": "-D", "g": "a", "k": 1, "v": 1}, {"_ROW_KIND": "-U", "g": "a", "k": 2, "v": 2},
        {"_ROW_KIND": "+U", "g": "a", "k": 2, "v": 20}, {"_ROW_KIND": "-U", "g": "b", "k": 1, "v": 3},
        {"_ROW_KIND": "+U", "g": "b", "k": 1, "v": 3}, {"_ROW_KIND": "+I", "g": "c", "k": 1, "v": 5}]
    start = table.snapshot_manager.latest_id() or 0
    table.compact(full=True)
    assert table.read_incremental(start, table.snapshot_manager.latest_id() or 0).num_rows == 0


def _run(level: int, size: int) -> SortedRun:
    meta = DataFileMeta(f"f-{level}-{size}", size, 1, b"", b"", SimpleStats.EMPTY, SimpleStats.EMPTY, 0, 0, 0, level)
    return SortedRun(level, [meta])


def test_level0_is_forced_up_below_the_next_run() -> None:
    """Paimon's ForceUpLevel0Compaction: without a universal pick, every level-0 run (extended by
    size ratio) goes to the level below the next unpicked run; with no level 0, nothing."""
    strategy = UniversalCompaction(trigger=5)
    assert strategy.pick(6, [_run(0, 1), _run(5, 1000)]) is None
    unit = strategy.pick_level0_up(6, [_run(0, 1), _run(0, 2), _run(5, 1000)])
    assert unit is not None and [r.level for r in unit.runs] == [0, 0] and unit.output_level == 4
    unit = strategy.pick_level0_up(6, [_run(0, 10), _run(3, 10), _run(5, 1000)])  # size ratio takes level 3
    assert unit is not None and [r.level for r in unit.runs] == [0, 3] and unit.output_level == 4
    unit = strategy.pick_level0_up(6, [_run(0, 1)])  # the only run: to the top level
    assert unit is not None and unit.output_level == 5
    assert strategy.pick_level0_up(6, [_run(4, 1), _run(5, 1000)]) is None
