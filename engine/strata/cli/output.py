"""Text output of the ``strata`` command line: aligned tables, CSV and JSON rows, times and sizes."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, TextIO

import pyarrow as pa

from strata.table.table import Table


def emit(data: pa.Table, fmt: str, out: TextIO) -> None:
    if fmt == "csv":
        import pyarrow.csv as pcsv

        buffer = io.BytesIO()
        pcsv.write_csv(data, buffer, pcsv.WriteOptions(quoting_style="needed"))
        out.write(buffer.getvalue().decode("utf-8"))
    elif fmt == "json":
        write_json(data, out)
    else:
        out.write(format_arrow(data) + "\n")


def write_json(data: pa.Table, out: TextIO) -> None:
    """A JSON array, one row object per line (decimals as strings, times in ISO 8601)."""
    out.write("[")
    first = True
    for row in _rows(data):
        out.write("\n" if first else ",\n")
        out.write(json.dumps(row, default=_json_value, ensure_ascii=False))
        first = False
    out.write("\n]\n" if not first else "]\n")


def _rows(data: pa.Table) -> Iterator[dict[str, Any]]:
    for batch in data.to_batches(max_chunksize=10_000):
        yield from batch.to_pylist()


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                 numeric: set[int] | None = None) -> str:
    """An aligned text table; columns in `numeric` are right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    right = numeric or set()

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def format_arrow(data: pa.Table) -> str:
    numeric = {i for i, f in enumerate(data.schema)
               if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)}
    rows = [[row[name] for name in data.column_names] for row in _rows(data)]
    text = format_table(data.column_names, rows, numeric)
    return f"{text}\n({data.num_rows} row{'s' if data.num_rows != 1 else ''})"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bytes):
        return value.hex()
    return str(value).replace("\n", "\\n")


def format_time(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000).isoformat(sep=" ", timespec="milliseconds")


def format_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def partition_text(table: Table, values: Sequence[Any]) -> str:
    if not table.schema.partition_keys:
        return "-"
    from strata.io.paths import partition_value_string

    return ",".join(f"{k}={partition_value_string(v)}" for k, v in zip(table.schema.partition_keys, values,
                                                                        strict=False))
