"""Paimon data types: parsing the SQL-like JSON form, and mapping to and from Arrow.

Paimon writes atomic types as strings such as ``"BIGINT NOT NULL"``, ``"DECIMAL(10, 2)"`` or
``"TIMESTAMP(6) WITH LOCAL TIME ZONE"``, and collection types as JSON objects:
``{"type": "ARRAY NOT NULL", "element": "INT"}``, ``{"type": "MAP", "key": "STRING NOT NULL",
"value": "INT"}``, ``{"type": "MULTISET", "element": "STRING"}``, ``{"type": "ROW", "fields": [{"id":
2, "name": "x", "type": "INT"}]}`` (DataTypeJsonParser). Strata supports the atomic types, ARRAY,
MAP, MULTISET and ROW (whose fields carry field ids; the SQL form ``ROW<...>``, without them, is refused).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

MAX_VARCHAR = 2147483647
MAX_DECIMAL_PRECISION = 38

# root name -> canonical Paimon spelling when it has no parameters
_SIMPLE = {
    "BOOLEAN": "BOOLEAN", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INT": "INT",
    "INTEGER": "INT", "BIGINT": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "DATE": "DATE",
    "STRING": "STRING", "BYTES": "BYTES",
}
NESTED_ROOTS = ("ARRAY", "MAP", "MULTISET", "ROW")
_PARAM = re.compile(
    r"^(?P<root>[A-Z_ ]+?)\s*(\((?P<args>[^)]*)\))?(?P<ltz>\s+WITH LOCAL TIME ZONE)?$")


class UnsupportedTypeError(ValueError):
    """A type string or Arrow type that Strata cannot map."""


@dataclass(frozen=True)
class DataType:
    """A Paimon type: an atomic ``root`` (BIGINT, DECIMAL, VARCHAR, ...) or a collection.

    ARRAY and MULTISET have an ``element``; MAP has a ``key`` and a ``value`` type.
    """

    root: str
    nullable: bool = True
    precision: int | None = None  # DECIMAL precision, TIMESTAMP/TIME fractional digits
    scale: int | None = None  # DECIMAL scale
    length: int | None = None  # CHAR / VARCHAR / BINARY / VARBINARY length
    element: DataType | None = None  # ARRAY / MULTISET element type
    key: DataType | None = None  # MAP key type
    value: DataType | None = None  # MAP value type
    fields: tuple[DataField, ...] | None = None  # ROW fields (each with its own field id)

    @staticmethod
    def array(element: DataType, nullable: bool = True) -> DataType:
        return DataType("ARRAY", nullable, element=element)

    @staticmethod
    def multiset(element: DataType, nullable: bool = True) -> DataType:
        return DataType("MULTISET", nullable, element=element)

    @staticmethod
    def map(key: DataType, value: DataType, nullable: bool = True) -> DataType:
        return DataType("MAP", nullable, key=key, value=value)

    @property
    def is_nested(self) -> bool:
        return self.root in NESTED_ROOTS

    def not_null(self) -> DataType:
        return replace(self, nullable=False)

    def with_nullable(self, nullable: bool) -> DataType:
        return replace(self, nullable=nullable)

    # -- JSON (Paimon's form: a string, or an object for collections) ---------------
    def to_json(self) -> Any:
        """A ``str`` for atomic types, a ``dict`` for ARRAY / MAP / MULTISET."""
        if not self.is_nested:
            return str(self)
        out: dict[str, Any] = {"type": self.root if self.nullable else f"{self.root} NOT NULL"}
        if self.root == "ROW":
            out["fields"] = [f.to_json() for f in self.fields or ()]
        elif self.root == "MAP":
            out["key"] = self._child(self.key).to_json()
            out["value"] = self._child(self.value).to_json()
        else:
            out["element"] = self._child(self.element).to_json()
        return out

    def __str__(self) -> str:
        """The SQL form, e.g. ``DECIMAL(10, 2) NOT NULL`` or ``MAP<STRING NOT NULL, ARRAY<INT>>``."""
        text = self._base_string()
        return text if self.nullable else f"{text} NOT NULL"

    def _child(self, child: DataType | None) -> DataType:
        if child is None:
            raise UnsupportedTypeError(f"{self.root} type without its element/key/value type")
        return child

    def _base_string(self) -> str:
        r = self.root
        if r == "ROW":
            return f"ROW<{', '.join(f'{f.name} {f.type}' for f in self.fields or ())}>"
        if r == "MAP":
            return f"MAP<{self._child(self.key)}, {self._child(self.value)}>"
        if r in ("ARRAY", "MULTISET"):
            return f"{r}<{self._child(self.element)}>"
        if r == "DECIMAL":
            return f"DECIMAL({self.precision}, {self.scale})"
        if r == "VARCHAR":
            return "STRING" if self.length == MAX_VARCHAR else f"VARCHAR({self.length})"
        if r == "VARBINARY":
            return "BYTES" if self.length == MAX_VARCHAR else f"VARBINARY({self.length})"
        if r in ("CHAR", "BINARY"):
            return f"{r}({self.length})"
        if r in ("TIMESTAMP", "TIME"):
            return f"{r}({self.precision})"
        if r == "TIMESTAMP_LTZ":
            return f"TIMESTAMP({self.precision}) WITH LOCAL TIME ZONE"
        return r

    @staticmethod
    def parse(text: Any) -> DataType:
        """Parse Paimon's JSON form: a string such as ``"DECIMAL(10, 2) NOT NULL"`` (also the SQL
        form of collections, ``"ARRAY<INT>"``), or an object such as ``{"type": "ARRAY",
        "element": "INT"}``."""
        if isinstance(text, dict):
            return _parse_object(text)
        if not isinstance(text, str):
            raise UnsupportedTypeError(f"cannot parse type {text!r}: expected a string or a JSON object")
        s = " ".join(text.strip().upper().split())
        nullable = True
        if s.endswith(" NOT NULL"):
            nullable, s = False, s[: -len(" NOT NULL")]
        elif s.endswith(" NULL"):
            s = s[: -len(" NULL")]
        if s.endswith(">"):
            return _parse_nested_string(text, s, nullable)
        m = _PARAM.match(s)
        if not m:
            raise UnsupportedTypeError(f"cannot parse type {text!r}")
        root = m.group("root").strip()
        args = [a.strip() for a in m.group("args").split(",")] if m.group("args") else []
        return _build(root, [int(a) for a in args if a], bool(m.group("ltz")), nullable, text)

    # -- Arrow ------------------------------------------------------------------------
    def to_arrow(self) -> pa.DataType:
        r = self.root
        if r == "ROW":
            return pa.struct([f.to_arrow() for f in self.fields or ()])
        if r == "ARRAY":
            element = self._child(self.element)
            return pa.list_(pa.field("element", element.to_arrow(), nullable=element.nullable))
        if r == "MAP":
            # Arrow (like Parquet) has no null map keys: a key is non-null whatever it says
            value = self._child(self.value)
            return pa.map_(self._child(self.key).to_arrow(), pa.field("value", value.to_arrow(), value.nullable))
        if r == "MULTISET":
            # Paimon stores a multiset as a map of element -> count (ParquetSchemaConverter)
            return pa.map_(self._child(self.element).to_arrow(), pa.field("value", pa.int32(), nullable=False))
        simple = _TO_ARROW.get(r)
        if simple is not None:
            return simple
        if r == "DECIMAL":
            assert self.precision is not None and self.scale is not None
            return pa.decimal128(self.precision, self.scale)
        if r in ("TIMESTAMP", "TIMESTAMP_LTZ"):
            tz = "UTC" if r == "TIMESTAMP_LTZ" else None
            return pa.timestamp(_time_unit(self.precision or 0), tz=tz)
        if r == "TIME":
            # Paimon keeps TIME as an int of milliseconds whatever the precision (so do its files)
            return pa.time32("ms")
        raise UnsupportedTypeError(f"no Arrow mapping for {self}")

    @staticmethod
    def from_arrow(t: pa.DataType, nullable: bool = True) -> DataType:
        """The Paimon type an Arrow type is written as."""
        for root, arrow_type in _TO_ARROW.items():
            if t == arrow_type and root not in ("VARCHAR", "VARBINARY", "CHAR", "BINARY"):
                return DataType(root, nullable)
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return DataType("VARCHAR", nullable, length=MAX_VARCHAR)
        if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return DataType("VARBINARY", nullable, length=MAX_VARCHAR)
        if pa.types.is_fixed_size_binary(t):
            return DataType("BINARY", nullable, length=t.byte_width)
        if pa.types.is_decimal(t):
            if t.precision > MAX_DECIMAL_PRECISION:
                raise UnsupportedTypeError(f"decimal precision {t.precision} exceeds {MAX_DECIMAL_PRECISION}")
            return DataType("DECIMAL", nullable, precision=t.precision, scale=t.scale)
        if pa.types.is_timestamp(t):
            precision = {"s": 0, "ms": 3, "us": 6, "ns": 9}[t.unit]
            return DataType("TIMESTAMP_LTZ" if t.tz else "TIMESTAMP", nullable, precision=precision)
        if pa.types.is_time(t):
            return DataType("TIME", nullable, precision=3 if t.unit in ("s", "ms") else 6)
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            item = t.value_field
            return DataType.array(DataType.from_arrow(item.type, item.nullable), nullable)
        if pa.types.is_map(t):
            key, item = t.key_field, t.item_field
            return DataType.map(DataType.from_arrow(key.type, False), DataType.from_arrow(item.type, item.nullable),
                                nullable)
        if pa.types.is_struct(t):  # ids to assign (assign_field_ids): Paimon numbers nested fields too
            return DataType("ROW", nullable, fields=tuple(
                DataField(-1, f.name, DataType.from_arrow(f.type, f.nullable)) for f in t))
        raise UnsupportedTypeError(f"Arrow type {t} has no Paimon equivalent supported by Strata")

    @property
    def is_string(self) -> bool:
        return self.root in ("VARCHAR", "CHAR")

    @property
    def is_fixed_width(self) -> bool:
        return self.root not in ("VARCHAR", "CHAR", "VARBINARY", "BINARY", *NESTED_ROOTS)


_TO_ARROW: dict[str, pa.DataType] = {
    "BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(), "INT": pa.int32(),
    "BIGINT": pa.int64(), "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "DATE": pa.date32(),
    "VARCHAR": pa.string(), "CHAR": pa.string(), "VARBINARY": pa.binary(), "BINARY": pa.binary(),
}


def _time_unit(precision: int) -> str:
    if precision <= 3:
        return "ms"
    return "us" if precision <= 6 else "ns"


def _build(root: str, args: list[int], ltz: bool, nullable: bool, text: str) -> DataType:
    if root in _SIMPLE and not args:
        canonical = _SIMPLE[root]
        if canonical == "STRING":
            return DataType("VARCHAR", nullable, length=MAX_VARCHAR)
        if canonical == "BYTES":
            return DataType("VARBINARY", nullable, length=MAX_VARCHAR)
        return DataType(canonical, nullable)
    if root in ("DECIMAL", "NUMERIC", "DEC"):
        precision, scale = (args + [10, 0][len(args):])[:2] if args else (10, 0)
        if not 1 <= precision <= MAX_DECIMAL_PRECISION or not 0 <= scale <= precision:
            raise UnsupportedTypeError(f"invalid decimal {text!r}: need 1 <= precision <= 38, 0 <= scale <= precision")
        return DataType("DECIMAL", nullable, precision=precision, scale=scale)
    if root in ("VARCHAR", "CHAR", "BINARY", "VARBINARY"):
        length = args[0] if args else (1 if root in ("CHAR", "BINARY") else MAX_VARCHAR)
        return DataType(root, nullable, length=length)
    if root in ("TIMESTAMP", "TIMESTAMP_LTZ", "TIMESTAMP WITH LOCAL TIME ZONE", "TIME"):
        precision = args[0] if args else (0 if root == "TIME" else 6)
        if not 0 <= precision <= 9:
            raise UnsupportedTypeError(f"invalid precision in {text!r}: must be 0..9")
        kind = "TIME" if root == "TIME" else (
            "TIMESTAMP_LTZ" if ltz or root != "TIMESTAMP" else "TIMESTAMP")
        return DataType(kind, nullable, precision=precision)
    if root == "ROW":
        raise _row_refused(text)
    raise UnsupportedTypeError(f"unsupported type {text!r}")


def _row_refused(text: Any) -> UnsupportedTypeError:
    return UnsupportedTypeError(f"type {text!r}: a ROW type needs its fields' ids: give it in JSON form "
                                f"({{\"type\": \"ROW\", \"fields\": [{{\"id\": ..., \"name\": ..., \"type\": ...}}]}})")


def _parse_object(obj: dict[str, Any]) -> DataType:
    """``{"type": "ARRAY [NOT NULL]", "element": ...}``, ``{"type": "MAP", "key": ..., "value": ...}``."""
    kind = str(obj.get("type", "")).strip().upper()
    nullable = "NOT NULL" not in kind
    root = kind.split(" ")[0]
    try:
        if root in ("ARRAY", "MULTISET"):
            return DataType(root, nullable, element=DataType.parse(obj["element"]))
        if root == "MAP":
            return DataType.map(DataType.parse(obj["key"]), DataType.parse(obj["value"]), nullable)
    except KeyError as missing:
        raise UnsupportedTypeError(f"cannot parse type {obj!r}: {root} needs {missing}") from None
    if root == "ROW" and isinstance(obj.get("fields"), list) and obj["fields"]:
        return DataType("ROW", nullable, fields=tuple(DataField.from_json(f) for f in obj["fields"]))
    raise UnsupportedTypeError(f"cannot parse type {obj!r}")


def _parse_nested_string(text: str, body: str, nullable: bool) -> DataType:
    """``ARRAY<T>``, ``MULTISET<T>``, ``MAP<K, V>`` in SQL form (body: upper case, without NOT NULL)."""
    head, _, inner = body.partition("<")
    root = head.strip()
    args = _split_top_level(inner[:-1])
    if root == "ROW":
        raise _row_refused(text)
    if root in ("ARRAY", "MULTISET") and len(args) == 1:
        return DataType(root, nullable, element=DataType.parse(args[0]))
    if root == "MAP" and len(args) == 2:
        return DataType.map(DataType.parse(args[0]), DataType.parse(args[1]), nullable)
    raise UnsupportedTypeError(f"cannot parse type {text!r}")


def _split_top_level(text: str) -> list[str]:
    """Split at the commas outside ``<>`` and ``()`` (``DECIMAL(10, 2), INT`` -> 2 parts)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


@dataclass(frozen=True)
class DataField:
    """A column of a table schema; ``id`` is the stable field id used across schema versions."""

    id: int
    name: str
    type: DataType
    description: str | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id, "name": self.name, "type": self.type.to_json()}
        if self.description is not None:
            out["description"] = self.description
        return out

    @staticmethod
    def from_json(obj: dict[str, object]) -> DataField:
        desc = obj.get("description")
        return DataField(int(obj["id"]), str(obj["name"]),  # type: ignore[call-overload]
                         DataType.parse(obj["type"]),
                         str(desc) if desc is not None else None)

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type.to_arrow(), nullable=self.type.nullable)


def assign_field_ids(dtype: DataType, highest: int) -> tuple[DataType, int]:
    """`dtype` with ids for the fields of its ROWs that have none (-1), numbered after `highest` in
    Paimon's order (a field, then the fields inside it); returns the new highest id."""
    if dtype.root == "ROW":
        fields = []
        for f in dtype.fields or ():
            field_id = f.id
            if field_id < 0:
                highest += 1
                field_id = highest
            child, highest = assign_field_ids(f.type, highest)
            fields.append(DataField(field_id, f.name, child, f.description))
        return replace(dtype, fields=tuple(fields)), highest
    element, key, value = dtype.element, dtype.key, dtype.value
    if element is not None:
        element, highest = assign_field_ids(element, highest)
    if key is not None:
        key, highest = assign_field_ids(key, highest)
    if value is not None:
        value, highest = assign_field_ids(value, highest)
    return replace(dtype, element=element, key=key, value=value), highest


def highest_nested_id(dtype: DataType) -> int:
    """The highest id of the ROW fields inside `dtype` (-1: none)."""
    ids = [-1]
    for f in dtype.fields or ():
        ids += [f.id, highest_nested_id(f.type)]
    ids += [highest_nested_id(c) for c in (dtype.element, dtype.key, dtype.value) if c is not None]
    return max(ids)
