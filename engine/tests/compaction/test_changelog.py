"""Changelog producers: replaying a commit's changelog onto the previous state gives the new state."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def replay(state: dict[int, int], changes: pa.Table, strict: bool) -> dict[int, int]:
    out = dict(state)
    rows = zip(changes.column("_ROW_KIND").to_pylist(), changes.column("id").to_pylist(),
               changes.column("v").to_pylist(), strict=True)
    for kind, key, value in rows:
        if kind in ("+I", "+U"):
            out[key] = value
        else:
            if strict:  # retractions carry the value being retracted
                assert out.get(key) == value, (kind, key, value, out.get(key))
            if kind == "-D":
                out.pop(key, None)
    return out


@pytest.mark.parametrize("producer", ["input", "full-compaction", "lookup"])
def test_changelog_replays_to_the_table(catalog, producer: str) -> None:
    options = {"bucket": "2", "changelog-producer": producer}
    if producer == "full-compaction":
        options["full-compaction.delta-commits"] = "1"
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options=options)
    rng = np.random.default_rng(5)
    model: dict[int, int] = {}
    commit = table.new_commit("u")
    with table.new_write() as writer:
        for i in range(6):
            ids = np.unique(rng.integers(0, 300, 120))
            values = rng.integers(0, 4, len(ids))
            doomed = np.setdiff1d(np.unique(rng.integers(0, 300, 15)), ids)
            writer.write_arrow(pa.table({"id": ids, "v": values}, schema=SCHEMA))
            writer.delete(pa.table({"id": doomed, "v": doomed}, schema=SCHEMA))
            before, start = dict(model), table.snapshot_manager.latest_id() or 0
            model.update(zip(ids.tolist(), values.tolist(), strict=True))
            for key in doomed.tolist():
                model.pop(key, None)
            commit.commit(writer.prepare_commit(), identifier=i)
            changes = table.read_incremental(start, table.snapshot_manager.latest_id() or 0)
            assert replay(before, changes, strict=producer != "input") == model
            if producer != "input":
                assert set(changes.column("_ROW_KIND").to_pylist()) <= {"+I", "-U", "+U", "-D"}


def test_row_deduplicate_drops_unchanged_updates(catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={
        "bucket": "1", "changelog-producer": "lookup", "changelog-producer.row-deduplicate": "true"})
    table.write(pa.table({"id": [1, 2], "v": [10, 20]}, schema=SCHEMA))
    start = table.snapshot_manager.latest_id() or 0
    table.write(pa.table({"id": [1, 2], "v": [10, 21]}, schema=SCHEMA))
    changes = table.read_incremental(start, table.snapshot_manager.latest_id() or 0)
    assert changes.select(["_ROW_KIND", "id", "v"]).to_pylist() == [
        {"_ROW_KIND": "-U", "id": 2, "v": 20}, {"_ROW_KIND": "+U", "id": 2, "v": 21}]


def test_snapshot_records_changelog_manifest(catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "changelog-producer": "input"})
    table.write(pa.table({"id": [1, 1], "v": [1, 2]}, schema=SCHEMA))
    snapshot = table.latest_snapshot()
    assert snapshot is not None and snapshot.changelog_manifest_list is not None
    assert snapshot.changelog_record_count == 2  # input keeps every record, merged data keeps one
    assert snapshot.delta_record_count == 1
