"""Reads and compactions of deletion-vector (merge-on-write) primary-key tables: a filter on any
column prunes row groups by their statistics, and is applied together with the deletion vectors;
a commit's level-0 file moves up without being rewritten when its old rows only need marking."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.io import data_file_reader
from strata.manifest.manifest_entry import FileKind
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64()), pa.field("s", pa.string())])
GROUP_ROWS = 100
ROWS = 2_000


class DecodeCounter:
    """Counts the rows and row groups the Parquet reader decodes (wraps ParquetFile.iter_batches)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.rows = 0
        self.groups: list[int] = []
        original = pq.ParquetFile.iter_batches
        counter = self

        def iter_batches(self: pq.ParquetFile, *args: object, **kwargs: object) -> Iterator[pa.RecordBatch]:
            groups = kwargs.get("row_groups")
            counter.groups.extend(groups if groups is not None else range(self.metadata.num_row_groups))  # type: ignore[call-overload]
            for batch in original(self, *args, **kwargs):  # type: ignore[arg-type]
                counter.rows += batch.num_rows
                yield batch

        monkeypatch.setattr(pq.ParquetFile, "iter_batches", iter_batches)


@pytest.fixture
def small_row_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("strata.io.data_file_writer.ROW_GROUP_ROWS", GROUP_ROWS)
    monkeypatch.setattr("strata.io.data_file_writer.ROW_GROUP_BYTES", 0)  # groups of GROUP_ROWS exactly


def _rows(ids: np.ndarray, version: int) -> pa.Table:
    # v grows with id: row groups of a file sorted by id have narrow, disjoint v ranges
    return pa.table({"id": ids, "v": ids * 10 + version, "s": [f"{version}-{i}" for i in ids]}, schema=SCHEMA)


def _dv_table(catalog: strata.Catalog, name: str = "db.dv") -> Table:
    return catalog.create_table(name, SCHEMA, primary_keys=["id"],
                                options={"bucket": "1", "deletion-vectors.enabled": "true"})


def _model(updates: list[np.ndarray]) -> dict[int, int]:
    state = {i: i * 10 for i in range(ROWS)}
    for version, ids in enumerate(updates, start=1):
        for i in ids.tolist():
            state[i] = i * 10 + version
    return state


@pytest.mark.usefixtures("small_row_groups")
def test_value_filter_skips_row_groups_of_deletion_vector_files(catalog: strata.Catalog,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    table = _dv_table(catalog)
    table.write(_rows(np.arange(ROWS), 0))
    updates = [np.arange(0, ROWS, 7), np.arange(3, ROWS, 11)]
    for version, ids in enumerate(updates, start=1):
        table.write(_rows(ids, version))
    splits = table.scan()
    assert any(s.deletion_files for s in splits), "the updates marked old rows in deletion vectors"
    model = _model(updates)

    counter = DecodeCounter(monkeypatch)
    low, high = 5_000, 5_990  # v of ids 500..599 (base and updated versions)
    got = table.to_arrow(filter=strata.col("v").between(low, high))
    expected = sorted((i, v) for i, v in model.items() if low <= v <= high)
    assert sorted(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True)) == expected
    total = sum(f.row_count for s in splits for f in s.files)
    # only the few row groups whose v range meets the filter are decoded, in every file
    assert 0 < counter.rows < total / 4, (counter.rows, total)

    counter.rows = 0
    everything = table.to_arrow()
    assert dict(zip(everything.column("id").to_pylist(), everything.column("v").to_pylist(), strict=True)) == model
    assert counter.rows == total  # a full read decodes every row, live or marked


@pytest.mark.usefixtures("small_row_groups")
def test_filter_and_deletions_combine_across_skipped_row_groups(catalog: strata.Catalog) -> None:
    """Positions stay right when row groups are skipped (pruned, or wholly deleted) between read ones."""
    table = _dv_table(catalog)
    table.write(_rows(np.arange(ROWS), 0))
    # delete every row of groups 2 and 3 of the base file, and a scattering elsewhere
    doomed = np.concatenate([np.arange(200, 400), np.arange(401, ROWS, 13)])
    table.delete(_rows(doomed, 0))
    alive = sorted(set(range(ROWS)) - set(doomed.tolist()))
    for low, high in ((0, 19_990), (1_500, 4_500), (3_990, 4_200), (9_000, 12_345)):
        got = table.to_arrow(filter=strata.col("v").between(low, high) & (strata.col("s") != "0-1000"))
        want = [i for i in alive if low <= i * 10 <= high and i != 1000]
        assert sorted(got.column("id").to_pylist()) == want, (low, high)
    assert table.to_arrow(filter=strata.col("v").between(2_000, 3_990)).num_rows == 0


def test_positioned_reader_yields_positions_past_skipped_groups(tmp_path) -> None:
    """read_file with deletions and a filter: positions of the rows kept, across skipped groups."""
    from strata.fs.file_io import LocalFileIO
    from strata.schema.table_schema import TableSchema
    from strata.schema.types import DataField, DataType

    path = str(tmp_path / "f.parquet")
    n = 1_000
    pq.write_table(pa.table({"id": np.arange(n), "v": np.arange(n) * 2}), path, row_group_size=64)
    schema = TableSchema(0, [DataField(0, "id", DataType.from_arrow(pa.int64())),
                             DataField(1, "v", DataType.from_arrow(pa.int64()))])
    mapping = data_file_reader.ColumnMapping(schema, schema, ["id", "v"])
    deleted = np.array(sorted({*range(128, 192), *range(5, n, 9)}), dtype=np.int64)  # group 2 wholly deleted
    predicate = strata.col("v").between(100, 1_500)
    for row_filter in (None, predicate):
        out = pa.concat_tables(data_file_reader.read_file(
            LocalFileIO(), path, mapping, prune=predicate, deleted=deleted, positions=True, row_filter=row_filter,
            batch_rows=50))
        positions = out.column(data_file_reader.ROW_POSITION).to_pylist()
        assert positions == out.column("id").to_pylist()  # a row's position is its id here
        kept = [i for i in range(n) if i not in set(deleted.tolist())]
        if row_filter is None:  # row groups pruned by the predicate's statistics only
            assert set(positions) >= {i for i in kept if 100 <= 2 * i <= 1_500}
            assert not set(positions) & set(deleted.tolist())
        else:
            assert positions == [i for i in kept if 100 <= 2 * i <= 1_500]


def test_level0_file_moves_up_without_rewrite(catalog: strata.Catalog) -> None:
    """Deduplicate: a commit's level-0 file is upgraded in place; only the rows it supersedes are marked."""
    table = _dv_table(catalog)
    table.write(_rows(np.arange(ROWS), 0))
    before = {f.file_name for s in table.scan() for f in s.files}
    table.write(_rows(np.arange(0, ROWS, 5), 1))
    snapshot = table.latest_snapshot()
    assert snapshot is not None and snapshot.commit_kind == "COMPACT"
    store = table.manifest_store
    delta = store.read_entries(store.read_manifest_list(snapshot.delta_manifest_list))
    added = {e.file.file_name: e.file.level for e in delta if e.kind == FileKind.ADD}
    deleted = {e.file.file_name: e.file.level for e in delta if e.kind == FileKind.DELETE}
    assert len(added) == 1 and added.keys() == deleted.keys(), "the new file changed level only"
    (name,) = added
    assert deleted[name] == 0 and added[name] > 0 and name not in before
    (split,) = table.scan()
    assert split.deletion_files is not None and set(split.deletion_files) == before
    (vector,) = split.deletion_files.values()
    assert vector.cardinality == ROWS // 5
    got = table.to_arrow()
    assert dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True)) == \
        _model([np.arange(0, ROWS, 5)])


@pytest.mark.parametrize("options", [{"merge-engine": "partial-update"}, {"sequence.field": "v"},
                                     {"ignore-delete": "true"}], ids=["partial-update", "sequence-field",
                                                                      "ignore-delete"])
def test_engines_that_need_the_old_values_merge_them(catalog: strata.Catalog, options: dict[str, str]) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "deletion-vectors.enabled": "true", **options})
    table.write(_rows(np.arange(100), 0))
    newer = pa.table({"id": [1, 2, 3], "v": [5, 1_000, None], "s": [None, "x", "y"]}, schema=SCHEMA)
    table.write(newer)
    got = {r["id"]: (r["v"], r["s"]) for r in table.to_arrow().to_pylist()}
    assert len(got) == 100
    if "merge-engine" in options:  # nulls keep the old field
        assert [got[1], got[2], got[3]] == [(5, "0-1"), (1_000, "x"), (30, "y")]
    elif "sequence.field" in options:  # the larger v wins, whichever commit wrote it
        assert [got[1], got[2], got[3]] == [(10, "0-1"), (1_000, "x"), (30, "0-3")]
    else:
        assert [got[1], got[2], got[3]] == [(5, None), (1_000, "x"), (None, "y")]
