"""Plain-Python models of the partial-update, aggregation and first-row merge engines, for the
state machines of test_merge_engine_state_machines.py.

A model folds the records of one key, in write order, into a state; ``view`` turns a state into
the row a reader sees (None: the key is not visible). Records are (kind, {column: value}).

Some inputs make Paimon's (and Strata's) result depend on which runs a compaction happens to
merge (see the docstrings of strata.mergetree.partial_update and aggregate); the models exclude
them through ``retraction`` (what a retraction may carry), ``retract_needs_row`` and
``delete_taints``:
* a retraction that is the first record of a merge seeds the row with its own values, so
  partial-update retractions carry nulls in the columns that a seed would fill;
* with partial-update.remove-record-on-delete, a key written after a -D keeps or loses its
  older fields (a -U even revives the -D's values) depending on whether the -D met them first:
  the machine sends a deleted key nothing but -D until a full compaction drops the -D;
* a sequence-group retraction on a key with no insert merges to an invisible -D that a full
  compaction drops together with its group sequence, as in Paimon (see
  test_a_retraction_only_key_merges_to_delete_as_in_paimon): retractions go to existing keys only;
* last_non_null_value retracted by a non-null value is null or the older value depending on
  whether the retraction met it: retractions carry null there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

Row = dict[str, Any]
State = dict[str, Any]
INSERTS = ("+I", "+U")
RETRACTIONS = ("-U", "-D")
SMALL_INT = st.none() | st.integers(-4, 4)
TOKENS = st.none() | st.sampled_from(["x", "y", "z", "", " "])  # blank tokens are skipped by listagg


def _key_field() -> pa.Field:
    return pa.field("k", pa.int32(), nullable=False)


@dataclass
class EngineModel:
    """One merge-engine configuration: table options, record strategies and the fold."""

    name: str
    schema: pa.Schema
    options: dict[str, str]
    producers: tuple[str, ...]
    insert: st.SearchStrategy[Row]  # value columns of an insert
    retraction: st.SearchStrategy[Row] | None  # value columns of a retraction; None: refused
    fold: Callable[[State | None, str, Row], State | None]
    view: Callable[[State], tuple | None]
    retract_needs_row: bool = False
    delete_taints: bool = False
    refused_message: str = ""
    value_names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.value_names = [f.name for f in self.schema if f.name != "k"]

    def row_view(self, row: Row) -> tuple:
        return tuple(row[n] for n in self.value_names)


# -- partial-update -----------------------------------------------------------------------------

PU_SCHEMA = pa.schema([_key_field(), pa.field("a", pa.int64()), pa.field("b", pa.string()),
                       pa.field("c", pa.int64())])
PU_INSERT = st.fixed_dictionaries({"a": SMALL_INT, "b": TOKENS, "c": SMALL_INT})


def _pu_fold(delete_mode: str) -> Callable[[State | None, str, Row], State | None]:
    def fold(state: State | None, kind: str, row: Row) -> State | None:
        if kind in RETRACTIONS:
            if delete_mode == "remove-record-on-delete" and kind == "-D":
                return None  # removed (a -U is skipped)
            return state  # ignore-delete, or the -U of remove-record-on-delete
        old = state or {"a": None, "b": None, "c": None}
        return {n: row[n] if row[n] is not None else old[n] for n in old}  # latest non-null wins

    return fold


def partial_update(delete_mode: str) -> EngineModel:
    """delete_mode: 'refused' (no option), 'ignore-delete' or 'remove-record-on-delete'."""
    options = {"merge-engine": "partial-update"}
    retraction: st.SearchStrategy[Row] | None = None
    if delete_mode == "ignore-delete":
        options["ignore-delete"] = "true"
        retraction = PU_INSERT  # dropped, whatever they carry
    elif delete_mode == "remove-record-on-delete":
        options["partial-update.remove-record-on-delete"] = "true"
        retraction = st.fixed_dictionaries({"a": st.none(), "b": st.none(), "c": st.none()})
    return EngineModel(f"partial-update/{delete_mode}", PU_SCHEMA, options,
                       ("none", "input", "lookup", "full-compaction"), PU_INSERT, retraction,
                       _pu_fold(delete_mode), lambda s: (s["a"], s["b"], s["c"]),
                       delete_taints=delete_mode == "remove-record-on-delete",
                       refused_message="partial-update.remove-record-on-delete")


# g orders the group (a, s); s sums within the group; c is outside any group
GROUP_SCHEMA = pa.schema([_key_field(), pa.field("g", pa.int64()), pa.field("a", pa.int64()),
                          pa.field("s", pa.int64()), pa.field("c", pa.string())])


def _at_least(new: int | None, current: int | None) -> bool:
    """A group sequence that may overwrite the group: non-null and >= the largest (nulls smallest)."""
    return new is not None and (current is None or new >= current)


def _group_fold(state: State | None, kind: str, row: Row) -> State | None:
    old = state or {"g": None, "a": None, "s": None, "c": None, "live": False}
    new = dict(old)
    if kind in RETRACTIONS:
        if _at_least(row["g"], old["g"]):
            new["g"], new["a"] = row["g"], None
        return new
    new["live"] = True
    if row["c"] is not None:
        new["c"] = row["c"]
    if row["g"] is not None and row["s"] is not None:  # aggregated in any sequence order
        new["s"] = row["s"] if old["s"] is None else old["s"] + row["s"]
    if _at_least(row["g"], old["g"]):
        new["g"], new["a"] = row["g"], row["a"]
    return new


def partial_update_sequence_group() -> EngineModel:
    options = {"merge-engine": "partial-update", "fields.g.sequence-group": "a,s",
               "fields.s.aggregate-function": "sum"}
    insert = st.fixed_dictionaries({"g": st.none() | st.integers(0, 6), "a": SMALL_INT, "s": SMALL_INT,
                                    "c": TOKENS})
    retraction = st.fixed_dictionaries({"g": st.none() | st.integers(0, 6), "a": st.none(), "s": st.none(),
                                        "c": st.none()})
    return EngineModel("partial-update/sequence-group", GROUP_SCHEMA, options,
                       ("none", "input", "lookup", "full-compaction"), insert, retraction, _group_fold,
                       lambda s: (s["g"], s["a"], s["s"], s["c"]) if s["live"] else None,
                       retract_needs_row=True)


# -- aggregation --------------------------------------------------------------------------------

AGG_SCHEMA = pa.schema([_key_field(), pa.field("total", pa.int64()), pa.field("peak", pa.int64()),
                        pa.field("last", pa.int64()), pa.field("lv", pa.int64()), pa.field("tags", pa.string())])
AGG_OPTIONS = {"merge-engine": "aggregation",
               "fields.total.aggregate-function": "sum",
               "fields.peak.aggregate-function": "max", "fields.peak.ignore-retract": "true",
               # "last" keeps the default function, last_non_null_value
               "fields.lv.aggregate-function": "last_value",
               "fields.tags.aggregate-function": "listagg", "fields.tags.ignore-retract": "true"}


def _add(acc: int | None, value: int | None, sign: int = 1) -> int | None:
    if value is None:
        return acc
    return sign * value if acc is None else acc + sign * value


def _agg_fold(ignore_delete: bool) -> Callable[[State | None, str, Row], State | None]:
    def fold(state: State | None, kind: str, row: Row) -> State | None:
        if kind in RETRACTIONS and ignore_delete:
            return state
        old = state or {"total": None, "peak": None, "last": None, "lv": None, "tags": None}
        if kind in RETRACTIONS:  # peak and tags ignore retractions; "last" is retracted by null only
            return {**old, "total": _add(old["total"], row["total"], -1), "lv": None}
        tags = old["tags"]
        if row["tags"] is not None and row["tags"].strip():
            tags = row["tags"] if tags is None else f"{tags},{row['tags']}"
        peak = old["peak"] if row["peak"] is None or (old["peak"] is not None and old["peak"] >= row["peak"]) \
            else row["peak"]
        return {"total": _add(old["total"], row["total"]), "peak": peak,
                "last": row["last"] if row["last"] is not None else old["last"], "lv": row["lv"], "tags": tags}

    return fold


def aggregation(ignore_delete: bool) -> EngineModel:
    options = dict(AGG_OPTIONS)
    if ignore_delete:
        options["ignore-delete"] = "true"
    insert = st.fixed_dictionaries({"total": SMALL_INT, "peak": SMALL_INT, "last": SMALL_INT, "lv": SMALL_INT,
                                    "tags": TOKENS})
    retraction = st.fixed_dictionaries({"total": SMALL_INT, "peak": SMALL_INT, "last": st.none(),
                                        "lv": SMALL_INT, "tags": TOKENS})
    return EngineModel(f"aggregation/ignore-delete={ignore_delete}", AGG_SCHEMA, options,
                       ("none", "input", "lookup", "full-compaction"), insert, retraction, _agg_fold(ignore_delete),
                       lambda s: (s["total"], s["peak"], s["last"], s["lv"], s["tags"]))


# -- first-row ----------------------------------------------------------------------------------

def _first_row_fold(state: State | None, kind: str, row: Row) -> State | None:
    if kind in RETRACTIONS or state is not None:
        return state  # the first insert wins; retractions are dropped (ignore-delete)
    return dict(row)


def first_row(ignore_delete: bool) -> EngineModel:
    options = {"merge-engine": "first-row"}
    if ignore_delete:
        options["ignore-delete"] = "true"
    return EngineModel(f"first-row/ignore-delete={ignore_delete}", PU_SCHEMA, options, ("none", "lookup"),
                       PU_INSERT, PU_INSERT if ignore_delete else None, _first_row_fold,
                       lambda s: (s["a"], s["b"], s["c"]), refused_message="ignore-delete")
