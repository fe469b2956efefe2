"""ignore-delete drops retractions at the writer, as Paimon's does: they reach no data file, no
changelog and no log, so an input changelog or an incremental read never shows a -D or -U of a key
the table keeps."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("n", pa.int64())])


@pytest.mark.parametrize("engine", ["aggregation", "first-row", "partial-update", "deduplicate"])
def test_retractions_of_an_ignore_delete_table_reach_neither_files_nor_changelog(catalog: strata.Catalog,
                                                                                engine: str) -> None:
    options = {"bucket": "1", "merge-engine": engine, "ignore-delete": "true", "changelog-producer": "input"}
    if engine == "aggregation":
        options["fields.n.aggregate-function"] = "sum"
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options=options)
    table.write(pa.table({"k": [1, 2, 3], "n": [10, 20, 30]}, schema=SCHEMA))
    start = table.latest_snapshot().id
    table.write(pa.table({"k": [1, 2, 4], "n": [5, 7, 40]}, schema=SCHEMA), row_kind=["-D", "-U", "+I"])
    changes = table.read_incremental(start, table.latest_snapshot().id)
    assert list(zip(changes.column("_ROW_KIND").to_pylist(), changes.column("k").to_pylist(), strict=True)) == \
        [("+I", 4)]
    assert sorted(table.to_arrow().column("k").to_pylist()) == [1, 2, 3, 4]
    written = sum(f.row_count for s in table.scan() for f in s.files)
    assert written == 4  # the two retractions were never written
    table.delete(pa.table({"k": pa.array([3], pa.int64())}))  # a delete of keys is a retraction too
    assert sorted(table.to_arrow().column("k").to_pylist()) == [1, 2, 3, 4]
