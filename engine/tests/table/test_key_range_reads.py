"""Key-range reads of primary-key tables against a model: a range on the first key field takes each
run's rows as a slice found by binary search (the files are sorted by key), with bounds past the
key type's own range; a range on another key field, or a value field, tests every row. Several
sorted runs (write-only: nothing compacts them), updates and deletes, and a model dict."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import strata
from strata import col
from strata.table.read import TableRead

INT32 = (-(2**31), 2**31 - 1)
SCHEMA = pa.schema([pa.field("k1", pa.int32(), nullable=False), pa.field("k2", pa.string(), nullable=False),
                    pa.field("v", pa.int64())])

keys = st.tuples(st.sampled_from([INT32[0], -5, -1, 0, 1, 2, 3, 7, 100, INT32[1]]), st.sampled_from(["a", "b"]))
commits = st.lists(st.lists(st.tuples(keys, st.one_of(st.none(), st.integers(0, 99))), min_size=1, max_size=12),
                   min_size=1, max_size=5)  # (key, value) per row; a None value deletes the key
bounds = st.sampled_from([-(2**63), -(2**40), INT32[0] - 1, INT32[0], -5, -1, 0, 2, 3, 100, INT32[1],
                          INT32[1] + 1, 2**40])


@pytest.fixture
def make_table(tmp_path_factory: pytest.TempPathFactory):
    catalog = strata.load_catalog(str(tmp_path_factory.mktemp("key_ranges")))
    catalog.create_database("db", ignore_if_exists=True)
    made = [0]

    def make() -> strata.Table:
        made[0] += 1
        return catalog.create_table(f"db.t{made[0]}", SCHEMA, primary_keys=["k1", "k2"],
                                    options={"bucket": "1", "write-only": "true"})
    return make


def _load(table: strata.Table, rounds: list[list[tuple[tuple[int, str], int | None]]]) -> dict:
    model: dict[tuple[int, str], int] = {}
    for rows in rounds:
        latest = dict(rows)  # one record per key and commit: the last one
        upserts = [(k, v) for k, v in latest.items() if v is not None]
        deletes = [k for k, v in latest.items() if v is None]
        if upserts:
            table.write(pa.table({"k1": [k[0] for k, _ in upserts], "k2": [k[1] for k, _ in upserts],
                                  "v": [v for _, v in upserts]}, schema=SCHEMA))
        if deletes:
            table.delete(pa.table({"k1": [k[0] for k in deletes], "k2": [k[1] for k in deletes],
                                   "v": pa.nulls(len(deletes), pa.int64())}, schema=SCHEMA))
        model.update((k, v) for k, v in upserts)
        for k in deletes:
            model.pop(k, None)
    return model


def _rows(table: pa.Table) -> set[tuple[int, str, int]]:
    return set(zip(table.column("k1").to_pylist(), table.column("k2").to_pylist(), table.column("v").to_pylist(),
                   strict=True))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=commits, lo=bounds, hi=bounds)
def test_a_range_of_the_first_key_field_reads_what_the_model_holds(make_table, rounds, lo, hi):
    table = make_table()
    model = _load(table, rounds)
    predicate = col("k1").between(lo, hi)
    sliced = TableRead(table, filter=predicate).key_range  # binding narrows bounds past int32's range
    assert sliced is not None and sliced[0] == "_KEY_k1"
    expected = {(k1, k2, v) for (k1, k2), v in model.items() if lo <= k1 <= hi}
    assert _rows(table.to_arrow(filter=predicate)) == expected
    above = col("k1") > lo  # one bound: the other is the type's end
    assert _rows(table.to_arrow(filter=above)) == {(k1, k2, v) for (k1, k2), v in model.items() if k1 > lo}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=commits, lo=bounds)
def test_other_key_filters_test_every_row(make_table, rounds, lo):
    table = make_table()
    model = _load(table, rounds)
    on_second = col("k2") == "b"
    assert TableRead(table, filter=on_second).key_range is None
    assert _rows(table.to_arrow(filter=on_second)) == {(k1, k2, v) for (k1, k2), v in model.items() if k2 == "b"}
    both = (col("k1") >= lo) & (col("k2") == "a")
    assert TableRead(table, filter=both).key_range is None
    assert _rows(table.to_arrow(filter=both)) == {(k1, k2, v) for (k1, k2), v in model.items()
                                                  if k1 >= lo and k2 == "a"}
