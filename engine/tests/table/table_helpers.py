"""Shared helpers of the table-store tests: canonical row lists, schemas with every type."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa

from strata import Table

UTC = dt.UTC

# Every atomic type Strata supports, as (column name, Arrow type).
ALL_TYPES: list[tuple[str, pa.DataType]] = [
    ("c_bool", pa.bool_()),
    ("c_tinyint", pa.int8()),
    ("c_smallint", pa.int16()),
    ("c_int", pa.int32()),
    ("c_bigint", pa.int64()),
    ("c_float", pa.float32()),
    ("c_double", pa.float64()),
    ("c_dec10", pa.decimal128(10, 2)),
    ("c_dec38", pa.decimal128(38, 10)),
    ("c_string", pa.string()),
    ("c_bytes", pa.binary()),
    ("c_date", pa.date32()),
    ("c_ts3", pa.timestamp("ms")),
    ("c_ts6", pa.timestamp("us")),
    ("c_ltz", pa.timestamp("us", tz="UTC")),
    ("c_time", pa.time32("ms")),
]


def sample_values(t: pa.DataType, n: int) -> list[Any]:
    """n distinct values of type t in increasing order, including edge values."""
    if pa.types.is_boolean(t):
        return [False, True][:n] if n <= 2 else [i % 2 == 1 for i in range(n)]
    if pa.types.is_integer(t):
        lo = -(2 ** (t.bit_width - 1))
        hi = 2 ** (t.bit_width - 1) - 1
        middle = list(range(-(n // 2) + 1, n - n // 2 - 1))
        return sorted({lo, hi, *middle})[:n] if n >= 2 else [0]
    if pa.types.is_floating(t):
        return [float(i) * 1.5 - 7.25 for i in range(n)]
    if pa.types.is_decimal(t):
        digits = t.precision - t.scale
        big = "9" * digits + "." + "9" * t.scale  # the largest value that fits (no context rounding)
        return [Decimal("-" + big), *(Decimal(37 * i).scaleb(-t.scale) for i in range(n - 2)), Decimal(big)][:n]
    if pa.types.is_string(t):
        return ["", "a", "abc", "héllo wörld", "z" * 40, "日本語", *(f"s{i:04d}" for i in range(n))][:n]
    if pa.types.is_binary(t):
        return [b"", b"\x00", b"\x00\x01", b"\xff" * 20, *(i.to_bytes(4, "big") for i in range(n))][:n]
    if pa.types.is_date(t):
        base = dt.date(1969, 12, 30)
        return [dt.date(1, 1, 1), *(base + dt.timedelta(days=400 * i) for i in range(n - 2)),
                dt.date(9999, 12, 31)][:n]
    if pa.types.is_timestamp(t):
        tz = UTC if t.tz else None
        base = dt.datetime(1969, 12, 31, 23, 59, 58, tzinfo=tz)
        micros = 1000 if t.unit == "ms" else 1
        return [base + dt.timedelta(microseconds=micros * 7 * i, hours=5 * i) for i in range(n)]
    if pa.types.is_time(t):
        return [dt.time(0), *(dt.time(i % 24, (7 * i) % 60, (13 * i) % 60, 1000 * i) for i in range(1, n - 1)),
                dt.time(23, 59, 59, 999000)][:n]
    raise AssertionError(f"no sample values for {t}")


def all_types_table(n: int, with_nulls: bool = True, id_offset: int = 0) -> pa.Table:
    """n rows: an `id` column then one column per type; row i is null in column (i mod 15)."""
    columns: dict[str, pa.Array] = {"id": pa.array(range(id_offset, id_offset + n), pa.int64())}
    for j, (name, t) in enumerate(ALL_TYPES):
        values = sample_values(t, max(n, 2))[:n]
        if len(values) < n:  # booleans: cycle
            values = [values[i % len(values)] for i in range(n)]
        if with_nulls:
            values = [None if i % len(ALL_TYPES) == j else v for i, v in enumerate(values)]
        columns[name] = pa.array(values, t)
    return pa.table(columns)


def _order(value: Any) -> tuple:
    return (value is not None, str(type(value)), value if value is not None else 0)


def rows(data: pa.Table | Table, keys: list[str] | None = None) -> list[dict[str, Any]]:
    """Rows as dicts, sorted by `keys` (default: every column), nulls first; a Table is read."""
    table = data.to_arrow() if isinstance(data, Table) else data
    out = table.to_pylist()
    names = keys or table.column_names
    return sorted(out, key=lambda r: tuple(_order(r[k]) for k in names))


def snapshot_ids(table: Table) -> list[int]:
    return [s.id for s in table.snapshots()]


def live_files(table: Table, snapshot_id: int | None = None) -> list:
    return [e for s in table.scan(snapshot_id=snapshot_id) for e in s.files]
