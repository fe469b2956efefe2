"""pypaimon 2.1's branch API on Strata's branches: it lists them, reads a branch Strata wrote row for
row, creates a branch from a tag that Strata then reads and writes, and fast-forwards main to a
Strata branch, after which Strata reads and writes main."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata

pytestmark = pytest.mark.pypaimon
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])

DRIVER = """
import json, sys
from pypaimon import CatalogFactory
catalog = CatalogFactory.create({"warehouse": sys.argv[2]})
out = []
for job in json.loads(sys.argv[1]):
    table = catalog.get_table(job["table"])
    if job["do"] == "read":
        builder = table.new_read_builder()
        data = builder.new_read().to_arrow(builder.new_scan().plan().splits())
        out.append(sorted([r["id"], r["v"]] for r in data.to_pylist()))
    elif job["do"] == "branches":
        out.append(sorted(table.branch_manager().branches()))
    elif job["do"] == "create_branch":
        table.branch_manager().create_branch(job["name"], job.get("tag"))
        out.append(None)
    else:
        table.branch_manager().fast_forward(job["name"])
        out.append(None)
print(json.dumps(out))
"""


def pypaimon(warehouse: str, *jobs: dict[str, Any]) -> list[Any]:
    from pypaimon_oracle import run_pypaimon

    return json.loads(run_pypaimon(DRIVER, json.dumps(list(jobs)), warehouse).strip().splitlines()[-1])


def rows(table: strata.Table) -> list[list[Any]]:
    return sorted([r["id"], r["v"]] for r in table.to_arrow().to_pylist())


def data(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def test_pypaimon_branch_api_on_strata_branches(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(data([1, 2], "m"))
    table.create_tag("t1")
    table.write(data([3], "m"))
    b1 = table.create_branch("b1", from_tag="t1")
    b1.write(data([2, 4], "b"))
    b1.delete(data([1], "m"))
    listed, b1_rows, created = pypaimon(
        warehouse, {"table": "db.t", "do": "branches"}, {"table": "db.t$branch_b1", "do": "read"},
        {"table": "db.t", "do": "create_branch", "name": "p1", "tag": "t1"})
    assert listed == ["b1"] and created is None
    assert b1_rows == rows(catalog.get_table("db.t$branch_b1")) == [[2, "b2"], [4, "b4"]]
    p1 = catalog.get_table("db.t$branch_p1")  # pypaimon's branch, read and written by Strata
    assert rows(p1) == [[1, "m1"], [2, "m2"]]
    p1.write(data([5], "s"))
    assert table.list_branches() == ["b1", "p1"]

    expected = rows(catalog.get_table("db.t$branch_b1"))
    _, main_rows, p1_rows = pypaimon(warehouse, {"table": "db.t", "do": "fast_forward", "name": "b1"},
                                     {"table": "db.t", "do": "read"}, {"table": "db.t$branch_p1", "do": "read"})
    main = catalog.get_table("db.t")
    assert rows(main) == main_rows == expected
    assert p1_rows == [[1, "m1"], [2, "m2"], [5, "s5"]]
    main.write(data([6], "m"))
    assert rows(main) == [*expected, [6, "m6"]]
