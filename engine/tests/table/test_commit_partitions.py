"""A commit checks the partitions it touches, not the table: overwrites and compactions read the
manifests that may hold those partitions, and their results are the same as a whole-table check."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata
from strata.manifest.manifest_store import ManifestStore

PARTITIONS = [None, *range(11)]  # one of them the default (null) partition


def _table(catalog: strata.Catalog) -> strata.Table:
    """A partitioned append table whose partitions were each written by a commit of their own
    (one manifest each: fewer than the manifests a merge waits for)."""
    table = catalog.create_table("db.parts", pa.schema([("p", pa.int32()), ("id", pa.int64())]),
                                 partition_keys=["p"])
    for i, p in enumerate(PARTITIONS):
        table.write(pa.table({"p": pa.array([p] * 3, pa.int32()), "id": [10 * i, 10 * i + 1, 10 * i + 2]}))
    return table


def _manifests_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    read: list[str] = []
    original = ManifestStore.read_manifest
    monkeypatch.setattr(ManifestStore, "read_manifest", lambda self, name: read.append(name) or original(self, name))
    return read


def _rows(table: strata.Table) -> set[tuple]:
    return {(r["p"], r["id"]) for r in table.to_arrow().to_pylist()}


@pytest.mark.parametrize("partition", [5, None])
def test_a_partition_overwrite_reads_the_manifests_of_that_partition(catalog, monkeypatch, partition):
    table = _table(catalog)
    before = _rows(table)
    with monkeypatch.context() as patch:
        read = _manifests_read(patch)
        table.write(pa.table({"p": pa.array([partition], pa.int32()), "id": [999]}), mode="overwrite-dynamic")
    assert len(read) == 1  # a whole-table check read all 12
    assert _rows(table) == {r for r in before if r[0] != partition} | {(partition, 999)}


def test_a_compaction_commits_when_partition_stats_miss_its_files(catalog, monkeypatch):
    """Manifests whose partition stats do not cover their entries (another writer's): the files
    a compaction deletes are then looked up in the whole table, not reported as a conflict."""
    table = _table(catalog)
    table.write(pa.table({"p": pa.array([5, 5], pa.int32()), "id": [500, 501]}))
    before = _rows(table)
    with monkeypatch.context() as patch:
        patch.setattr(ManifestStore, "_may_hold", lambda self, stats, rows: False)
        table.compact(full=True, partition={"p": 5})
    assert table.latest_snapshot().commit_kind == "COMPACT"
    assert _rows(table) == before
    partition_files = [f for s in table.new_scan(filter=strata.col("p") == 5).plan().splits for f in s.files]
    assert len(partition_files) == 1
