"""Append writers keep a bucket's file open across full buffers: a commit's rows fill files of
target-file-size, not one file per buffer's worth (as Paimon's append writer rolls its files)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

import strata

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.float64()), pa.field("s", pa.string())])


def _rows(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    return pa.table({"id": np.arange(start, start + n), "v": rng.random(n),
                     "s": [f"row-{i}" for i in range(start, start + n)]}, schema=SCHEMA)


def _table(tmp_path, target: str, **options: str) -> strata.Table:
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    return catalog.create_table("db.t", SCHEMA, options={"bucket": "-1", "write-buffer-size": "64 kb",
                                                        "target-file-size": target, **options})


def _write_commit(table: strata.Table, batches: int, rng: np.random.Generator) -> list:
    with table.new_write() as writer:
        for i in range(batches):  # each ~100 KB of Arrow: over the 64 KB buffer, a flush each
            writer.write_arrow(_rows(i * 4000, 4000, rng))
        messages = writer.prepare_commit()
    table.new_commit().commit(messages)
    return [f for m in messages for f in m.new_files]


def test_full_buffers_of_one_commit_fill_one_file(tmp_path):
    table = _table(tmp_path, "64 mb")
    files = _write_commit(table, 12, np.random.default_rng(1))
    assert len(files) == 1 and files[0].row_count == 48_000
    got = table.to_arrow()
    assert got.column("id").to_pylist() == list(range(48_000))  # arrival order kept
    assert files[0].min_sequence_number == 0 and files[0].max_sequence_number == 47_999


def test_files_roll_at_the_target_size_across_buffers(tmp_path):
    table = _table(tmp_path, "256 kb")
    files = _write_commit(table, 12, np.random.default_rng(2))
    assert len(files) > 1
    assert all(f.file_size >= 256 * 1024 for f in files[:-1])
    assert sum(f.row_count for f in files) == 48_000
    starts = [f.min_sequence_number for f in files]
    assert starts == sorted(starts) and all(a.max_sequence_number + 1 == b.min_sequence_number
                                            for a, b in itertools.pairwise(files))
    assert table.to_arrow().column("id").to_pylist() == list(range(48_000))


def test_a_writer_closed_before_its_commit_commits_nothing(tmp_path):
    table = _table(tmp_path, "64 mb")
    writer = table.new_write()
    writer.write_arrow(_rows(0, 8000, np.random.default_rng(3)))  # flushed into the open file
    writer.close()
    assert table.latest_snapshot() is None
    _write_commit(table, 2, np.random.default_rng(4))
    assert table.to_arrow().num_rows == 8000
