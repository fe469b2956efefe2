"""Changelog producers on tables with nested value columns (MAP, ARRAY, ROW of ARRAY, MULTISET).

The full-compaction producer joined the rows before and after a merge with Arrow's hash join,
which refuses nested columns outside its keys (ArrowInvalid: the commit failed), and
`changelog-producer.row-deduplicate` compared values with Arrow's `equal`, which has no kernel
for nested types. Keys are now matched on the key columns alone and nested values compared
element by element; here a user writes, updates, deletes and reads the changelog back.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType
from strata.table.table import Table

VALUES = ("m", "a", "r", "s")
FIELDS = [
    DataField(2, "m", DataType.parse({"type": "MAP", "key": "STRING NOT NULL", "value": "INT"})),
    DataField(3, "a", DataType.parse({"type": "ARRAY", "element": "BIGINT"})),
    DataField(4, "r", DataType.parse({"type": "ROW", "fields": [
        {"id": 6, "name": "x", "type": "INT"},
        {"id": 7, "name": "l", "type": {"type": "ARRAY", "element": "STRING"}}]})),
    DataField(5, "s", DataType.parse({"type": "MULTISET", "element": "STRING"})),
]
Row = tuple[int, int, str]  # (k0, k1, the values as JSON)


def create(catalog: strata.Catalog, producer: str, keys: list[str], deduplicate: bool) -> Table:
    fields = [DataField(0, "k0", DataType("BIGINT", False)), DataField(1, "k1", DataType("INT", False)), *FIELDS]
    options = {"bucket": "2", "changelog-producer": producer,
               "changelog-producer.row-deduplicate": str(deduplicate).lower()}
    if producer == "full-compaction":
        options["full-compaction.delta-commits"] = "1"
    return catalog.create_table("db.t", TableSchema(0, fields, [], keys, options, None))


def values_of(i: int, version: int) -> dict[str, Any]:
    """Nested values that change with `version`, some null, some empty."""
    return {"m": None if i % 7 == 0 else [(f"k{j}", version * j) for j in range(i % 3)],
            "a": [i, version, None] if i % 5 else [],
            "r": None if i % 6 == 0 else {"x": version, "l": [f"v{version}"] * (i % 3)},
            "s": [(f"e{version}", 1 + i % 2)] if i % 4 else None}


def batch(table: Table, rows: dict[int, dict[str, Any]]) -> pa.Table:
    keys = list(rows)
    return pa.table({"k0": keys, "k1": [k % 3 for k in keys], **{n: [rows[k][n] for k in keys] for n in VALUES}},
                    schema=table.schema.arrow_schema())


def as_rows(data: pa.Table) -> list[tuple[str, Row]]:
    columns = [data.column(n).to_pylist() for n in ("_ROW_KIND", "k0", "k1", *VALUES)]
    return [(kind, (k0, k1, json.dumps(list(values), default=str)))
            for kind, k0, k1, *values in zip(*columns, strict=True)]


def replay(state: dict[tuple[int, int], str], changes: pa.Table) -> dict[tuple[int, int], str]:
    """Apply a changelog; a retraction must carry the value it retracts."""
    out = dict(state)
    for kind, (k0, k1, values) in as_rows(changes):
        if kind in ("+I", "+U"):
            out[(k0, k1)] = values
        else:
            assert out.get((k0, k1)) == values, (kind, k0, k1)
            if kind == "-D":
                del out[(k0, k1)]
    return out


def state(table: Table) -> dict[tuple[int, int], str]:
    data = table.to_arrow().append_column("_ROW_KIND", pa.array(["+I"] * table.to_arrow().num_rows))
    return {(k0, k1): values for _, (k0, k1, values) in as_rows(data)}


@pytest.mark.parametrize("deduplicate", [False, True], ids=["all-updates", "row-deduplicate"])
@pytest.mark.parametrize("keys", [["k0"], ["k0", "k1"]], ids=["one-key", "two-keys"])
@pytest.mark.parametrize("producer", ["full-compaction", "lookup"])
def test_changelog_of_nested_values_replays_to_the_table(catalog: strata.Catalog, producer: str,
                                                         keys: list[str], deduplicate: bool) -> None:
    table = create(catalog, producer, keys, deduplicate)
    first = {i: values_of(i, 1) for i in range(30)}
    table.write(batch(table, first))
    changed = {i: values_of(i, 2) for i in range(0, 30, 2)}
    same = {i: values_of(i, 1) for i in range(1, 12, 2)}  # written again unchanged
    start = table.snapshot_manager.latest_id() or 0
    table.write(batch(table, {**changed, **same}))
    table.delete(batch(table, {i: values_of(i, 1) for i in range(25, 30, 2)}))
    end = table.snapshot_manager.latest_id() or 0

    changes = table.read_incremental(start, end)
    before = {(k0, k0 % 3): values for k0, values in
              ((k, json.dumps([first[k][n] for n in VALUES], default=str)) for k in first)}
    assert replay(before, changes) == state(table)
    assert len(state(table)) == 27
    kinds = [(kind, k0) for kind, (k0, _, _) in as_rows(changes)]
    assert ("-D", 27) in kinds and ("+U", 4) in kinds
    unchanged_updates = {k0 for kind, k0 in kinds if kind == "+U" and k0 in same}
    assert unchanged_updates == (set() if deduplicate else set(same))
