"""The deletion-vector compaction policy of primary-key tables: a file whose vector marks more
than compaction.delete-ratio-threshold of its rows is rewritten without them (a purge), in the
background between commits, and space amplification counts the marked rows, not the newer runs'
size. Reads decode marked rows too (Parquet skips no single row), so they must not pile up."""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import strata
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.compact.manager import CompactManager
from strata.mergetree.compact.universal import UniversalCompaction
from strata.mergetree.levels import Levels, SortedRun
from strata.mergetree.writer import KeyValueBucketWriter
from strata.table.table import Table
from strata.table.write import TableWrite

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64()), pa.field("s", pa.string())])
BASE = 4_000
COMMITS = 24
UPDATES = 300  # per commit, uniform over the existing keys
NEW = 100  # new keys per commit


def _table(catalog: strata.Catalog, **options: str) -> Table:
    return catalog.create_table("db.purge", SCHEMA, primary_keys=["id"],
                                options={"bucket": "1", "deletion-vectors.enabled": "true", **options})


def _rows(ids: np.ndarray, version: int) -> pa.Table:
    return pa.table({"id": ids, "v": ids * 1_000 + version, "s": [f"{version}-{i}" for i in ids.tolist()]},
                    schema=SCHEMA)


class InlineExecutor(Executor):
    """Runs a submitted purge at once: its result is ready, and applied at the next commit after
    that commit's level-0 compaction marked more rows of the purged files (the marks to move)."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def _bucket_writers(writer: TableWrite) -> list[KeyValueBucketWriter]:
    return [w for w in writer.writers.values() if isinstance(w, KeyValueBucketWriter)]


def _files_and_deleted(table: Table) -> list[tuple[DataFileMeta, int]]:
    out = []
    for split in table.new_scan().plan().splits:
        vectors = split.deletion_files or {}
        for f in split.files:
            found = vectors.get(f.file_name)
            out.append((f, (found.cardinality or 0) if found is not None else 0))
    return out


def _read(table: Table) -> dict[int, int]:
    got = table.to_arrow()
    ids = got.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "a key is live in two files"
    return dict(zip(ids, got.column("v").to_pylist(), strict=True))


def _upserts(table: Table, inline: bool) -> tuple[dict[int, int], float, float]:
    """COMMITS upsert commits through one writer; the rows always equal a dict model. Returns the
    model, the largest deleted share of a file after the last commit, and after any commit."""
    rng = np.random.default_rng(7)
    table.write(_rows(np.arange(BASE), 0))
    model = {i: i * 1_000 for i in range(BASE)}
    next_id = BASE
    seen = 0.0
    writer, commit = table.new_write("purge"), table.new_commit("purge")
    try:
        for version in range(1, COMMITS + 1):
            ids = np.concatenate([rng.choice(next_id, UPDATES, replace=False), np.arange(next_id, next_id + NEW)])
            next_id += NEW
            writer.write_arrow(_rows(rng.permutation(ids), version))
            if inline:
                for w in _bucket_writers(writer):
                    assert w.compaction.manager is not None
                    w.compaction.manager.purge_executor = InlineExecutor()
            last = version == COMMITS
            commit.commit(writer.prepare_commit(wait_compaction=last), identifier=version)
            model.update({i: i * 1_000 + version for i in ids.tolist()})
            assert _read(table) == model, version
            seen = max(seen, _worst_share(table))
    finally:
        writer.close()
    return model, _worst_share(table), seen


def _shares(table: Table) -> list[float]:
    """Each live file's deleted share."""
    return [deleted / f.row_count for f, deleted in _files_and_deleted(table)]


def _worst_share(table: Table) -> float:
    return max(_shares(table))


@pytest.mark.parametrize("inline", [False, True], ids=["background", "marks-moved"])
def test_upserts_keep_each_file_under_the_delete_ratio(catalog: strata.Catalog, inline: bool) -> None:
    table = _table(catalog)
    _, worst, _ = _upserts(table, inline)
    assert worst <= 0.2, worst
    dead = sum(d for _, d in _files_and_deleted(table))
    records = sum(f.row_count for f, _ in _files_and_deleted(table))
    assert dead < 0.2 * records


def _one_shot_upserts(table: Table, seed: int) -> list[float]:
    """A base, then 8 commits each updating 15% of its keys by `table.write`; the rows equal a
    dict model; returns each live file's deleted share."""
    rng = np.random.default_rng(seed)
    table.write(_rows(np.arange(BASE), 0))
    model = {i: i * 1_000 for i in range(BASE)}
    for version in range(1, 9):
        ids = rng.choice(BASE, 2 * UPDATES, replace=False)
        table.write(_rows(ids, version))
        model.update({i: i * 1_000 + version for i in ids.tolist()})
    assert _read(table) == model
    return _shares(table)


def test_one_shot_writes_keep_each_file_under_the_delete_ratio(catalog: strata.Catalog) -> None:
    """table.write, a writer per commit as the README shows: its writer closes at once, so the
    purge runs before the commit, not in a background no later commit applies."""
    shares = _one_shot_upserts(_table(catalog), seed=11)
    assert max(shares) <= 0.2, shares


def test_without_the_policy_marked_rows_pile_up(catalog: strata.Catalog) -> None:
    """The same upserts with the threshold at 1 (no purge): the oldest run keeps its marked rows
    until a merge happens to take it (after the last commit it may just have)."""
    table = _table(catalog, **{"compaction.delete-ratio-threshold": "1"})
    _, _, seen = _upserts(table, inline=False)
    assert seen > 0.3, seen


def test_a_purge_overtaken_by_a_compaction_is_dropped(catalog: strata.Catalog) -> None:
    """A purge whose file a full compaction rewrote meanwhile: the compaction's output stays, the
    purge's is deleted, no row doubles."""
    table = _table(catalog)
    rng = np.random.default_rng(3)
    table.write(_rows(np.arange(BASE), 0))
    model = {i: i * 1_000 for i in range(BASE)}
    writer, commit = table.new_write("purge"), table.new_commit("purge")
    try:
        version = 0
        purged = False
        while not purged:
            version += 1
            assert version < 40, "no purge started"
            ids = rng.choice(BASE, UPDATES, replace=False)
            writer.write_arrow(_rows(ids, version))
            for w in _bucket_writers(writer):
                assert w.compaction.manager is not None
                w.compaction.manager.purge_executor = InlineExecutor()
            commit.commit(writer.prepare_commit(), identifier=version)
            model.update({i: i * 1_000 + version for i in ids.tolist()})
            purged = any(w.purge is not None for w in _bucket_writers(writer))
        in_flight = [p for w in _bucket_writers(writer) if w.purge is not None for p in w.purge.result()]
        writer.compact(full=True)
        commit.commit(writer.prepare_commit(), identifier=version + 1)
    finally:
        writer.close()
    assert _read(table) == model
    live = {f.file_name for f, _ in _files_and_deleted(table)}
    written = [f for p in in_flight for f in p.written]
    assert written and not live & {f.file_name for f in written}
    bucket_dir = f"{table.path}/bucket-0"
    assert not any(table.file_io.exists(f"{bucket_dir}/{f.file_name}") for f in written)


def _file(name: str, level: int, rows: int, size: int = 1_000) -> DataFileMeta:
    return DataFileMeta(file_name=name, file_size=size, row_count=rows, min_key=b"", max_key=b"",
                        key_stats=None, value_stats=None, min_sequence_number=0, max_sequence_number=0,
                        schema_id=0, level=level)


def test_space_amplification_of_a_merge_on_write_bucket_counts_marked_rows() -> None:
    runs = [SortedRun(0, [_file("a", 0, 100, 3_000)]), SortedRun(1, [_file("b", 1, 100, 3_000)]),
            SortedRun(2, [_file("c", 2, 100, 3_000)]), SortedRun(3, [_file("d", 3, 100, 3_000)]),
            SortedRun(4, [_file("e", 4, 100, 1_000)])]
    plain = UniversalCompaction(max_size_amp=200, size_ratio=1, trigger=5)
    unit = plain._size_amplification(4, runs)
    assert unit is not None and len(unit.runs) == 5  # newer runs 12x the oldest: a full compaction
    dead = {"e": 10}
    mow = UniversalCompaction(max_size_amp=200, size_ratio=1, trigger=5, deleted_rows=lambda n: dead.get(n, 0))
    assert mow._size_amplification(4, runs) is None  # 10 marked rows of 500: no amplification
    dead.update({"a": 90, "b": 90, "c": 90, "d": 90, "e": 80})  # 440 marked, 60 live
    unit = mow._size_amplification(4, runs)
    assert unit is not None and unit.output_level == 4 and len(unit.runs) == 5


def test_purge_unit_takes_each_file_above_the_threshold_alone() -> None:
    levels = Levels(5, lambda key: (key,), [_file("x", 4, 100), _file("y", 3, 100), _file("z", 3, 100),
                                             _file("l0", 0, 100)])
    manager = CompactManager(levels, UniversalCompaction(), InlineExecutor(), lambda unit, drop: None,  # type: ignore[arg-type,return-value]
                             stop_trigger=10)
    dead = {"x": 30, "y": 20, "z": 21, "l0": 90}
    manager.deleted_rows = lambda name: dead.get(name, 0)
    assert manager.purge_unit() is None  # no threshold: no purge
    manager.delete_ratio = 0.2
    unit = manager.purge_unit()
    assert unit is not None and unit.purge
    assert sorted((r.level, [f.file_name for f in r.files]) for r in unit.runs) == [(3, ["z"]), (4, ["x"])]


def test_a_purged_file_s_cached_keys_carry_over_to_its_rewrite(catalog: strata.Catalog,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups' key cache (sorted key codes and positions of each file): a purge's rewrite
    takes the purged file's codes at the rows it kept, and they are its rows' keys on disk, at
    every commit, while later commits mark its rows."""
    from strata.mergetree.dv_compaction import DeletionVectorCompaction

    rewrites: set[str] = set()
    apply_purge = DeletionVectorCompaction.apply_purge

    def recording(self: DeletionVectorCompaction, *args: Any, **kwargs: Any) -> Any:
        result = apply_purge(self, *args, **kwargs)
        rewrites.update(f.file_name for f in result.after)
        return result

    monkeypatch.setattr(DeletionVectorCompaction, "apply_purge", recording)
    table = _table(catalog)
    rng = np.random.default_rng(5)
    table.write(_rows(np.arange(BASE), 0))
    checked = 0
    writer, commit = table.new_write("carry"), table.new_commit("carry")
    try:
        for version in range(1, COMMITS + 1):
            writer.write_arrow(_rows(rng.choice(BASE, UPDATES, replace=False), version))
            commit.commit(writer.prepare_commit(), identifier=version)
            for w in _bucket_writers(writer):
                dv, manager = w.dv_compaction, w.compaction.manager
                assert dv is not None and manager is not None
                for f in manager.levels.all_files():
                    cached = dv._keys.get(f.file_name)
                    if cached is None or f.file_name not in rewrites:
                        continue
                    every = pa.concat_tables(list(dv.read_positioned(f, dv.key_names, deleted=np.empty(0, np.int64))))
                    keys = every.column(dv.key_names[0]).to_numpy()
                    codes, positions = cached
                    assert np.array_equal(codes, keys if positions is None else keys[positions]), f.file_name
                    checked += 1
    finally:
        writer.close()
    assert rewrites and checked, (rewrites, checked)


def test_a_table_published_to_iceberg_purges_at_one_percent(catalog: strata.Catalog) -> None:
    """Iceberg readers apply position deletes row by row, so a table that publishes Iceberg
    metadata rewrites its files above 1% marked rows unless the table sets its own threshold."""
    iceberg = {"metadata.iceberg.storage": "table-location"}
    plain = _one_shot_upserts(_table(catalog), seed=13)
    assert 0.01 < max(plain) <= 0.2, plain  # the default policy tolerates what Iceberg readers pay for
    catalog.drop_table("db.purge")
    published = _one_shot_upserts(_table(catalog, **iceberg), seed=13)
    assert max(published) <= 0.01, published
    catalog.drop_table("db.purge")
    chosen = _one_shot_upserts(_table(catalog, **iceberg, **{"compaction.delete-ratio-threshold": "0.2"}), seed=13)
    assert 0.01 < max(chosen) <= 0.2, chosen


@pytest.mark.parametrize(("options", "threshold"), [
    ({}, 0.2),
    ({"metadata.iceberg.storage": "rest-catalog"}, 0.01),
    ({"metadata.iceberg.storage": "rest-catalog", "compaction.delete-ratio-threshold": "0.3"}, 0.3),
    ({"metadata.iceberg.storage": "disabled"}, 0.2),
])
def test_the_delete_ratio_threshold_follows_iceberg_publishing(options: dict[str, str], threshold: float) -> None:
    from strata.options import CoreOptions

    assert CoreOptions(options).delete_ratio_threshold == threshold
