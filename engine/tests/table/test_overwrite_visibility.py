"""An overwrite of a primary-key table whose readers skip level 0 (deletion vectors, first-row)
is visible when the write returns.

The overwrite's rows land in level-0 files; as in Paimon, the writer moves them up at
prepare-commit and the commit publishes that compaction after the OVERWRITE snapshot (a COMPACT
with the same commit user and identifier). Before, the overwrite published only its level-0
files and the table read empty (or without the overwritten partition) until a later compaction.
The writer of an overwrite starts from empty buckets (Paimon's ignore-previous-files): its
compaction never involves the files the overwrite replaces.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from storage_faults import CompactOutage

import strata
from strata.catalog.filesystem import FileSystemCatalog
from strata.snapshot.snapshot import CommitKind
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("p", pa.int32(), nullable=False), pa.field("k", pa.int64(), nullable=False),
                    pa.field("v", pa.string())])
ENGINES = {
    "deletion-vectors": {"deletion-vectors.enabled": "true"},
    "first-row": {"merge-engine": "first-row"},
}
Rows = dict[tuple[int, int], str]


def rows_of(values: Rows) -> pa.Table:
    return pa.table({"p": [p for p, _ in values], "k": [k for _, k in values], "v": list(values.values())},
                    schema=SCHEMA)


def read(table: Table) -> Rows:
    data = table.to_arrow()
    keys = zip(data.column("p").to_pylist(), data.column("k").to_pylist(), strict=True)
    result = dict(zip(keys, data.column("v").to_pylist(), strict=True))
    assert len(result) == data.num_rows, "a key read twice"
    return result


def in_partition(p: int, tag: str, keys: range = range(12)) -> Rows:
    return {(p, k): f"{tag}{k}" for k in keys}


def create(catalog: strata.Catalog, engine: str, partitioned: bool, **options: str) -> Table:
    return catalog.create_table("db.t", SCHEMA, primary_keys=["p", "k"],
                                partition_keys=["p"] if partitioned else None,
                                options={"bucket": "2", **ENGINES[engine], **options})


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_overwrite_of_a_partition_then_the_whole_table_reads_exactly_its_rows(catalog: strata.Catalog,
                                                                              engine: str) -> None:
    table = create(catalog, engine, partitioned=True)
    table.write(rows_of({**in_partition(1, "old"), **in_partition(2, "old")}))
    table.write(rows_of(in_partition(1, "upd", range(4))))  # more files (and vectors) in partition 1

    first = table.write(rows_of(in_partition(1, "new", range(3, 9))), mode="overwrite", partition={"p": 1})
    assert first.visible
    assert read(table) == {**in_partition(1, "new", range(3, 9)), **in_partition(2, "old")}

    dynamic = table.write(rows_of(in_partition(2, "dyn", range(5))), mode="overwrite-dynamic")
    assert dynamic.visible
    assert read(table) == {**in_partition(1, "new", range(3, 9)), **in_partition(2, "dyn", range(5))}

    whole = rows_of({**in_partition(3, "all", range(2)), **in_partition(1, "all", range(7, 10))})
    assert table.write(whole, mode="overwrite").visible
    assert read(table) == {**in_partition(3, "all", range(2)), **in_partition(1, "all", range(7, 10))}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_overwrite_of_an_unpartitioned_table_publishes_its_compaction_after_it(catalog: strata.Catalog,
                                                                               engine: str) -> None:
    """One OVERWRITE then one COMPACT, both of the overwrite's commit user and identifier, as
    Paimon's overwrite publishes; a replay of that identifier writes nothing more."""
    table = create(catalog, engine, partitioned=False)
    table.write(rows_of(in_partition(0, "old")))
    result = table.write(rows_of(in_partition(0, "new", range(6, 20))), mode="overwrite",
                         commit_user="job", identifier=7)
    assert read(table) == in_partition(0, "new", range(6, 20))
    published = [s for s in table.snapshots() if s.id in result.snapshot_ids]
    assert [s.commit_kind for s in published] == [CommitKind.OVERWRITE, CommitKind.COMPACT]
    assert {(s.commit_user, s.commit_identifier) for s in published} == {("job", 7)}

    replay = table.write(rows_of(in_partition(0, "again")), mode="overwrite", commit_user="job", identifier=7)
    assert replay.skipped_as_duplicate
    assert read(table) == in_partition(0, "new", range(6, 20))


def test_overwrite_deletes_rows_the_table_held_only_in_vectors(catalog: strata.Catalog) -> None:
    """Keys deleted before the overwrite stay deleted, keys the overwrite writes again come back:
    the overwrite's writer starts without the replaced files' vectors."""
    table = create(catalog, "deletion-vectors", partitioned=False)
    table.write(rows_of(in_partition(0, "old")))
    table.delete(rows_of(in_partition(0, "", range(0, 12, 2))))
    assert read(table) == in_partition(0, "old", range(1, 12, 2))
    table.write(rows_of(in_partition(0, "new", range(0, 6))), mode="overwrite")
    assert read(table) == in_partition(0, "new", range(0, 6))
    table.write(rows_of(in_partition(0, "later", range(4, 8))))
    assert read(table) == {**in_partition(0, "new", range(0, 4)), **in_partition(0, "later", range(4, 8))}


def test_an_overwrite_whose_compaction_failed_is_compacted_again(tmp_path: Path) -> None:
    io = CompactOutage()
    catalog = FileSystemCatalog(str(tmp_path / "warehouse"), file_io=io)
    catalog.create_database("db")
    table = create(catalog, "deletion-vectors", partitioned=True, **{
        "commit.max-retries": "1", "commit.min-retry-wait": "1 ms", "commit.max-retry-wait": "5 ms"})
    table.write(rows_of({**in_partition(1, "old"), **in_partition(2, "old")}))
    io.failures = 2  # both publish attempts of the overwrite's own COMPACT
    result = table.write(rows_of(in_partition(1, "new", range(5))), mode="overwrite", partition={"p": 1})
    assert io.failures == 0
    assert result.compaction_failure is not None and result.retried_compaction_ids
    assert result.visible
    assert read(table) == {**in_partition(1, "new", range(5)), **in_partition(2, "old")}


@pytest.mark.pypaimon
@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_pypaimon_reads_the_overwrites_rows(tmp_path: Path, engine: str) -> None:
    from pypaimon_oracle import run_pypaimon

    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    table = create(catalog, engine, partitioned=True)
    table.write(rows_of({**in_partition(1, "old"), **in_partition(2, "old")}))
    table.write(rows_of(in_partition(1, "new", range(3, 9))), mode="overwrite", partition={"p": 1})
    table.write(rows_of(in_partition(2, "dyn", range(2))), mode="overwrite-dynamic")
    expected = {**in_partition(1, "new", range(3, 9)), **in_partition(2, "dyn", range(2))}
    assert read(table) == expected
    script = """
        import json, sys
        from pypaimon import CatalogFactory
        table = CatalogFactory.create({"warehouse": sys.argv[1]}).get_table("db.t")
        builder = table.new_read_builder()
        data = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        print(json.dumps([[p, k, v] for p, k, v in zip(*(data.column(c).to_pylist() for c in "pkv"))]))
    """
    seen = json.loads(run_pypaimon(script, warehouse).strip().splitlines()[-1])
    assert {(p, k): v for p, k, v in seen} == expected
    assert len(seen) == len(expected)
