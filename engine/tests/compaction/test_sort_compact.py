"""Sort compaction of unaware-bucket append tables (order and z-order): the rows stay exactly the
same, the files come out sorted or z-clustered so file statistics prune range queries, bad input
is refused before anything is written, and pypaimon reads the result."""

from __future__ import annotations

import collections
import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import strata
from strata.cli import main
from strata.errors import CommitConflictError
from strata.expressions import Predicate, col
from strata.io.data_file_writer import DataFileWriter
from strata.operation import sort_compact as sort_compact_module
from strata.operation.zorder import UnsupportedSortTypeError, zorder_keys
from strata.table.table import Table

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("s", pa.string()), ("x", pa.float64()),
                    ("p", pa.string())])
ROWS_PER_COMMIT = 8192
COMMITS = 8
TARGET = 48 * 1024


def make_table(catalog: strata.Catalog, name: str = "db.t", **options: str) -> Table:
    opts = {"bucket": "-1", "target-file-size": str(TARGET), **options}
    return catalog.create_table(name, SCHEMA, partition_keys=["p"], options=opts)


def random_rows(rng: np.random.Generator, n: int, partition: str) -> pa.Table:
    a = rng.integers(0, 1024, n)
    return pa.table({
        "a": pa.array(a, mask=rng.random(n) < 0.01),  # some nulls: they sort first
        "b": rng.integers(0, 1024, n),
        "s": pa.array([f"k{v:05d}" for v in rng.integers(0, 50000, n)]),
        "x": rng.normal(0, 100, n),
        "p": pa.array([partition] * n),
    }, schema=SCHEMA)


def fill(table: Table, partitions: tuple[str, ...] = ("x",), seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(COMMITS):
        for partition in partitions:
            table.write(random_rows(rng, ROWS_PER_COMMIT, partition))


def multiset(data: pa.Table) -> collections.Counter[tuple]:
    return collections.Counter(zip(*(data.column(n).to_pylist() for n in SCHEMA.names), strict=True))


def live_files(table: Table, partition: str | None = None) -> list:
    return sorted((f for s in table.scan() for f in s.files
                   if partition is None or s.partition == table.new_commit()._partition_bytes({"p": partition})),
                  key=lambda f: f.min_sequence_number)


def files_selected(table: Table, predicate: Predicate) -> int:
    return sum(len(s.files) for s in table.new_scan(filter=predicate).plan().splits)


def file_rows(table: Table, partition: str, files: list) -> pa.Table:
    bucket_dir = table.paths.bucket_dir(table.partition_dir([partition]), 0)
    fs, _ = table.file_io.arrow_fs()
    return pa.concat_tables(pq.read_table(table.file_io.arrow_path(f"{bucket_dir}/{f.file_name}"), filesystem=fs)
                            .select(SCHEMA.names) for f in files)


def parquet_on_disk(table: Table) -> set[str]:
    """Names of every data file stored under the table (on local disk or MinIO)."""
    fs, _ = table.file_io.arrow_fs()
    infos = fs.get_file_info(pafs.FileSelector(table.file_io.arrow_path(table.path), recursive=True))
    return {i.base_name for i in infos if i.base_name.endswith(".parquet")}


BOX = col("a").between(0, 127) & col("b").between(0, 127)
B_ONLY = col("b").between(0, 127)


def test_order_sorts_files_and_keeps_rows(catalog) -> None:
    table = make_table(catalog)
    fill(table)
    before = table.to_arrow()
    unsorted = files_selected(table, BOX)
    assert unsorted == len(live_files(table)) == COMMITS  # random files: no pruning at all

    result = table.compact(sort_by=["a", "b"], sort_strategy="order")

    snapshot = table.latest_snapshot()
    assert result.snapshot_ids == [snapshot.id] and snapshot.commit_kind == "COMPACT"
    assert multiset(table.to_arrow()) == multiset(before)
    files = live_files(table)
    assert len(files) >= 4, "target-file-size splits the partition into several files"
    assert max(f.file_size for f in files) <= 1.5 * TARGET
    rows = file_rows(table, "x", files)  # the files, in sequence order, form one sorted run
    order = pc.sort_indices(rows, sort_keys=[("a", "ascending", "at_start"), ("b", "ascending", "at_start")])
    assert order.to_pylist() == list(range(rows.num_rows))
    assert rows.column("a")[0].as_py() is None
    assert files_selected(table, col("a").between(0, 127)) < len(files) / 2
    assert table.to_arrow(filter=BOX).num_rows == before.filter(BOX.to_arrow()).num_rows


def test_zorder_prunes_two_column_ranges_better_than_unsorted_and_order(catalog) -> None:
    table = make_table(catalog)
    fill(table)
    before = table.to_arrow()
    assert files_selected(table, BOX) == COMMITS

    table.compact(sort_by=["a", "b"], sort_strategy="zorder")

    files = live_files(table)
    assert multiset(table.to_arrow()) == multiset(before)
    assert len(files) >= 4
    assert files_selected(table, BOX) < len(files) / 2
    # the point of z-order: the second column prunes too, which a lexicographic order cannot do
    z_b_only = files_selected(table, B_ONLY)
    assert z_b_only < len(files)
    assert table.to_arrow(filter=BOX).num_rows == before.filter(BOX.to_arrow()).num_rows

    ordered = make_table(catalog, "db.ordered")
    fill(ordered)
    ordered.compact(sort_by=["a", "b"], sort_strategy="order")
    assert files_selected(ordered, B_ONLY) == len(live_files(ordered))
    # files come out in z-key order: the keys of consecutive files do not interleave
    keys = [zorder_keys([file_rows(table, "x", [f]).column(c) for c in ("a", "b")], ["a", "b"])
            for f in files]
    for prev, cur in itertools.pairwise(keys):
        assert pc.max(prev).as_py() <= pc.min(cur).as_py()


def test_zorder_by_string_and_float_columns(catalog) -> None:
    table = make_table(catalog)
    fill(table)
    before = table.to_arrow()
    table.compact(sort_by="s,x", sort_strategy="zorder")
    assert multiset(table.to_arrow()) == multiset(before)
    box = col("s").between("k00000", "k05000") & col("x").between(-300.0, -50.0)
    assert files_selected(table, box) < len(live_files(table))


def test_partition_filter_rewrites_only_those_partitions(catalog) -> None:
    table = make_table(catalog)
    fill(table, partitions=("x", "y"))
    before = table.to_arrow()
    untouched = {f.file_name for f in live_files(table, "y")}
    table.compact(sort_by=["b"], partition={"p": "x"})
    assert {f.file_name for f in live_files(table, "y")} == untouched
    assert not {f.file_name for f in live_files(table, "x")} & untouched
    rows = file_rows(table, "x", live_files(table, "x"))
    assert pc.all(pc.greater_equal(rows.column("b")[1:], rows.column("b")[:-1])).as_py()
    assert multiset(table.to_arrow()) == multiset(before)


def test_sort_compaction_refuses_bad_input_and_commits_nothing(catalog) -> None:
    table = make_table(catalog)
    table.write(random_rows(np.random.default_rng(1), 100, "x"))
    snapshots, files = len(table.snapshots()), parquet_on_disk(table)
    with pytest.raises(ValueError, match=r"'nope'.*columns are"):
        table.compact(sort_by=["a", "nope"], sort_strategy="zorder")
    with pytest.raises(ValueError, match="unknown sort strategy 'hilbert'"):
        table.compact(sort_by=["a"], sort_strategy="hilbert")
    with pytest.raises(ValueError, match="needs sort_by"):
        table.compact(sort_strategy="zorder")
    with pytest.raises(ValueError, match="repeat a column"):
        table.compact(sort_by=["a", "a"])
    assert len(table.snapshots()) == snapshots and parquet_on_disk(table) == files



def test_zorder_keys_refuse_nested_columns_by_name() -> None:
    # Strata schemas hold only scalar types; the key builder still names what it cannot order
    with pytest.raises(UnsupportedSortTypeError, match=r"column 'tags' of type list<.*cannot be z-ordered"):
        zorder_keys([pa.array([1]), pa.array([["a"]])], ["id", "tags"])


def test_primary_key_and_bucketed_tables_are_refused(catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    pk = catalog.create_table("db.pk", schema, primary_keys=["id"], options={"bucket": "1"})
    pk.write(pa.table({"id": [1, 2], "v": [3, 4]}, schema=schema))
    with pytest.raises(ValueError, match="primary key"):
        pk.compact(sort_by=["v"], sort_strategy="zorder")
    bucketed = catalog.create_table("db.queue", schema, options={"bucket": "2", "bucket-key": "id"})
    bucketed.write(pa.table({"id": [1, 2], "v": [3, 4]}, schema=schema))
    with pytest.raises(ValueError, match=r"needs bucket = -1.*bucket = 2"):
        bucketed.compact(sort_by=["v"])
    assert len(pk.snapshots()) == len(bucketed.snapshots()) == 1


def test_failed_write_deletes_its_files_and_commits_nothing(catalog, monkeypatch) -> None:
    table = make_table(catalog)
    fill(table, partitions=("x", "y"))
    snapshots, files = len(table.snapshots()), parquet_on_disk(table)
    real_write, calls = DataFileWriter.write, []

    def failing_write(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 5:  # mid-way through the second partition
            raise OSError("disk full")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(DataFileWriter, "write", failing_write)
    with pytest.raises(OSError, match="disk full"):
        table.compact(sort_by=["a"])
    assert len(table.snapshots()) == snapshots
    assert parquet_on_disk(table) == files


def test_concurrent_compaction_conflicts_and_concurrent_appends_survive(catalog, monkeypatch) -> None:
    table = make_table(catalog)
    fill(table)
    real_run = sort_compact_module.run_sort_compaction
    rng = np.random.default_rng(3)
    extra = random_rows(rng, 500, "x")

    def with_concurrent_append(tbl, task, columns, strategy):
        table.write(extra)  # another writer appends while the sort runs: no conflict
        return real_run(tbl, task, columns, strategy)

    monkeypatch.setattr(sort_compact_module, "run_sort_compaction", with_concurrent_append)
    before = table.to_arrow()
    table.compact(sort_by=["a"], sort_strategy="zorder")
    assert multiset(table.to_arrow()) == multiset(before) + multiset(extra)

    def with_concurrent_compaction(tbl, task, columns, strategy):
        message = real_run(tbl, task, columns, strategy)
        monkeypatch.setattr(sort_compact_module, "run_sort_compaction", real_run)
        table.compact(sort_by=["b"])  # another job rewrites the same files first
        return message

    monkeypatch.setattr(sort_compact_module, "run_sort_compaction", with_concurrent_compaction)
    snapshots, rows = len(table.snapshots()), multiset(table.to_arrow())
    with pytest.raises(CommitConflictError, match="not previously added"):
        table.compact(sort_by=["a"])
    assert len(table.snapshots()) == snapshots + 1  # only the other job's snapshot
    assert multiset(table.to_arrow()) == rows
    assert parquet_on_disk(table) >= {f.file_name for f in live_files(table)}
    # the loser's sorted files are gone; only the live ones and the superseded inputs remain
    written_by_loser = parquet_on_disk(table) - {f.file_name for f in live_files(table)}
    superseded = {e.file.file_name for s in table.snapshots()[:-1]
                  for e in table.new_scan(snapshot_id=s.id).plan_entries()}
    assert written_by_loser <= superseded


def test_cli_sort_compacts_with_order_strategy_and_order_by(catalog, warehouse, capsys) -> None:
    table = make_table(catalog)
    fill(table, partitions=("x", "y"))
    before = table.to_arrow()
    code = main(["--warehouse", warehouse, "compact", "db.t", "--order-strategy", "zorder",
                 "--order-by", "a,b", "--partition", "p=x;p=y"])
    assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    table = catalog.get_table("db.t")
    assert table.latest_snapshot().commit_kind == "COMPACT"
    # what the numbers count: the files it rewrote, the files it wrote, the snapshot
    rewritten = len(table.new_scan(snapshot_id=table.latest_snapshot().id - 1).plan_entries())
    assert out == (f"db.t: compacted {rewritten} data files into {len(live_files(table))} "
                   f"(snapshot {table.latest_snapshot().id})\n")
    assert multiset(table.to_arrow()) == multiset(before)
    assert files_selected(table, BOX) < len(live_files(table)) / 2
    assert main(["--warehouse", warehouse, "compact", "db.t", "--order-strategy", "order"]) == 2
    assert "needs --order-by" in capsys.readouterr().err
    assert main(["--warehouse", warehouse, "compact", "db.t", "--order-strategy", "order",
                 "--order-by", "zz"]) == 2
    assert "'zz'" in capsys.readouterr().err


@pytest.mark.pypaimon
def test_pypaimon_reads_sort_compacted_table(tmp_path) -> None:
    from pypaimon_oracle import run_pypaimon

    warehouse = str(tmp_path / "warehouse")  # the pypaimon driver opens a local warehouse
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    table = make_table(catalog)
    fill(table, partitions=("x", "y"))
    table.compact(sort_by=["a", "s"], sort_strategy="zorder", partition={"p": "x"})
    table.compact(sort_by=["b"], sort_strategy="order", partition={"p": "y"})
    assert [s.commit_kind for s in table.snapshots()[-2:]] == ["COMPACT", "COMPACT"]
    driver = Path(__file__).resolve().parents[1] / "table" / "pypaimon_table_driver.py"
    jobs = [{"op": "read", "table": "db.t", "out": str(tmp_path / "all.arrow")},
            {"op": "read", "table": "db.t", "out": str(tmp_path / "box.arrow"),
             "filter": [["a", "less_than", 128], ["b", "less_than", 128]]}]
    output = run_pypaimon(driver.read_text(), json.dumps(jobs), warehouse)
    results = json.loads(output.strip().splitlines()[-1])
    assert not [r for r in results if "error" in r], results
    assert multiset(_load(tmp_path / "all.arrow")) == multiset(table.to_arrow())
    box = table.to_arrow(filter=(col("a") < 128) & (col("b") < 128))
    assert multiset(_load(tmp_path / "box.arrow")) == multiset(box)


def _load(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all().select(SCHEMA.names)


