"""Paimon BinaryRow encoding and decoding, keyed by Arrow types.

A row is a fixed part followed by a variable part (``paimon-common`` ``data/BinaryRow.java``,
``AbstractBinaryWriter.java``, ``BinaryRowWriter.java``):

* a header byte (the RowKind; INSERT = 0) and the null bitset, together
  ``null_bits_width(arity)`` bytes; field ``i`` is bit ``i + 8``;
* one little-endian 8-byte slot per field. Fixed-width values fill only their own width and the
  rest of the slot stays zero (an INT never sign-extends into the upper half);
* the variable part, each entry padded with zeros to a multiple of 8 bytes. A slot pointing into
  it holds ``offset << 32 | low``, the offset counted from the row start.

Strings and binaries of at most 7 bytes live in the slot, tagged ``0x80 | len`` in the top byte.
DECIMAL(p > 18) reserves 16 bytes for the minimal big-endian two's-complement unscaled value,
TIMESTAMP(p > 3) reserves 8 bytes for the epoch millis and keeps nano-of-milli in the slot. Java
reserves that space and keeps the offset even when the value is null (codegen ``binaryRowSetNull``,
``RowHelper``), and the bucket hash sees those bytes, so this module does the same.

Arrow types map to Paimon types as ``strata.schema.types.DataType.from_arrow`` does. TIME is
stored as int millis of the day, so finer time units lose their sub-millisecond digits.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Context, Decimal

import pyarrow as pa

HEADER_BITS = 8
MAX_INLINE_BYTES = 7
MAX_COMPACT_DECIMAL_PRECISION = 18
MAX_DECIMAL_PRECISION = 38
DECIMAL_VAR_BYTES = 16
TIMESTAMP_VAR_BYTES = 8
INLINE_MARK = 0x80

# Wide enough that no 38-digit decimal is ever rounded by the context itself.
_DECIMAL_CONTEXT = Context(prec=100, rounding=ROUND_HALF_UP)
_UNITS_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class Kind(enum.Enum):
    """How a field is laid out in a BinaryRow."""

    BOOLEAN = enum.auto()
    TINYINT = enum.auto()
    SMALLINT = enum.auto()
    INT = enum.auto()
    BIGINT = enum.auto()
    FLOAT = enum.auto()
    DOUBLE = enum.auto()
    DATE = enum.auto()
    TIME = enum.auto()
    DECIMAL_COMPACT = enum.auto()
    TIMESTAMP_COMPACT = enum.auto()
    DECIMAL = enum.auto()
    TIMESTAMP = enum.auto()
    STRING = enum.auto()
    BINARY = enum.auto()


# struct format of the kinds that live entirely in their slot (Java writes just this many bytes)
SLOT_FORMATS = {
    Kind.BOOLEAN: "<?", Kind.TINYINT: "<b", Kind.SMALLINT: "<h", Kind.INT: "<i",
    Kind.BIGINT: "<q", Kind.FLOAT: "<f", Kind.DOUBLE: "<d", Kind.DATE: "<i", Kind.TIME: "<i",
    Kind.DECIMAL_COMPACT: "<q", Kind.TIMESTAMP_COMPACT: "<q",
}
_SIMPLE_KINDS = {
    pa.bool_(): Kind.BOOLEAN, pa.int8(): Kind.TINYINT, pa.int16(): Kind.SMALLINT,
    pa.int32(): Kind.INT, pa.int64(): Kind.BIGINT, pa.float32(): Kind.FLOAT,
    pa.float64(): Kind.DOUBLE, pa.date32(): Kind.DATE,
}


def kind_of(t: pa.DataType) -> Kind:
    """The BinaryRow layout of an Arrow type; raises ValueError for unsupported types."""
    if pa.types.is_dictionary(t):
        return kind_of(t.value_type)
    simple = _SIMPLE_KINDS.get(t)
    if simple is not None:
        return simple
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return Kind.STRING
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)
            or pa.types.is_fixed_size_binary(t)):
        return Kind.BINARY
    if pa.types.is_decimal(t):
        if t.precision > MAX_DECIMAL_PRECISION:
            raise ValueError(f"decimal precision {t.precision} exceeds {MAX_DECIMAL_PRECISION}")
        return Kind.DECIMAL_COMPACT if t.precision <= MAX_COMPACT_DECIMAL_PRECISION else Kind.DECIMAL
    if pa.types.is_timestamp(t):
        return Kind.TIMESTAMP_COMPACT if t.unit in ("s", "ms") else Kind.TIMESTAMP
    if pa.types.is_time(t):
        return Kind.TIME
    raise ValueError(f"Arrow type {t} has no BinaryRow encoding in Strata")


def null_bits_width(arity: int) -> int:
    """Bytes taken by the header byte plus the null bitset, rounded to 8-byte words."""
    return ((arity + 63 + HEADER_BITS) // 64) * 8


def fixed_part_size(arity: int) -> int:
    return null_bits_width(arity) + 8 * arity


def round_to_word(num_bytes: int) -> int:
    return (num_bytes + 7) & ~7


# -- value conversions (Java semantics) --------------------------------------------------------
def time_unit_to_millis(value: int, unit: str) -> int:
    return value * 1000 // _UNITS_PER_SECOND[unit]


def millis_to_time_unit(millis: int, unit: str) -> int:
    return millis * _UNITS_PER_SECOND[unit] // 1000


def split_timestamp(value: int, unit: str) -> tuple[int, int]:
    """(epoch millis, nano of milli) of an Arrow timestamp value; millis floor like Java's."""
    nanos_per_unit = 1_000_000_000 // _UNITS_PER_SECOND[unit]
    millis, rest = divmod(value * nanos_per_unit, 1_000_000)
    return millis, rest


def decimal_unscaled(value: object, precision: int, scale: int) -> int:
    """The unscaled value, rounded HALF_UP like Java's Decimal.fromBigDecimal."""
    d = value if isinstance(value, Decimal) else Decimal(str(value))
    unscaled = int(d.scaleb(scale, _DECIMAL_CONTEXT).to_integral_value(ROUND_HALF_UP))
    if len(str(abs(unscaled))) > precision:
        raise ValueError(f"decimal {value} does not fit DECIMAL({precision}, {scale})")
    return unscaled


def decimal_bytes(unscaled: int) -> bytes:
    """Minimal big-endian two's complement, as java.math.BigInteger.toByteArray()."""
    magnitude = unscaled if unscaled >= 0 else ~unscaled
    return unscaled.to_bytes(magnitude.bit_length() // 8 + 1, "big", signed=True)


# -- encoding ----------------------------------------------------------------------------------
def _slot_number(value: object, kind: Kind, t: pa.DataType) -> object:
    """The number stored in the slot of a slot-only kind."""
    if kind is Kind.DECIMAL_COMPACT:
        return decimal_unscaled(value, t.precision, t.scale)
    if kind is Kind.TIME:
        return time_unit_to_millis(pa.scalar(value, t).value, t.unit)
    if kind is Kind.TIMESTAMP_COMPACT:
        return split_timestamp(pa.scalar(value, t).value, t.unit)[0]
    if kind is Kind.DATE:
        return pa.scalar(value, t).value
    return value


def _append_var(row: bytearray, slot: int, data: bytes, reserved: int, low: int) -> None:
    """Append `data` zero-padded to `reserved` bytes and point the slot at it."""
    cursor = len(row)
    row += data + bytes(reserved - len(data))
    struct.pack_into("<Q", row, slot, (cursor << 32) | low)


def _write_bytes(row: bytearray, slot: int, data: bytes) -> None:
    if len(data) <= MAX_INLINE_BYTES:
        row[slot:slot + len(data)] = data
        row[slot + 7] = INLINE_MARK | len(data)
    else:
        _append_var(row, slot, data, round_to_word(len(data)), len(data))


def _write_value(row: bytearray, slot: int, value: object, kind: Kind, t: pa.DataType) -> None:
    if kind is Kind.STRING:
        if not isinstance(value, str):
            raise TypeError(f"expected str for {t}, got {type(value).__name__}")
        _write_bytes(row, slot, value.encode("utf-8"))
    elif kind is Kind.BINARY:
        _write_bytes(row, slot, bytes(value))  # type: ignore[call-overload]
    elif kind is Kind.DECIMAL:
        data = decimal_bytes(decimal_unscaled(value, t.precision, t.scale))
        _append_var(row, slot, data, DECIMAL_VAR_BYTES, len(data))
    elif kind is Kind.TIMESTAMP:
        millis, nano_of_milli = split_timestamp(pa.scalar(value, t).value, t.unit)
        _append_var(row, slot, struct.pack("<q", millis), TIMESTAMP_VAR_BYTES, nano_of_milli)
    else:
        struct.pack_into(SLOT_FORMATS[kind], row, slot, _slot_number(value, kind, t))


def _write_null(row: bytearray, pos: int, slot: int, kind: Kind) -> None:
    bit = pos + HEADER_BITS
    row[bit // 8] |= 1 << (bit % 8)
    # Java still reserves (and zeroes) the variable space of a null non-compact value.
    if kind is Kind.DECIMAL:
        _append_var(row, slot, b"", DECIMAL_VAR_BYTES, 0)
    elif kind is Kind.TIMESTAMP:
        _append_var(row, slot, b"", TIMESTAMP_VAR_BYTES, 0)


def _value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def is_collection(t: pa.DataType) -> bool:
    """ARRAY / MAP / MULTISET / ROW: no min/max, and BinaryRow holds them only as null (their stats)."""
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t) or pa.types.is_struct(t)


def _nested_value_error(t: pa.DataType) -> ValueError:
    return ValueError(f"Arrow type {t} has no BinaryRow encoding in Strata for non-null values "
                      "(nested columns only get null statistics)")


def row_bytes(values: Sequence[object], types: Sequence[pa.DataType]) -> bytes:
    """The BinaryRow bytes (no arity prefix) of one INSERT row."""
    if len(values) != len(types):
        raise ValueError(f"{len(values)} values for {len(types)} types")
    arity = len(types)
    row = bytearray(fixed_part_size(arity))
    for pos, (value, t) in enumerate(zip(values, types, strict=True)):
        t = _value_type(t)
        slot = null_bits_width(arity) + 8 * pos
        if is_collection(t):
            # Java's setNullAt: the null bit and a zero slot, nothing in the variable part
            if value is not None:
                raise _nested_value_error(t)
            _write_null(row, pos, slot, Kind.BINARY)
            continue
        kind = kind_of(t)
        if value is None:
            _write_null(row, pos, slot, kind)
        else:
            _write_value(row, slot, value, kind, t)
    return bytes(row)


def serialize(values: Sequence[object], types: Sequence[pa.DataType]) -> bytes:
    """SerializationUtils.serializeBinaryRow: big-endian arity, then the row bytes."""
    return struct.pack(">i", len(types)) + row_bytes(values, types)


# -- decoding ----------------------------------------------------------------------------------
def _read_bytes(row: bytes, slot: int) -> bytes:
    (word,) = struct.unpack_from("<Q", row, slot)
    if word >> 63:
        return row[slot:slot + ((word >> 56) & 0x7F)]
    offset, length = word >> 32, word & 0xFFFFFFFF
    return row[offset:offset + length]


def _read_var(row: bytes, slot: int) -> tuple[int, int]:
    (word,) = struct.unpack_from("<Q", row, slot)
    return word >> 32, word & 0xFFFFFFFF


def _read_value(row: bytes, slot: int, kind: Kind, t: pa.DataType) -> object:
    if kind is Kind.STRING:
        return _read_bytes(row, slot).decode("utf-8")
    if kind is Kind.BINARY:
        return _read_bytes(row, slot)
    if kind is Kind.DECIMAL:
        offset, length = _read_var(row, slot)
        unscaled = int.from_bytes(row[offset:offset + length], "big", signed=True)
        return Decimal(unscaled).scaleb(-t.scale, _DECIMAL_CONTEXT)
    if kind is Kind.TIMESTAMP:
        offset, nano_of_milli = _read_var(row, slot)
        (millis,) = struct.unpack_from("<q", row, offset)
        nanos = millis * 1_000_000 + nano_of_milli
        return pa.scalar(nanos * _UNITS_PER_SECOND[t.unit] // 1_000_000_000, t).as_py()
    (number,) = struct.unpack_from(SLOT_FORMATS[kind], row, slot)
    if kind is Kind.DECIMAL_COMPACT:
        return Decimal(number).scaleb(-t.scale, _DECIMAL_CONTEXT)
    if kind in (Kind.TIME, Kind.TIMESTAMP_COMPACT):
        return pa.scalar(millis_to_time_unit(number, t.unit), t).as_py()
    if kind is Kind.DATE:
        return pa.scalar(number, t).as_py()
    return number


def deserialize(data: bytes, types: Sequence[pa.DataType]) -> list[object]:
    """Values of a serialized BinaryRow, as pyarrow's ``as_py()`` would give them."""
    (arity,) = struct.unpack_from(">i", data, 0)
    if arity != len(types):
        raise ValueError(f"serialized row has arity {arity}, expected {len(types)}")
    row = bytes(data[4:])
    if len(row) < fixed_part_size(arity):
        raise ValueError(f"BinaryRow of arity {arity} truncated to {len(row)} bytes")
    values: list[object] = []
    for pos, t in enumerate(types):
        bit = pos + HEADER_BITS
        if row[bit // 8] >> (bit % 8) & 1:
            values.append(None)
            continue
        t = _value_type(t)
        if is_collection(t):
            raise _nested_value_error(t)
        values.append(_read_value(row, null_bits_width(arity) + 8 * pos, kind_of(t), t))
    return values


EMPTY_ROW: bytes = serialize([], [])
"""The serialized arity-0 row (12 zero bytes) that Java and pypaimon write as the partition of an
unpartitioned table."""
