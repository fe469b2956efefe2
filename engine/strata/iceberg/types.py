"""Paimon types and values as Iceberg sees them: schema JSON, single-value bound serialization and
the Avro encoding of partition values (the Iceberg spec's appendices B and D)."""

from __future__ import annotations

import datetime as dt
import struct
from decimal import Decimal, localcontext
from typing import Any

import pyarrow as pa

from strata.schema.table_schema import NESTED_DEPTH_LIMIT, NESTED_ID_BASE, TableSchema
from strata.schema.types import DataField, DataType, UnsupportedTypeError

_EPOCH = dt.date(1970, 1, 1)
# Paimon roots Iceberg has a type for (TINYINT / SMALLINT widen to int, as Paimon's export does)
_PRIMITIVES = {
    "BOOLEAN": "boolean", "TINYINT": "int", "SMALLINT": "int", "INT": "int", "INTEGER": "int",
    "BIGINT": "long", "FLOAT": "float", "DOUBLE": "double", "DATE": "date",
    "CHAR": "string", "VARCHAR": "string", "STRING": "string", "BINARY": "binary", "VARBINARY": "binary",
    "BYTES": "binary",
}


# Ids of the fields inside collections are Paimon's (SpecialFields): derived from the column's id
# and the nesting depth, so they stay fixed across schema changes; data files carry the same ids on
# their element / key / value fields (TableSchema.file_arrow_schema).


def element_id(field_id: int, depth: int) -> int:
    """The id of an ARRAY element (also a MAP value) `depth` levels below column `field_id`."""
    return NESTED_ID_BASE + field_id * NESTED_DEPTH_LIMIT + depth


def key_id(field_id: int, depth: int) -> int:
    return NESTED_ID_BASE - field_id * NESTED_DEPTH_LIMIT - depth


def iceberg_type(data_type: DataType, column: str) -> str:
    """The Iceberg primitive type of a Paimon column type; anything else is refused by name."""
    root = data_type.root
    if root in _PRIMITIVES:
        return _PRIMITIVES[root]
    if root == "DECIMAL":
        return f"decimal({data_type.precision}, {data_type.scale})"
    if root == "TIMESTAMP" and (data_type.precision or 0) <= 6:
        return "timestamp"
    if root == "TIMESTAMP_LTZ" and (data_type.precision or 0) <= 6:
        return "timestamptz"
    raise UnsupportedTypeError(f"column {column!r} of type {data_type} has no Iceberg equivalent Strata "
                               f"exports (supported: atomic types but TIME, TIMESTAMP up to precision 6, "
                               f"ARRAY, MAP, MULTISET and ROW of those)")


def iceberg_type_json(data_type: DataType, column: str, field_id: int, depth: int = 0) -> Any:
    """The Iceberg type of a column: a primitive's name, a struct of a ROW's fields, or a list /
    map object whose nested field ids are Paimon's (`element_id`, `key_id`); a MULTISET is a map
    of element to count."""
    root = data_type.root
    if root == "ROW":  # its fields have ids of their own (Paimon's IcebergDataField, depth 0 again)
        return {"type": "struct", "fields": [_field_json(f) for f in data_type.fields or ()]}
    if root == "ARRAY":
        element = data_type.element
        assert element is not None
        return {"type": "list", "element-id": element_id(field_id, depth + 1),
                "element": iceberg_type_json(element, column, field_id, depth + 1),
                "element-required": not element.nullable}
    if root in ("MAP", "MULTISET"):
        key = data_type.key if root == "MAP" else data_type.element
        value = data_type.value if root == "MAP" else DataType("INT", nullable=False)
        assert key is not None and value is not None
        return {"type": "map", "key-id": key_id(field_id, depth + 1),
                "key": iceberg_type_json(key, column, field_id, depth + 1),
                "value-id": element_id(field_id, depth + 1),
                "value": iceberg_type_json(value, column, field_id, depth + 1),
                "value-required": not value.nullable}
    return iceberg_type(data_type, column)


def check_exportable(schema: TableSchema, table: str) -> None:
    """Refuse a schema whose Iceberg mirror could not be published, naming the column and type."""
    for f in schema.fields:
        try:
            iceberg_type_json(f.type, f.name, f.id)
        except UnsupportedTypeError as exc:
            within = f"column {f.name!r} of type {f.type}: its " if f.type.is_nested else ""
            raise UnsupportedTypeError(f"table {table} has metadata.iceberg.storage set, but {within}{exc}; "
                                       f"change the column or leave metadata.iceberg.storage disabled") from None


def highest_field_id(schema: TableSchema) -> int:
    """The highest id the Iceberg schema uses (nested ids included: Iceberg's last-column-id)."""
    return max([schema.highest_field_id, 0, *(_highest(f.type, f.id, 0) for f in schema.fields)])


def _highest(data_type: DataType, field_id: int, depth: int) -> int:
    if data_type.root == "ROW":
        return max([field_id, *(_highest(f.type, f.id, 0) for f in data_type.fields or ())])
    if not data_type.is_nested:
        return field_id
    children = [data_type.element, data_type.key, data_type.value]
    nested = [_highest(c, field_id, depth + 1) for c in children if c is not None]
    return max([field_id, element_id(field_id, depth + 1), *nested])


def schema_json(schema: TableSchema) -> dict[str, Any]:
    """The Iceberg schema of a Paimon schema: same field ids and names; primary keys are identifiers."""
    keys = set(schema.primary_keys)
    out: dict[str, Any] = {"type": "struct", "schema-id": schema.id,
                           "fields": [_field_json(f) for f in schema.fields]}
    if keys:
        out["identifier-field-ids"] = [f.id for f in schema.fields if f.name in keys]
    return out


def name_mapping(schema: TableSchema) -> list[dict[str, Any]]:
    """Iceberg's ``schema.name-mapping.default``: field ids by Parquet name, for files written
    before their nested fields carried ids (readers then resolve every column by name)."""
    return [_mapped(f.type, f.id, 0, f.name) for f in schema.fields]


def _mapped(data_type: DataType, field_id: int, depth: int, name: str, own_id: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"field-id": field_id if own_id is None else own_id, "names": [name]}
    if data_type.root == "ROW":
        out["fields"] = [_mapped(f.type, f.id, 0, f.name) for f in data_type.fields or ()]
    elif data_type.root == "ARRAY" and data_type.element is not None:
        out["fields"] = [_mapped(data_type.element, field_id, depth + 1, "element",
                                 element_id(field_id, depth + 1))]
    elif data_type.root in ("MAP", "MULTISET"):
        key = data_type.key if data_type.root == "MAP" else data_type.element
        value = data_type.value if data_type.root == "MAP" else DataType("INT", nullable=False)
        assert key is not None and value is not None
        out["fields"] = [_mapped(key, field_id, depth + 1, "key", key_id(field_id, depth + 1)),
                         _mapped(value, field_id, depth + 1, "value", element_id(field_id, depth + 1))]
    return out


def _field_json(f: DataField) -> dict[str, Any]:
    out: dict[str, Any] = {"id": f.id, "name": f.name, "required": not f.type.nullable,
                           "type": iceberg_type_json(f.type, f.name, f.id)}
    if f.description:
        out["doc"] = f.description
    return out


# -- values ------------------------------------------------------------------------------------

def as_iceberg_value(value: Any, arrow_type: pa.DataType) -> Any:
    """A Python value (as Strata decodes it) in Iceberg's physical form: days, micros, unscaled."""
    if value is None:
        return None
    if pa.types.is_date(arrow_type):
        return (value - _EPOCH).days
    if pa.types.is_timestamp(arrow_type):
        micros_type = pa.timestamp("us", tz=arrow_type.tz)
        return pa.scalar(value, arrow_type).cast(micros_type).value
    if pa.types.is_decimal(arrow_type):
        with localcontext() as exact:  # the default 28 digits would round DECIMAL(29..38) values
            exact.prec = 80
            return int(Decimal(value).scaleb(arrow_type.scale))
    return value


def bound_bytes(value: Any, iceberg: str) -> bytes:
    """Iceberg's single-value binary serialization of a physical value."""
    if iceberg == "boolean":
        return b"\x01" if value else b"\x00"
    if iceberg in ("int", "date"):
        return struct.pack("<i", value)
    if iceberg in ("long", "timestamp", "timestamptz"):
        return struct.pack("<q", value)
    if iceberg == "float":
        return struct.pack("<f", value)
    if iceberg == "double":
        return struct.pack("<d", value)
    if iceberg == "string":
        return value.encode("utf-8")
    if iceberg == "binary":
        return bytes(value)
    if iceberg.startswith("decimal"):
        return _unscaled_bytes(value)
    raise UnsupportedTypeError(f"no Iceberg bound encoding for {iceberg}")


def from_bound_bytes(data: bytes, iceberg: str) -> Any:
    """The physical value of Iceberg's single-value binary serialization (bound_bytes' inverse)."""
    if iceberg == "boolean":
        return data != b"\x00"
    if iceberg in ("int", "date"):
        return struct.unpack("<i", data)[0]
    if iceberg in ("long", "timestamp", "timestamptz"):
        return struct.unpack("<q", data)[0]
    if iceberg == "float":
        return struct.unpack("<f", data)[0]
    if iceberg == "double":
        return struct.unpack("<d", data)[0]
    if iceberg == "string":
        return data.decode("utf-8")
    if iceberg == "binary":
        return bytes(data)
    if iceberg.startswith("decimal"):
        return int.from_bytes(data, "big", signed=True)
    raise UnsupportedTypeError(f"no Iceberg bound encoding for {iceberg}")


def _unscaled_bytes(unscaled: int) -> bytes:
    """Big-endian two's complement in the fewest bytes (what Java's BigInteger.toByteArray gives)."""
    length = max(1, (unscaled + (unscaled < 0)).bit_length() // 8 + 1)
    return unscaled.to_bytes(length, "big", signed=True)


def avro_partition_type(iceberg: str) -> Any:
    """The Avro type of an identity-partition value of this Iceberg type (optional: nulls allowed)."""
    if iceberg == "date":
        base: Any = {"type": "int", "logicalType": "date"}
    elif iceberg in ("timestamp", "timestamptz"):
        base = {"type": "long", "logicalType": "timestamp-micros", "adjust-to-utc": iceberg == "timestamptz"}
    elif iceberg.startswith("decimal"):
        precision, scale = (int(p) for p in iceberg[len("decimal("):-1].split(","))
        base = {"type": "fixed", "name": f"decimal_{precision}_{scale}", "size": _decimal_size(precision),
                "logicalType": "decimal", "precision": precision, "scale": scale}
    else:
        base = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
                "string": "string", "binary": "bytes"}[iceberg]
    return ["null", base]


def avro_partition_value(value: Any, iceberg: str) -> Any:
    """A physical partition value as the Avro writer wants it (decimals as fixed-size bytes)."""
    if value is None or not iceberg.startswith("decimal"):
        return value
    precision = int(iceberg[len("decimal("):-1].split(",", maxsplit=1)[0])
    return value.to_bytes(_decimal_size(precision), "big", signed=True)


def _decimal_size(precision: int) -> int:
    """Bytes needed for an unscaled decimal of `precision` digits (Iceberg's fixed width)."""
    size = 1
    while 2 ** (8 * size - 1) <= 10**precision:
        size += 1
    return size
