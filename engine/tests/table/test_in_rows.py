"""in_rows (a key set as a predicate): the mask, the Arrow expression and statistics pruning agree
with a plain Python model (a set of key tuples; nulls never match), and a delete by key set on an
append table with deletion vectors marks exactly the matching rows under the given commit id."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import strata
from strata.expressions import ColumnStats, in_rows

INTS = st.one_of(st.none(), st.integers(-5, 5))
TEXT = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "ab"]))
ROWS = st.lists(st.tuples(INTS, TEXT), max_size=40)


def _table(rows: list[tuple[int | None, str | None]]) -> pa.Table:
    return pa.table({"k": pa.array([r[0] for r in rows], pa.int64()), "s": pa.array([r[1] for r in rows], pa.string())})


def _model(data: list[tuple[int | None, str | None]], keys: list[tuple[int | None, str | None]],
           columns: list[int]) -> list[int]:
    wanted = {tuple(k[c] for c in columns) for k in keys if all(k[c] is not None for c in columns)}
    return [i for i, row in enumerate(data) if tuple(row[c] for c in columns) in wanted]


@pytest.mark.parametrize("columns", [[0], [1], [0, 1]], ids=["int", "string", "both"])
@settings(max_examples=60, deadline=None)
@given(data=ROWS, keys=ROWS)
def test_mask_and_expression_match_the_model(columns: list[int], data: list, keys: list) -> None:
    names = [["k", "s"][c] for c in columns]
    predicate = in_rows(_table(keys).select(names))
    table = _table(data).append_column("row", pa.array(range(len(data)), pa.int64()))
    expected = _model(data, keys, columns)
    assert table.filter(predicate.mask(table)).column("row").to_pylist() == expected
    assert table.filter(predicate.to_arrow()).column("row").to_pylist() == expected


@settings(max_examples=100, deadline=None)
@given(data=st.lists(st.tuples(st.integers(-5, 5), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=20),
       keys=ROWS)
def test_statistics_never_prune_a_unit_with_a_match(data: list, keys: list) -> None:
    unit = _table(data)
    stats = {n: ColumnStats(min(unit.column(n).to_pylist()), max(unit.column(n).to_pylist()), 0, unit.num_rows)
             for n in ("k", "s")}
    predicate = in_rows(_table(keys))
    if _model(data, keys, [0, 1]):
        assert predicate.may_match(stats.get)


def test_a_key_set_of_nulls_prunes_everything() -> None:
    predicate = in_rows(pa.table({"k": pa.array([None, None], pa.int64())}))
    assert not predicate.may_match(lambda _: ColumnStats(0, 10, 0, 5))
    assert not predicate.may_match(lambda _: None)


def test_delete_by_key_set_marks_exactly_the_matching_rows(catalog: strata.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("region", pa.string()),
                        pa.field("v", pa.int64())])
    table = catalog.create_table("db.events", schema, options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    regions = ["eu", "us", "ap"]
    for start in (0, 1000):
        ids = list(range(start, start + 1000))
        table.write(pa.table({"id": ids, "region": [regions[i % 3] for i in ids], "v": ids}, schema=schema))
    keys = pa.table({"id": pa.array([3, 4, 1500, 99999], pa.int64()), "region": ["eu", "us", "ap", "eu"]})
    result = table.delete_where(in_rows(keys), commit_user="deleter", identifier=7)
    assert result.deleted_rows == 2  # 3 is "eu" but 4 is "us" (4 % 3 = 1), 1500 is "eu"
    assert table.new_commit("deleter").last_committed_identifier() == 7
    live = table.to_arrow()
    assert live.num_rows == 1998
    gone = {(3, "eu"), (4, "us")}
    assert not gone & set(zip(live.column("id").to_pylist(), live.column("region").to_pylist(), strict=True))
    assert result.files == 1  # both rows are in the first file; the second was pruned by statistics
