"""pypaimon 2.1 (Apache Paimon's Python reader) reads Strata tables that went through add, rename,
drop and widening changes and gets the same rows as Strata: full reads, projections, and filters on
renamed, added and widened columns. Data files of three schema versions are mixed in each table, and
primary-key tables merge keys across them."""

from __future__ import annotations

import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata import SchemaChange, col
from strata.schema.table_schema import schema_from_arrow
from strata.schema.types import DataType

pytestmark = pytest.mark.pypaimon

DRIVER = """
import json, sys
from decimal import Decimal
import pyarrow as pa
from pypaimon import CatalogFactory

def literal(v):
    if isinstance(v, dict):
        (tag, text), = v.items()
        return {"decimal": Decimal}[tag](text)
    return v

catalog = CatalogFactory.create({"warehouse": sys.argv[2]})
results = []
for job in json.loads(sys.argv[1]):
    try:
        table = catalog.get_table(job["table"])
        builder = table.new_read_builder()
        if job.get("columns"):
            builder = builder.with_projection(job["columns"])
        if job.get("filter"):
            column, op, value = job["filter"]
            predicates = builder.new_predicate_builder()
            args = [column] if op in ("is_null", "is_not_null") else [column, literal(value)]
            builder = builder.with_filter(getattr(predicates, op)(*args))
        splits = builder.new_scan().plan().splits()
        result = builder.new_read().to_arrow(splits)
        with pa.OSFile(job["out"], "wb") as sink, pa.ipc.new_file(sink, result.schema) as writer:
            writer.write_table(result)
        results.append({"rows": result.num_rows})
    except Exception:
        import traceback
        results.append({"error": traceback.format_exc()})
print(json.dumps(results))
"""

V0 = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("a", pa.int32()), ("b", pa.string()),
                ("c", pa.float32()), ("d", pa.decimal128(10, 2)), ("e", pa.string()), ("s", pa.string())])


def _build(catalog: strata.Catalog, name: str, primary_keys: list[str] | None) -> strata.Table:
    options = {"bucket": "2"} if primary_keys else {}
    base = schema_from_arrow(V0, ["dt"], primary_keys, options)
    varchar10 = [replace(f, type=DataType.parse("VARCHAR(10)")) if f.name == "s" else f for f in base.fields]
    table = catalog.create_table(name, replace(base, fields=varchar10))
    ids = range(0, 16)
    table.write(pa.table({
        "id": pa.array(ids, pa.int64()), "dt": [f"p{i % 2}" for i in ids], "a": pa.array(ids, pa.int32()),
        "b": [f"b{i}" for i in ids], "c": pa.array([i / 2 for i in ids], pa.float32()),
        "d": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)), "e": [f"e{i}" for i in ids],
        "s": [f"s{i}" for i in ids]}, schema=table.schema.arrow_schema()))
    # v2: rename, add (after a column), widen int/float/decimal/varchar
    t = table.alter(SchemaChange.rename_column("b", "name"), SchemaChange.add_column("n1", "INT", after="a"),
                    SchemaChange.update_column_type("a", "BIGINT"), SchemaChange.update_column_type("c", "DOUBLE"),
                    SchemaChange.update_column_type("d", "DECIMAL(14, 2)"),
                    SchemaChange.update_column_type("s", "VARCHAR(20)"))
    ids = range(8, 24)  # keys 8..15 also live in schema-1 files
    t.write(pa.table({
        "id": pa.array(ids, pa.int64()), "dt": [f"p{i % 2}" for i in ids], "a": pa.array([2**40 + i for i in ids]),
        "n1": pa.array([i if i % 3 else None for i in ids], pa.int32()), "name": [f"name{i}" for i in ids],
        "c": pa.array([i + 0.125 for i in ids]), "d": pa.array([Decimal(10**9 + i) for i in ids], pa.decimal128(14, 2)),
        "e": [f"e{i}" for i in ids], "s": [f"long-s-{i}" for i in ids]}, schema=t.schema.arrow_schema()))
    # v3: drop e, and add a new e (a new field id: the old values stay gone)
    t = t.alter(SchemaChange.drop_column("e"), SchemaChange.add_column("e", "STRING"))
    ids = range(20, 28)
    t.write(pa.table({
        "id": pa.array(ids, pa.int64()), "dt": [f"p{i % 2}" for i in ids], "a": pa.array([-i for i in ids]),
        "n1": pa.array(ids, pa.int32()), "name": [f"v3-{i}" for i in ids], "c": pa.array([None] * 8, pa.float64()),
        "d": pa.array([Decimal(i) for i in ids], pa.decimal128(14, 2)), "s": [f"v3s{i}" for i in ids],
        "e": [f"new-e{i}" if i % 2 else None for i in ids]},
        schema=t.schema.arrow_schema()))
    final = catalog.get_table(name)
    assert final.schema.id == 2
    assert {f.schema_id for s in final.scan() for f in s.files} == {0, 1, 2}
    return final


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple(r.values()) for r in table.to_pylist()), key=repr)


# the oracle runs in pypaimon's own venv and is handed only a warehouse path, no S3 options
LOCAL_ORACLE = pytest.mark.local_storage_only(reason="the pypaimon oracle reads a local warehouse")


def _pypaimon(warehouse: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from pypaimon_oracle import run_pypaimon

    return json.loads(run_pypaimon(DRIVER, json.dumps(jobs), warehouse).strip().splitlines()[-1])


def _load(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


# (columns, filter as [column, pypaimon op, literal], the same filter for Strata). Filters and
# projections are not combined: see test_pypaimon_projection_with_value_filter_bug below.
CASES: list[tuple[list[str] | None, list[Any] | None, Any]] = [
    (None, None, None),
    (["id", "name", "n1"], None, None),
    (["d", "c", "a", "s"], None, None),
    (None, ["name", "equal", "b3"], col("name") == "b3"),
    (None, ["name", "equal", "name12"], col("name") == "name12"),
    (None, ["n1", "is_null", None], col("n1").is_null()),
    (None, ["n1", "greater_or_equal", 20], col("n1") >= 20),
    (None, ["a", "greater_than", 2**40 + 10], col("a") > 2**40 + 10),
    (None, ["a", "less_than", 0], col("a") < 0),
    (None, ["d", "greater_than", {"decimal": "1000"}], col("d") > Decimal(1000)),
    (None, ["c", "less_than", 3.0], col("c") < 3.0),
    (None, ["s", "equal", "long-s-9"], col("s") == "long-s-9"),
    (None, ["e", "is_null", None], col("e").is_null()),
    (None, ["e", "equal", "new-e21"], col("e") == "new-e21"),
    (None, ["e", "equal", "e3"], col("e") == "e3"),  # a value of the dropped e: no row
]


@LOCAL_ORACLE
@pytest.mark.parametrize("kind", ["pk", "append"])
def test_pypaimon_reads_evolved_table(catalog: strata.Catalog, warehouse: str, tmp_path: Path, kind: str) -> None:
    table = _build(catalog, f"db.{kind}", ["id", "dt"] if kind == "pk" else None)
    jobs = []
    for i, (columns, filter_spec, _) in enumerate(CASES):
        job: dict[str, Any] = {"table": f"db.{kind}", "out": str(tmp_path / f"out{i}.arrow")}
        if columns:
            job["columns"] = columns
        if filter_spec is not None:
            job["filter"] = filter_spec
        jobs.append(job)
    results = _pypaimon(warehouse, jobs)
    for (columns, _, predicate), job, result in zip(CASES, jobs, results, strict=True):
        assert "error" not in result, result["error"]
        ours = table.to_arrow(columns=columns, filter=predicate)
        theirs = _load(job["out"])
        if predicate is not None:
            # pypaimon filters data files and row groups by stats but may return extra rows of
            # kept files: apply the predicate to its rows for an exact comparison
            theirs = theirs.filter(predicate.to_arrow())
        assert theirs.column_names == ours.column_names
        assert _rows(theirs) == _rows(ours), (columns, job.get("filter"))
    full = table.to_arrow()
    assert full.num_rows == (28 if kind == "pk" else 40)


@pytest.mark.xfail(strict=True, reason="pypaimon 2.1 bug, not schema evolution: with a projection AND a filter "
                   "on a value column it tests the filter against the wrong column's stats when a file's "
                   "_VALUE_STATS_COLS is null (= all columns, what Strata and Java write), and drops rows")
@LOCAL_ORACLE
def test_pypaimon_projection_with_value_filter_bug(catalog: strata.Catalog, warehouse: str, tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("d", pa.decimal128(10, 2))])
    table = catalog.create_table("db.plain", schema)  # no schema change at all
    table.write(pa.table({"id": pa.array([1, 2], pa.int64()),
                          "d": pa.array([Decimal("1.5"), Decimal("2000")], pa.decimal128(10, 2))}))
    out = str(tmp_path / "plain.arrow")
    [result] = _pypaimon(warehouse, [{"table": "db.plain", "out": out, "columns": ["d"],
                                      "filter": ["d", "greater_than", {"decimal": "3"}]}])
    assert "error" not in result
    # pypaimon returns no row: it compared `d > 3` with the stats of `id` (1..2) and pruned the file
    assert _load(out).to_pylist() == table.to_arrow(columns=["d"], filter=col("d") > 3).to_pylist()
