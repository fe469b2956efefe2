"""DELETE ... WHERE on append tables with deletion vectors: rows are marked in the vectors of their
files (no file is rewritten), reads drop them, compaction rewrites files without them and drops their
vectors, and concurrent deletes or compactions of the same file conflict instead of losing rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata
from strata.cli import main
from strata.errors import CommitConflictError
from strata.expressions import Predicate
from strata.manifest.index_manifest import INDEX_TYPE_DELETION_VECTORS
from strata.operation.append_compact import compaction_index_changes, plan_append_compaction, run_append_compaction
from strata.operation.delete import prepare_delete
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("dt", pa.string()),
                    pa.field("v", pa.int64()), pa.field("s", pa.string())])


def _rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": ids, "dt": ["a" if i % 2 else "b" for i in ids], "v": [i % 10 for i in ids],
                     "s": [f"s{i}" for i in ids]}, schema=SCHEMA)


def _append_table(catalog: strata.Catalog, name: str = "db.t", **options: str) -> Table:
    return catalog.create_table(name, SCHEMA, partition_keys=["dt"],
                                options={"bucket": "-1", "deletion-vectors.enabled": "true", **options})


def _ids(table: Table, **kwargs: object) -> list[int]:
    return sorted(table.to_arrow(**kwargs).column("id").to_pylist())  # type: ignore[arg-type]


def _files(table: Table) -> set[str]:
    return {f.file_name for s in table.scan() for f in s.files}


def _vector_files(table: Table) -> dict[str, int]:
    """Data file -> rows its deletion vector marks."""
    return {name: d.cardinality or 0 for s in table.scan() for name, d in (s.deletion_files or {}).items()}


def test_delete_where_marks_rows_without_rewriting_files(catalog: strata.Catalog) -> None:
    table = _append_table(catalog)
    for start in (0, 100, 200):
        table.write(_rows(start, 100))
    files = _files(table)
    result = table.delete_where(strata.col("v") == 3)
    assert result.deleted_rows == 30 and result.files == 3 and result.attempts == 1  # ids ending in 3: dt=a
    snapshot = table.latest_snapshot()
    assert snapshot is not None and snapshot.id == result.snapshot_id and snapshot.commit_kind == "OVERWRITE"
    assert _files(table) == files, "no data file is rewritten"
    assert sum(_vector_files(table).values()) == 30
    expected = [i for i in range(300) if i % 10 != 3]
    assert _ids(table) == expected
    # filtered and projected reads drop the marked rows too
    assert _ids(table, filter=strata.col("v").isin([2, 3, 4])) == [i for i in expected if i % 10 in (2, 4)]
    assert table.to_arrow(columns=["s"], filter=strata.col("dt") == "a").num_rows == 120
    assert table.to_arrow(filter=strata.col("id") == 13).num_rows == 0
    # a second delete merges with the existing vectors; deleting nothing commits nothing
    second = table.delete_where((strata.col("id") >= 250) | (strata.col("v") == 3))
    assert second.deleted_rows == 45 and sum(_vector_files(table).values()) == 75
    assert _ids(table) == [i for i in expected if i < 250]
    again = table.delete_where(strata.col("v") == 3)
    assert again.snapshot_id is None and again.deleted_rows == 0
    assert table.latest_snapshot().id == second.snapshot_id  # type: ignore[union-attr]
    # earlier snapshots still read their rows
    assert len(_ids(table, snapshot_id=3)) == 300
    indexes = table.system_table("table_indexes").to_pylist()
    assert {r["index_type"] for r in indexes} == {INDEX_TYPE_DELETION_VECTORS}
    assert sum(r["_CARDINALITY"] for i in indexes for r in i["dv_ranges"]) == 75


def test_compaction_drops_deleted_rows_and_their_vectors(catalog: strata.Catalog) -> None:
    table = _append_table(catalog, **{"compaction.min.file-num": "3"})
    for start in (0, 100, 200, 300):
        table.write(_rows(start, 100))
    table.delete_where(strata.col("id") < 60)  # files of the first commit: 60% deleted
    table.delete_where(strata.col("id").isin([150, 151]))  # 2% of a second-commit file
    expected = _ids(table)
    marked = _vector_files(table)
    table.compact()  # every file is small: all are merged, deleted rows left out
    assert _ids(table) == expected
    assert not _vector_files(table) and table.system_table("table_indexes").num_rows == 0
    assert not set(marked) & _files(table)
    snapshot = table.latest_snapshot()
    assert snapshot is not None and snapshot.commit_kind == "COMPACT"
    assert snapshot.total_record_count == len(expected)


def test_large_files_with_many_deletions_are_rewritten_alone(catalog: strata.Catalog) -> None:
    table = _append_table(catalog, **{"target-file-size": "1 kb"})  # every file counts as large
    for start in (0, 100, 200):
        table.write(_rows(start, 100))
    table.delete_where(strata.col("id").between(0, 29))  # 30% of the first files: above the 20% threshold
    table.delete_where(strata.col("id").between(100, 109))  # 10%: kept until a full compaction
    expected = _ids(table)
    before = _files(table)
    heavy = {n for n, rows in _vector_files(table).items() if rows >= 15}
    light = set(_vector_files(table)) - heavy
    assert len(heavy) == 2 and len(light) == 2
    table.compact()
    after = _files(table)
    assert not heavy & after and light <= after and _ids(table) == expected
    assert set(_vector_files(table)) == light
    table.compact(full=True)
    assert not set(_vector_files(table)) and _ids(table) == expected
    assert not (heavy | light) & _files(table) and before != _files(table)
    assert table.system_table("table_indexes").num_rows == 0


def test_bucketed_append_table(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.b", SCHEMA, options={"bucket": "2", "bucket-key": "id",
                                                            "deletion-vectors.enabled": "true"})
    for start in (0, 50, 100):
        table.write(_rows(start, 50))
    table.delete_where(strata.col("v") >= 7)
    table.delete_where(strata.col("s") == "s11")
    expected = [i for i in range(150) if i % 10 < 7 and i != 11]
    assert _ids(table) == expected
    indexes = table.system_table("table_indexes").to_pylist()
    assert sorted(r["bucket"] for r in indexes) == [0, 1]  # one index file per bucket
    table.compact(full=True)
    assert _ids(table) == expected and table.system_table("table_indexes").num_rows == 0


def test_sort_compaction_leaves_deleted_rows_out(catalog: strata.Catalog) -> None:
    table = _append_table(catalog)
    for start in (0, 100):
        table.write(_rows(start, 100))
    table.delete_where(strata.col("v") < 5)
    expected = _ids(table)
    table.compact(sort_by=["v"])
    assert _ids(table) == expected and not _vector_files(table)


def test_concurrent_deletes_of_one_file_conflict_naming_it(catalog: strata.Catalog) -> None:
    table = _append_table(catalog)
    table.write(_rows(0, 100))
    table.delete_where(strata.col("id") == 0)  # the file of dt=b (even ids) now has a vector
    first = prepare_delete(table, strata.col("id") == 2)
    second = prepare_delete(table, strata.col("id") == 4)  # the same file, the same base
    table.new_commit().commit(first.messages)
    with pytest.raises(CommitConflictError, match=r"the deletion vector of data file data-.*\.parquet .* changed"):
        table.new_commit().commit(second.messages)
    assert _ids(table) == [i for i in range(100) if i not in (0, 2)]
    # a file without a vector yet: the second writer's first vector conflicts too
    fresh = _append_table(catalog, "db.fresh")
    fresh.write(_rows(0, 10))
    one, two = prepare_delete(fresh, strata.col("id") == 1), prepare_delete(fresh, strata.col("id") == 3)
    fresh.new_commit().commit(one.messages)
    with pytest.raises(CommitConflictError, match=r"data file data-.*\.parquet .* got a deletion vector"):
        fresh.new_commit().commit(two.messages)
    assert _ids(fresh) == [0, 2, 3, 4, 5, 6, 7, 8, 9]


def test_delete_where_retries_on_the_new_base(catalog: strata.Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another delete commits between planning and committing: the delete plans again, none is lost."""
    import strata.operation.delete as delete_module

    table = _append_table(catalog)
    table.write(_rows(0, 100))
    calls = []
    original = delete_module.prepare_delete

    def racing(t: Table, predicate: Predicate, snapshot: object = None) -> object:
        prepared = original(t, predicate)
        calls.append(prepared.snapshot_id)
        if len(calls) == 1:  # the concurrent delete of rows of the same files lands now
            other = original(t, strata.col("v") == 1)  # odd ids, as v == 3: the same files
            t.new_commit().commit(other.messages)
        return prepared

    monkeypatch.setattr(delete_module, "prepare_delete", racing)
    result = table.delete_where(strata.col("v") == 3)
    assert result.attempts == 2 and calls[1] == calls[0] + 1
    assert _ids(table) == [i for i in range(100) if i % 10 not in (1, 3)]
    # the index files of the lost attempt were deleted: only those some snapshot lists remain
    listed = {e.file_name for snap in table.snapshots()
              for e in table.manifest_store.read_index_manifest(snap.index_manifest)}
    on_disk = {status.path.rstrip("/").rsplit("/", 1)[-1]
               for status in table.file_io.list_status(f"{table.path}/index")}
    assert on_disk == listed


def test_deletes_of_different_files_do_not_conflict(catalog: strata.Catalog) -> None:
    table = _append_table(catalog)
    table.write(_rows(0, 100))
    a = prepare_delete(table, strata.col("id") == 1)  # dt=a
    b = prepare_delete(table, strata.col("id") == 2)  # dt=b: another file, another index file
    table.new_commit().commit(a.messages)
    table.new_commit().commit(b.messages)
    assert _ids(table) == [i for i in range(100) if i not in (1, 2)]


def test_delete_and_compaction_of_one_file_conflict(catalog: strata.Catalog) -> None:
    table = _append_table(catalog, **{"compaction.min.file-num": "2"})
    for start in (0, 100):
        table.write(_rows(start, 100))
    # a delete planned before a compaction that commits first: the file is gone
    pending = prepare_delete(table, strata.col("id") == 5)
    table.compact()
    with pytest.raises(CommitConflictError, match=r"data file data-.*\.parquet .* is no longer live"):
        table.new_commit().commit(pending.messages)
    assert table.delete_where(strata.col("id") == 5).deleted_rows == 1  # on the new base it works
    # a compaction planned before a delete that commits first: it would bring the rows back, both
    # when the file had a vector the compaction read (id 5's, in dt=a) and when it had none (dt=b)
    table.write(_rows(200, 100))
    for doomed, message in ((7, r"the deletion vector of data file data-.*\.parquet .* changed since"),
                            (8, r"data file data-.*\.parquet .* got deleted rows .* after this compaction read it")):
        tasks = plan_append_compaction(table, full=True)
        messages = [run_append_compaction(table, task) for task in tasks]
        table.delete_where(strata.col("id") == doomed)
        messages += compaction_index_changes(table, tasks)
        with pytest.raises(CommitConflictError, match=message):
            table.new_commit().commit(messages)
    assert _ids(table) == [i for i in range(300) if i not in (5, 7, 8)]
    table.compact(full=True)  # planned on the latest snapshot, it commits
    assert _ids(table) == [i for i in range(300) if i not in (5, 7, 8)] and not _vector_files(table)


def test_delete_where_refusals_and_primary_key_tables(catalog: strata.Catalog) -> None:
    plain = catalog.create_table("db.plain", SCHEMA, options={"bucket": "-1"})
    plain.write(_rows(0, 10))
    with pytest.raises(ValueError, match=r"deletion-vectors\.enabled"):
        plain.delete_where(strata.col("id") == 1)
    table = _append_table(catalog)
    with pytest.raises(strata.errors.FilterError, match="nope"):
        table.delete_where(strata.col("nope") == 1)
    assert table.delete_where(strata.col("id") == 1).snapshot_id is None  # an empty table
    pk = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"],
                              options={"bucket": "2", "deletion-vectors.enabled": "true"})
    pk.write(_rows(0, 50))
    result = pk.delete_where(strata.col("v") > 6)
    assert result.deleted_rows == 15 and result.files == 0
    assert _ids(pk) == [i for i in range(50) if i % 10 <= 6]


def test_cli_delete(capsys: pytest.CaptureFixture[str], warehouse: str, catalog: strata.Catalog) -> None:
    table = _append_table(catalog)
    table.write(_rows(0, 40))
    code = main(["--warehouse", warehouse, "delete", "db.t", "--where", "v BETWEEN 2 AND 3 AND dt = 'a'"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip() == f"deleted 4 rows from db.t in 1 file; snapshot {table.latest_snapshot().id}"  # type: ignore[union-attr]
    assert _ids(table) == [i for i in range(40) if i % 10 != 3]
    code = main(["--warehouse", warehouse, "delete", "db.t", "--where", "v = 3 AND dt = 'a'"])
    out, _ = capsys.readouterr()
    assert code == 0 and out.strip() == "deleted 0 rows from db.t; nothing committed"
    plain = catalog.create_table("db.plain", SCHEMA)
    plain.write(_rows(0, 5))
    code = main(["--warehouse", warehouse, "delete", "db.plain", "--where", "id = 1"])
    _, err = capsys.readouterr()
    assert code == 2 and "deletion-vectors.enabled" in err


def test_a_read_of_only_columns_added_after_a_delete_keeps_every_live_row(catalog: strata.Catalog) -> None:
    # the old files hold none of the columns read, so their batches have no columns: Arrow's take of
    # such a batch gave no rows, and the read lost every row of a file with a deletion vector
    # (found by the simulation, seed 2073)
    table = _append_table(catalog)
    table.write(_rows(0, 20))
    table.delete_where(strata.col("v") < 3)
    table = table.add_column("extra", pa.int32())
    table.write(pa.table({"id": [100], "dt": ["a"], "v": [1], "s": ["new"], "extra": pa.array([7], pa.int32())}))
    assert table.to_arrow().num_rows == 15
    extra = table.to_arrow(columns=["extra"]).column("extra").to_pylist()
    assert sorted(extra, key=lambda v: v is None) == [7] + [None] * 14
