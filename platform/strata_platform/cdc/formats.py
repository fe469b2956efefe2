"""Change events of CDC topics: debezium-json and canal-json, to rows with row kinds and types.

debezium-json: ``{"before", "after", "op", "source": {"db", "table"}}``, optionally wrapped as
``{"schema": ..., "payload": ...}`` (then the column types come from the schema, including the
Debezium logical types Date, Timestamp, MicroTimestamp and Decimal); the message key (the primary
key as JSON, wrapped or not) names the primary key. Ops: c/r -> +I, u -> -U (before) and +U
(after), d -> -D (before); tombstones (null values) are skipped.

canal-json: ``{"data": [...], "old": [...], "type": "INSERT|UPDATE|DELETE", "database", "table",
"pkNames", "mysqlType"}``, values as strings typed by ``mysqlType``; UPDATE rows become -U (the
row with its `old` values) and +U; DDL messages (``isDdl``) are skipped: the columns of the data
carry schema changes.
"""

from __future__ import annotations

import base64
import decimal
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = 0, 1, 2, 3


@dataclass
class ChangeEvent:
    database: str | None
    table: str | None
    changes: list[tuple[int, Any]]  # (row kind code, row dict; None rows are skipped)
    fields: dict[str, pa.DataType] = field(default_factory=dict)  # column -> type, in column order
    primary_keys: list[str] = field(default_factory=list)
    wire: str = "json"  # how values are encoded: "json" (Debezium conventions) or "strings" (canal)


class UnsupportedEventError(ValueError):
    pass


def parse(fmt: str, key: bytes | None, value: bytes | None) -> ChangeEvent | None:
    if value is None or not value.strip():
        return None  # a tombstone
    if fmt == "debezium-json":
        return parse_debezium(key, value)
    if fmt == "canal-json":
        return parse_canal(value)
    raise ValueError(f"unknown CDC format {fmt!r}: use debezium-json or canal-json")


# -- debezium ---------------------------------------------------------------------------------------
_DEBEZIUM_TYPES = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
                   "float32": pa.float32(), "float": pa.float32(), "float64": pa.float64(),
                   "double": pa.float64(), "boolean": pa.bool_(), "string": pa.string(),
                   "bytes": pa.binary()}
_DEBEZIUM_LOGICAL = {"io.debezium.time.Date": pa.date32(), "io.debezium.time.Timestamp": pa.timestamp("ms"),
                     "io.debezium.time.MicroTimestamp": pa.timestamp("us"),
                     "io.debezium.time.NanoTimestamp": pa.timestamp("ns"),
                     "org.apache.kafka.connect.data.Date": pa.date32(),
                     "org.apache.kafka.connect.data.Timestamp": pa.timestamp("ms")}


def parse_debezium(key: bytes | None, value: bytes) -> ChangeEvent:
    obj = json.loads(value)
    schema = None
    if isinstance(obj, dict) and "payload" in obj and "op" not in obj:
        schema, obj = obj.get("schema"), obj["payload"]
    if not isinstance(obj, dict) or "op" not in obj:
        raise UnsupportedEventError("not a debezium-json change event (no 'op')")
    op, before, after = obj["op"], obj.get("before"), obj.get("after")
    changes: list[tuple[int, Any]]
    if op in ("c", "r"):
        changes = [(INSERT, after)]
    elif op == "u":
        changes = ([(UPDATE_BEFORE, before)] if before is not None else []) + [(UPDATE_AFTER, after)]
    elif op == "d":
        changes = [(DELETE, before)]
    else:
        raise UnsupportedEventError(f"unsupported debezium op {op!r}")
    source = obj.get("source") or {}
    fields: dict[str, pa.DataType] = {}
    decimals: dict[str, int] = {}
    if schema is not None:
        fields, decimals = _debezium_schema_fields(schema)
    if not fields:
        sample = after if after is not None else before
        fields = {name: _infer_type(v) for name, v in (sample or {}).items()}
    if decimals:
        changes = [(k, _decode_decimals(row, decimals)) for k, row in changes]
    return ChangeEvent(source.get("db"), source.get("table"), changes, fields, _debezium_key(key))


def _debezium_schema_fields(schema: dict[str, Any]) -> tuple[dict[str, pa.DataType], dict[str, int]]:
    fields: dict[str, pa.DataType] = {}
    decimals: dict[str, int] = {}
    for part in schema.get("fields", []):
        if part.get("field") not in ("after", "before") or part.get("type") != "struct" \
                or not part.get("fields"):
            continue
        for f in part.get("fields", []):
            name, logical = f["field"], f.get("name")
            params = f.get("parameters") or {}
            if logical == "org.apache.kafka.connect.data.Decimal":
                scale = int(params.get("scale", 0))
                precision = int(params.get("connect.decimal.precision", 38))
                fields[name] = pa.decimal128(precision, scale)
                decimals[name] = scale
            elif logical in _DEBEZIUM_LOGICAL:
                fields[name] = _DEBEZIUM_LOGICAL[logical]
            else:
                fields[name] = _DEBEZIUM_TYPES.get(f.get("type", "string"), pa.string())
        break
    return fields, decimals


def _decode_decimals(row: dict[str, Any] | None, decimals: dict[str, int]) -> dict[str, Any] | None:
    """Debezium's precise decimals are base64 big-endian unscaled integers; as strings here."""
    if row is None:
        return row
    out = dict(row)
    for name, scale in decimals.items():
        v = out.get(name)
        if isinstance(v, str) and not re.fullmatch(r"-?\d+(\.\d*)?", v):
            unscaled = int.from_bytes(base64.b64decode(v), "big", signed=True)
            out[name] = str(decimal.Decimal(unscaled).scaleb(-scale))
        elif isinstance(v, (int, float)):
            out[name] = str(v)
    return out


def _debezium_key(key: bytes | None) -> list[str]:
    if not key:
        return []
    try:
        obj = json.loads(key)
    except ValueError:
        return []
    if isinstance(obj, dict) and "payload" in obj and "schema" in obj:
        obj = obj["payload"]
    return list(obj) if isinstance(obj, dict) else []


def _infer_type(value: Any) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float):
        return pa.float64()
    return pa.string()


# -- canal ------------------------------------------------------------------------------------------
def parse_canal(value: bytes) -> ChangeEvent | None:
    obj = json.loads(value)
    if not isinstance(obj, dict):
        raise UnsupportedEventError("not a canal-json change event (not a JSON object)")
    if obj.get("isDdl"):
        return None
    kind = str(obj.get("type", "")).upper()
    data = obj.get("data") or []
    old = obj.get("old") or []
    changes: list[tuple[int, Any]] = []
    if kind == "INSERT":
        changes = [(INSERT, row) for row in data]
    elif kind == "UPDATE":
        for i, row in enumerate(data):
            previous = {**row, **(old[i] if i < len(old) and old[i] else {})}
            changes += [(UPDATE_BEFORE, previous), (UPDATE_AFTER, row)]
    elif kind == "DELETE":
        changes = [(DELETE, row) for row in data]
    else:
        raise UnsupportedEventError(f"unsupported canal type {kind!r}")
    mysql_types = obj.get("mysqlType") or {}
    names = list(mysql_types) or (list(data[0]) if data else [])
    fields = {n: mysql_type(mysql_types.get(n, "varchar")) for n in names}
    return ChangeEvent(obj.get("database"), obj.get("table"), changes, fields,
                       list(obj.get("pkNames") or []), wire="strings")


def mysql_type(text: str) -> pa.DataType:
    """MySQL column type (canal's mysqlType) -> Arrow, as Paimon's MySQL type mapping does."""
    t = text.lower().strip()
    unsigned = "unsigned" in t
    m = re.match(r"([a-z]+)\s*(?:\((\d+)(?:\s*,\s*(\d+))?\))?", t)
    base = m.group(1) if m else t
    p = int(m.group(2)) if m and m.group(2) else None
    s = int(m.group(3)) if m and m.group(3) else 0
    if base == "tinyint":
        return pa.bool_() if p == 1 else (pa.int16() if unsigned else pa.int8())
    if base == "smallint":
        return pa.int32() if unsigned else pa.int16()
    if base in ("mediumint", "int", "integer"):
        return pa.int64() if unsigned else pa.int32()
    if base == "bigint":
        return pa.decimal128(20, 0) if unsigned else pa.int64()
    if base == "float":
        return pa.float32()
    if base in ("double", "real"):
        return pa.float64()
    if base in ("decimal", "numeric"):
        return pa.decimal128(p or 10, s)
    if base == "date":
        return pa.date32()
    if base in ("datetime", "timestamp"):
        return pa.timestamp("ms" if (p or 0) <= 3 else "us")
    if base in ("bit", "boolean", "bool"):
        return pa.bool_()
    if base in ("binary", "varbinary", "blob", "tinyblob", "mediumblob", "longblob"):
        return pa.binary()
    return pa.string()


def rows_from_strings(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    """Canal rows (string values) typed by `schema` (missing columns are null)."""
    columns = []
    for f in schema:
        raw = pa.array([r.get(f.name) for r in rows], pa.string())
        if pa.types.is_boolean(f.type):
            lowered = [None if v is None else v.lower() in ("1", "true", "t", "y") for v in raw.to_pylist()]
            columns.append(pa.array(lowered, pa.bool_()))
        elif pa.types.is_binary(f.type):
            columns.append(raw.cast(pa.binary()))
        else:
            columns.append(raw.cast(f.type))
    return pa.Table.from_arrays(columns, schema=pa.schema([f.with_nullable(True) for f in schema]))
