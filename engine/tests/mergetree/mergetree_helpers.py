"""Building key-value tables in data-file layout and merging them like the LSM tree does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from strata.mergetree.merge_function import MergeFunction, live_rows_mask
from strata.mergetree.sorting import sort_by_key
from strata.schema.table_schema import SEQUENCE_NUMBER, VALUE_KIND

KEYS = ["_KEY_k"]
KINDS = {"+I": 0, "-U": 1, "+U": 2, "-D": 3}


def kv(keys: Sequence[int], kinds: Sequence[str] | None = None, seq: Sequence[int] | None = None,
       **columns: Any) -> pa.Table:
    """A table in data-file layout: _KEY_k, _SEQUENCE_NUMBER, _VALUE_KIND, k, then the columns
    (lists, or pyarrow arrays for explicit types). Rows are given in merge order."""
    n = len(keys)
    codes = [KINDS[k] for k in (kinds or ["+I"] * n)]
    data: dict[str, Any] = {
        "_KEY_k": pa.array(keys, pa.int64()),
        SEQUENCE_NUMBER: pa.array(seq if seq is not None else range(n), pa.int64()),
        VALUE_KIND: pa.array(codes, pa.int8()),
        "k": pa.array(keys, pa.int64()),
    }
    for name, values in columns.items():
        data[name] = values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(values)
    return pa.table(data)


def merge(mf: MergeFunction, *tables: pa.Table) -> pa.Table:
    """Merge runs (or raw records) at once: concatenate, sort by key and sequence, merge."""
    combined = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    order = sort_by_key(combined, KEYS, SEQUENCE_NUMBER)
    return mf.merge(combined.take(order), KEYS)


def rows(table: pa.Table, live_only: bool = False) -> list[dict[str, Any]]:
    """Rows as dicts without the system columns (with the kind as '_kind' unless live_only)."""
    if live_only:
        table = table.filter(pa.array(live_rows_mask(table.column(VALUE_KIND).to_numpy())))
    names = {v: k for k, v in KINDS.items()}
    out = []
    for row in table.to_pylist():
        kind = names[row.pop(VALUE_KIND)]
        row.pop(SEQUENCE_NUMBER, None)  # absent from runs read without it
        row.pop("_KEY_k")
        if not live_only:
            row["_kind"] = kind
        out.append(_normalize(row))
    return out


def by_key(table: pa.Table, live_only: bool = True) -> dict[Any, dict[str, Any]]:
    return {r["k"]: r for r in rows(table, live_only)}


def _normalize(row: Mapping[str, Any]) -> dict[str, Any]:
    # maps come back as lists of (key, value) pairs; compare them as dicts
    return {k: dict(v) if isinstance(v, list) and v and isinstance(v[0], tuple) else v for k, v in row.items()}
