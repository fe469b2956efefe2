"""Paimon data types: parsing the SQL-like JSON form, and mapping to and from Arrow.

Paimon writes atomic types as strings such as ``"BIGINT NOT NULL"``, ``"DECIMAL(10, 2)"`` or
``"TIMESTAMP(6) WITH LOCAL TIME ZONE"`` (DataTypeJsonParser). Strata supports the atomic types;
nested types are rejected with a clear error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import pyarrow as pa

MAX_VARCHAR = 2147483647
MAX_DECIMAL_PRECISION = 38

# root name -> canonical Paimon spelling when it has no parameters
_SIMPLE = {
    "BOOLEAN": "BOOLEAN", "TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INT": "INT",
    "INTEGER": "INT", "BIGINT": "BIGINT", "FLOAT": "FLOAT", "DOUBLE": "DOUBLE", "DATE": "DATE",
    "STRING": "STRING", "BYTES": "BYTES",
}
_PARAM = re.compile(
    r"^(?P<root>[A-Z_ ]+?)\s*(\((?P<args>[^)]*)\))?(?P<ltz>\s+WITH LOCAL TIME ZONE)?$")


class UnsupportedTypeError(ValueError):
    """A type string or Arrow type that Strata cannot map."""


@dataclass(frozen=True)
class DataType:
    """An atomic Paimon type. ``root`` is one of the canonical names in ``ROOTS``."""

    root: str
    nullable: bool = True
    precision: int | None = None  # DECIMAL precision, TIMESTAMP/TIME fractional digits
    scale: int | None = None  # DECIMAL scale
    length: int | None = None  # CHAR / VARCHAR / BINARY / VARBINARY length

    def not_null(self) -> DataType:
        return replace(self, nullable=False)

    def with_nullable(self, nullable: bool) -> DataType:
        return replace(self, nullable=nullable)

    # -- JSON (Paimon's string form) ------------------------------------------------
    def to_json(self) -> str:
        text = self._base_string()
        return text if self.nullable else f"{text} NOT NULL"

    def _base_string(self) -> str:
        r = self.root
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
    def parse(text: str) -> DataType:
        """Parse Paimon's string form, e.g. ``"DECIMAL(10, 2) NOT NULL"``."""
        if not isinstance(text, str):
            raise UnsupportedTypeError(f"nested or non-string type {text!r} is not supported by Strata")
        s = " ".join(text.strip().upper().split())
        nullable = True
        if s.endswith(" NOT NULL"):
            nullable, s = False, s[: -len(" NOT NULL")]
        elif s.endswith(" NULL"):
            s = s[: -len(" NULL")]
        m = _PARAM.match(s)
        if not m:
            raise UnsupportedTypeError(f"cannot parse type {text!r}")
        root = m.group("root").strip()
        args = [a.strip() for a in m.group("args").split(",")] if m.group("args") else []
        return _build(root, [int(a) for a in args if a], bool(m.group("ltz")), nullable, text)

    # -- Arrow ------------------------------------------------------------------------
    def to_arrow(self) -> pa.DataType:
        r = self.root
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
        raise UnsupportedTypeError(f"no Arrow mapping for {self.to_json()}")

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
        raise UnsupportedTypeError(f"Arrow type {t} has no Paimon equivalent supported by Strata")

    @property
    def is_string(self) -> bool:
        return self.root in ("VARCHAR", "CHAR")

    @property
    def is_fixed_width(self) -> bool:
        return self.root not in ("VARCHAR", "CHAR", "VARBINARY", "BINARY")


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
    raise UnsupportedTypeError(f"unsupported type {text!r}")


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
                         DataType.parse(obj["type"]),  # type: ignore[arg-type]
                         str(desc) if desc is not None else None)

    def to_arrow(self) -> pa.Field:
        return pa.field(self.name, self.type.to_arrow(), nullable=self.type.nullable)
