"""write-buffer-spillable: a primary-key writer spills full buffers to local disk and its flush
merges them into one level-0 run per bucket. The same writes with and without spilling must read
back the same, for every merge engine, with deletes, deletion vectors and the input changelog."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import strata
from strata.mergetree.writer import KeyValueBucketWriter
from strata.options import CoreOptions

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.int64()),
                    pa.field("s", pa.string())])
ENGINES = {
    "deduplicate": {},
    "partial-update": {"merge-engine": "partial-update"},
    "aggregation": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
                    "fields.s.aggregate-function": "max"},
    "first-row": {"merge-engine": "first-row"},
    "deletion-vectors": {"deletion-vectors.enabled": "true"},
}


@pytest.fixture
def catalog(tmp_path) -> strata.Catalog:
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    return catalog


def _batches(seed: int, deletes: bool) -> list[tuple[pa.Table, list[str] | None]]:
    """Random upserts (and retractions) over a small key space, so that keys repeat within and
    across spilled runs; some values null (partial update keeps the old one)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(12):
        n = int(rng.integers(200, 900))
        keys = rng.integers(0, 1500, n)
        values = pa.array(rng.integers(0, 100, n), pa.int64(), mask=rng.random(n) < 0.1)
        text = pa.array([f"t{i}-{x}" for x in rng.integers(0, 50, n)])
        kinds = list(rng.choice(["+I", "-D"], n, p=[0.85, 0.15])) if deletes and i % 3 == 2 else None
        out.append((pa.table({"k": keys, "v": values, "s": text}, schema=SCHEMA), kinds))
    return out


def _write(catalog: strata.Catalog, name: str, options: dict[str, str],
           batches: list[tuple[pa.Table, list[str] | None]]) -> strata.Table:
    table = catalog.create_table(f"db.{name}", SCHEMA, primary_keys=["k"],
                                 options={"bucket": "2", "write-buffer-size": "16 kb", **options})
    writer, commit = table.new_write(), table.new_commit("spill-test")
    for i, (rows, kinds) in enumerate(batches):
        if kinds is None:
            writer.write_arrow(rows)
        else:
            writer.write_arrow(rows, row_kind=kinds)
        if i % 6 == 5:
            commit.commit(writer.prepare_commit())
    writer.close()
    return table


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_spilled_writes_read_as_flushed_ones(catalog, engine) -> None:
    options = ENGINES[engine]
    batches = _batches(seed=len(engine), deletes=engine in ("deduplicate", "deletion-vectors"))
    flushed = _write(catalog, "flushed", {**options, "write-buffer-spillable": "false"}, batches)
    # readers skip level 0 of deletion-vector and first-row tables: their writers must compact
    write_only = engine not in ("deletion-vectors", "first-row")
    spilled = _write(catalog, "spilled", {**options, "write-buffer-spillable": "true",
                                          "write-only": str(write_only).lower()}, batches)
    assert spilled.to_arrow().sort_by("k").equals(flushed.to_arrow().sort_by("k"))
    if write_only:  # each commit left one run per bucket: two level-0 files in each bucket
        assert sorted(len(split.files) for split in spilled.scan()) == [2, 2]


def test_the_input_changelog_keeps_every_spilled_record(catalog) -> None:
    batches = _batches(seed=3, deletes=False)
    table = _write(catalog, "t", {"changelog-producer": "input", "write-buffer-spillable": "true"}, batches)
    changelog = sum(snapshot.changelog_record_count or 0 for snapshot in table.snapshots())
    written = sum(rows.num_rows for rows, _ in batches)
    assert changelog == written


def test_past_the_disk_limit_a_writer_flushes(catalog) -> None:
    batches = _batches(seed=5, deletes=False)
    limited = _write(catalog, "limited", {"write-buffer-spillable": "true", "write-only": "true",
                                          "write-buffer-spill.max-disk-size": "1 b"}, batches)
    unlimited = _write(catalog, "unlimited", {"write-buffer-spillable": "true", "write-only": "true"}, batches)
    assert limited.to_arrow().sort_by("k").equals(unlimited.to_arrow().sort_by("k"))
    files = sum(len(split.files) for split in limited.scan())
    assert files > sum(len(split.files) for split in unlimited.scan()) == 4


def test_a_closed_writer_drops_its_spilled_runs(catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"],
                                 options={"bucket": "1", "write-buffer-size": "4 kb", "write-buffer-spillable": "true"})
    writer = table.new_write()
    for rows, _ in _batches(seed=1, deletes=False)[:4]:
        writer.write_arrow(rows)
    [bucket_writer] = writer.writers.values()
    assert isinstance(bucket_writer, KeyValueBucketWriter) and bucket_writer.spilled
    runs = bucket_writer.spilled
    writer.close()
    assert not runs and runs.disk_bytes == 0
    assert table.latest_snapshot() is None and not list(table.scan())


def test_spillable_by_default_on_object_storage_or_when_a_file_outgrows_the_buffer() -> None:
    default = CoreOptions({})
    assert default.write_buffer_spillable(True, object_store=True)
    assert not default.write_buffer_spillable(True, object_store=False)  # 128 MB files, 256 MB buffer
    assert CoreOptions({"write-buffer-size": "64 mb"}).write_buffer_spillable(True, object_store=False)
    assert not CoreOptions({"write-buffer-spillable": "false"}).write_buffer_spillable(True, object_store=True)


@pytest.mark.parametrize("engine", ["deduplicate", "aggregation"])
def test_past_max_runs_the_spilled_runs_merge_on_disk(catalog, engine, monkeypatch) -> None:
    """local-sort.max-num-file-handles: a writer never holds more spilled runs than that (the
    flush's merge holds a batch of each), and merging them early changes no row."""
    from strata.mergetree import spill

    monkeypatch.setattr(spill, "SPILL_BATCH_BYTES", 2048)  # many batches per run
    batches = _batches(seed=11, deletes=engine == "deduplicate")
    options = {**ENGINES[engine], "write-only": "true"}
    flushed = _write(catalog, "flushed", {**options, "write-buffer-spillable": "false"}, batches)
    table = catalog.create_table("db.merged", SCHEMA, primary_keys=["k"], options={
        "bucket": "1", "write-buffer-size": "16 kb", "write-buffer-spillable": "true",
        "local-sort.max-num-file-handles": "3", **options})
    writer, held = table.new_write(), []
    for rows, kinds in batches:
        writer.write_arrow(rows, **({"row_kind": kinds} if kinds is not None else {}))
        [bucket_writer] = writer.writers.values()
        assert isinstance(bucket_writer, KeyValueBucketWriter) and bucket_writer.spilled is not None
        held.append(len(bucket_writer.spilled))
    table.new_commit("spill-test").commit(writer.prepare_commit())
    writer.close()
    assert max(held) == 2 and held.count(1) >= 2  # merged into one at the third, more than once
    assert table.to_arrow().sort_by("k").equals(flushed.to_arrow().sort_by("k"))
    assert [len(split.files) for split in table.scan()] == [1]
