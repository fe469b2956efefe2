"""A short-lived writer (a Spark task) waits for the compaction its flush started, so the
compaction's files are part of its commit instead of being lost when the writer closes."""

from __future__ import annotations

import pyarrow as pa

import strata
from strata.table.write import TableWrite

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def test_prepare_commit_waits_for_the_running_compaction(catalog: strata.Catalog) -> None:
    catalog.create_database("db", ignore_if_exists=True)
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "num-sorted-run.compaction-trigger": "3"})
    for run in range(3):  # three level-0 runs, committed without compaction
        with TableWrite(table, compaction=False) as writer:
            writer.write_arrow(pa.table({"id": [run, 10 + run], "v": [f"r{run}"] * 2}, schema=SCHEMA))
            table.new_commit("u").commit(writer.prepare_commit(), run)

    with TableWrite(table, compaction=True) as writer:  # its flush makes 4 runs: compaction starts
        writer.write_arrow(pa.table({"id": [0, 99], "v": ["new", "new"]}, schema=SCHEMA))
        messages = writer.prepare_commit(wait_compaction=True)
        table.new_commit("u").commit(messages, 3)

    assert [len(m.compact_before) for m in messages] == [4]  # every run went into the compaction
    live = table.new_scan().plan_entries()
    assert len(live) == 1 and live[0].file.level > 0
    rows = table.to_arrow().sort_by("id")
    assert rows.column("id").to_pylist() == [0, 1, 2, 10, 11, 12, 99]
    assert rows.column("v").to_pylist()[0] == "new"
