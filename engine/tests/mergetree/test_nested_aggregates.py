"""The aggregation engine's collect and merge_map on real tables with ARRAY and MAP columns:
several commits, retractions, a full compaction, and the functions nested columns refuse."""

from __future__ import annotations

import pyarrow as pa
import pytest

import strata
from strata.errors import OptionError

TAGS = pa.list_(pa.string())
INTS = pa.list_(pa.int32())
MAP = pa.map_(pa.string(), pa.int64())

SCHEMA = pa.schema([("id", pa.int64()), ("tags", TAGS), ("utags", TAGS), ("m", MAP), ("last", INTS),
                    ("first", MAP), ("lnn", INTS), ("fnn", INTS)])
OPTIONS = {
    "bucket": "1", "merge-engine": "aggregation",
    "fields.tags.aggregate-function": "collect",
    "fields.utags.aggregate-function": "collect", "fields.utags.distinct": "true",
    "fields.m.aggregate-function": "merge_map",
    "fields.last.aggregate-function": "last_value",
    "fields.first.aggregate-function": "first_value",
    "fields.lnn.aggregate-function": "last_non_null_value",
    "fields.fnn.aggregate-function": "first_non_null_value",
}


@pytest.fixture
def catalog(tmp_path):
    c = strata.load_catalog(str(tmp_path / "warehouse"))
    c.create_database("db")
    return c


def commit(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def row(id, tags=None, utags=None, m=None, last=None, first=None, lnn=None, fnn=None):
    return {"id": id, "tags": tags, "utags": utags, "m": m, "last": last, "first": first, "lnn": lnn, "fnn": fnn}


def normalized(table: pa.Table) -> dict[int, dict]:
    """Rows by id, maps as dicts (merge_map's key order is not part of its contract)."""
    out = {}
    for r in table.to_pylist():
        out[r["id"]] = {k: dict(v) if k in ("m", "first") and v is not None else v for k, v in r.items()}
    return out


def test_collect_merge_map_and_takes_over_commits_and_compaction(catalog):
    table = catalog.create_table("db.agg", SCHEMA, primary_keys=["id"], options=OPTIONS)
    table.write(commit([
        row(1, ["a", "b"], ["a", "b"], [("x", 1), ("y", 2)], [1], [("f", 1)], [1], None),
        row(2, None, ["c"], None, None, None, None, [2]),
    ]))
    table.write(commit([
        row(1, ["a"], ["b", "c"], [("x", 10)], None, [("f", 2)], None, [5]),
        row(2, ["d"], ["c", "c"], [("z", 3)], [2], [("g", 1)], [3], [6]),
    ]))
    table.write(commit([row(1, ["b", "e"], ["a"], [("w", None)], [3], None, [4], None)]))
    expected = {
        1: {"id": 1, "tags": ["a", "b", "a", "b", "e"], "utags": ["a", "b", "c"],
            "m": {"x": 10, "y": 2, "w": None}, "last": [3], "first": {"f": 1}, "lnn": [4], "fnn": [5]},
        # first_value keeps the first insert's value, null included
        2: {"id": 2, "tags": ["d"], "utags": ["c"], "m": {"z": 3}, "last": [2], "first": None, "lnn": [3],
            "fnn": [2]},
    }
    assert normalized(table.to_arrow()) == expected
    table.compact(full=True)
    assert normalized(table.to_arrow()) == expected
    table.write(commit([row(2, ["d", "f"], ["f", "c"], [("z", 4)], [9], [("h", 1)], None, None)]))
    expected[2].update(tags=["d", "d", "f"], utags=["c", "f"], m={"z": 4}, last=[9])
    assert normalized(table.to_arrow()) == expected


RETRACT_SCHEMA = pa.schema([("id", pa.int64()), ("tags", TAGS), ("utags", TAGS), ("m", MAP)])
RETRACT_OPTIONS = {k: v for k, v in OPTIONS.items() if k.split(".")[1:2] not in (["last"], ["first"], ["lnn"], ["fnn"])}


def retract_rows(*values):
    return pa.Table.from_pylist([dict(zip(RETRACT_SCHEMA.names, v, strict=True)) for v in values],
                                schema=RETRACT_SCHEMA)


def test_retractions_remove_elements_and_keys(catalog):
    table = catalog.create_table("db.retract", RETRACT_SCHEMA, primary_keys=["id"], options=RETRACT_OPTIONS)
    table.write(retract_rows((1, ["x"], ["x"], [("w", 0)])))
    # retractions merged with the values they cancel (one write buffer): -U removes one (the
    # earliest) occurrence per retracted element, and the retracted map keys
    batch = retract_rows((1, ["a", "b", "a"], ["a", "b"], [("x", 1), ("y", 2)]), (2, ["q"], ["q"], [("k", 1)]),
                         (1, ["c"], ["c"], [("z", 3)]), (1, ["a", "c"], ["b"], [("x", 99)]),
                         (2, ["q"], ["q"], [("k", 1)]))
    table.write(batch, row_kind=["+I", "+I", "+I", "-U", "-D"])
    expected = {1: {"id": 1, "tags": ["x", "b", "a"], "utags": ["x", "a", "c"], "m": {"w": 0, "y": 2, "z": 3}},
                2: {"id": 2, "tags": [], "utags": [], "m": {}}}
    assert normalized(table.to_arrow()) == expected
    table.compact(full=True)
    assert normalized(table.to_arrow()) == expected
    # a retracted element added again comes back
    table.write(retract_rows((1, ["c"], ["b"], [("x", 5)])))
    expected[1].update(tags=["x", "b", "a", "c"], utags=["x", "a", "c", "b"], m={"w": 0, "y": 2, "z": 3, "x": 5})
    assert normalized(table.to_arrow()) == expected


def test_retraction_alone_in_a_later_write_is_lost(catalog):
    """As aggregate.py documents (and Paimon does): a retraction merged with an empty accumulator
    (its own write buffer) leaves no trace for the values it should cancel in earlier files."""
    table = catalog.create_table("db.late", RETRACT_SCHEMA, primary_keys=["id"], options=RETRACT_OPTIONS)
    table.write(retract_rows((1, ["a", "b"], ["a"], [("x", 1)])))
    table.write(retract_rows((1, ["a"], ["a"], [("x", 1)])), row_kind="-U")
    expected = {1: {"id": 1, "tags": ["a", "b"], "utags": ["a"], "m": {"x": 1}}}
    assert normalized(table.to_arrow()) == expected
    table.compact(full=True)
    assert normalized(table.to_arrow()) == expected


@pytest.mark.parametrize(("column", "function", "message"), [
    ("tags", "sum", "needs a numeric column, not ARRAY"),
    ("m", "collect", "needs an ARRAY column, not MAP"),
    ("tags", "merge_map", "needs a MAP column, not ARRAY"),
    ("m", "max", "needs a comparable"),
    ("tags", "min", "needs a comparable"),
    ("tags", "listagg", "needs a STRING"),
    ("id2", "collect", "needs an ARRAY column, not BIGINT"),
    ("id2", "merge_map", "needs a MAP column, not BIGINT"),
])
def test_functions_nested_columns_refuse(catalog, column, function, message):
    schema = pa.schema([("id", pa.int64()), ("id2", pa.int64()), ("tags", TAGS), ("m", MAP)])
    options = {"bucket": "1", "merge-engine": "aggregation", f"fields.{column}.aggregate-function": function}
    with pytest.raises(OptionError, match=f"'{column}'.*{message}"):
        catalog.create_table("db.bad", schema, primary_keys=["id"], options=options)


def test_default_function_on_nested_columns_is_last_non_null(catalog):
    schema = pa.schema([("id", pa.int64()), ("tags", TAGS), ("m", MAP)])
    table = catalog.create_table("db.default", schema, primary_keys=["id"],
                                 options={"bucket": "1", "merge-engine": "aggregation"})
    table.write(pa.Table.from_pylist([{"id": 1, "tags": ["a"], "m": [("x", 1)]}], schema=schema))
    table.write(pa.Table.from_pylist([{"id": 1, "tags": None, "m": [("y", 2)]}], schema=schema))
    assert table.to_arrow().to_pylist() == [{"id": 1, "tags": ["a"], "m": [("y", 2)]}]
