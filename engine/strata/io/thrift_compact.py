"""The Thrift compact protocol, schema-free: Parquet keeps its footer and page index in it.

A struct decodes to a dict of field id -> (wire type, value), in field order, and encodes back
from one: a footer can be decoded, edited field by field and written again without a generated
schema (Parquet's own structs are described in strata.io.page_index where they are used).
Values: bool, int (byte, i16, i32, i64), float, bytes, a list or set as (element type, items), a
map as (key type, value type, [(key, value)]), a struct as a dict.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

BOOL_TRUE, BOOL_FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)

Struct = dict[int, tuple[int, Any]]


class ThriftError(ValueError):
    """Bytes that are not the compact encoding of a struct (a truncated or corrupt footer)."""


def decode_struct(data: bytes | memoryview, pos: int = 0) -> tuple[Struct, int]:
    """The struct starting at `pos`, and the position after it."""
    try:
        return _struct(memoryview(data), pos)
    except (IndexError, struct.error) as exc:
        raise ThriftError(f"truncated Thrift struct at byte {pos}: {exc}") from None


def encode_struct(fields: Struct) -> bytes:
    out = bytearray()
    _write_struct(out, fields)
    return bytes(out)


def encode_fields(fields: Struct, last: int = 0) -> bytes:
    """Some fields of a struct, after field `last`, without the struct's end: a struct can be
    assembled from parts encoded once (its fields in ascending id order) and parts that change."""
    out = bytearray()
    _write_fields(out, fields, last)
    return bytes(out)


def encode_i64_fields(pairs: Sequence[tuple[int, int]], last: int = 0) -> bytes:
    """`encode_fields` of I64 fields only, given in ascending id order: the offsets and sizes a
    copied column chunk changes, encoded for every chunk of every page read."""
    out = bytearray()
    for field, value in pairs:
        _write_field_header(out, field, last, I64)
        _write_zigzag(out, value)
        last = field
    return bytes(out)


def field_header(field: int, last: int, kind: int) -> bytes:
    """The header of field `field` (of type `kind`, not a boolean) after field `last`."""
    out = bytearray()
    _write_field_header(out, field, last, kind)
    return bytes(out)


def list_header(size: int, element: int) -> bytes:
    """The header of a list of `size` elements of type `element` (the elements follow it)."""
    if size < 15:
        return bytes([size << 4 | element])
    out = bytearray([0xF0 | element])
    _write_varint(out, size)
    return bytes(out)


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _zigzag(data: memoryview, pos: int) -> tuple[int, int]:
    n, pos = _varint(data, pos)
    return (n >> 1) ^ -(n & 1), pos


def _value(data: memoryview, pos: int, kind: int) -> tuple[Any, int]:
    if kind in (I16, I32, I64):
        return _zigzag(data, pos)
    if kind == BINARY:
        size, pos = _varint(data, pos)
        return bytes(data[pos:pos + size]), pos + size
    if kind == STRUCT:
        return _struct(data, pos)
    if kind in (LIST, SET):
        header = data[pos]
        pos += 1
        size, element = header >> 4, header & 0x0F
        if size == 15:
            size, pos = _varint(data, pos)
        items = []
        for _ in range(size):
            item, pos = _value(data, pos, element)
            items.append(item)
        return (element, items), pos
    if kind in (BOOL_TRUE, BOOL_FALSE):  # a list element: one byte, 1 true (writers disagree on false)
        return data[pos] == BOOL_TRUE, pos + 1
    if kind == BYTE:
        return struct.unpack_from("<b", data, pos)[0], pos + 1
    if kind == DOUBLE:
        return struct.unpack_from("<d", data, pos)[0], pos + 8
    if kind == MAP:
        size, pos = _varint(data, pos)
        if not size:
            return (0, 0, []), pos
        types = data[pos]
        pos += 1
        pairs = []
        for _ in range(size):
            key, pos = _value(data, pos, types >> 4)
            value, pos = _value(data, pos, types & 0x0F)
            pairs.append((key, value))
        return (types >> 4, types & 0x0F, pairs), pos
    raise ThriftError(f"unknown Thrift compact type {kind} at byte {pos}")


def _struct(data: memoryview, pos: int) -> tuple[Struct, int]:
    fields: Struct = {}
    last = 0
    while True:
        header = data[pos]
        pos += 1
        if header == 0:
            return fields, pos
        kind, delta = header & 0x0F, header >> 4
        if delta:
            field = last + delta
        else:
            field, pos = _zigzag(data, pos)
        if kind in (BOOL_TRUE, BOOL_FALSE):  # a field's boolean is its type
            fields[field] = (BOOL_TRUE, kind == BOOL_TRUE)
        else:
            value, pos = _value(data, pos, kind)
            fields[field] = (kind, value)
        last = field


def _write_field_header(out: bytearray, field: int, last: int, wire: int) -> None:
    """A field's header: its id as a delta from the previous field's when it fits in 4 bits."""
    if 0 < field - last <= 15:
        out.append((field - last) << 4 | wire)
    else:
        out.append(wire)
        _write_zigzag(out, field)


def _write_varint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_zigzag(out: bytearray, n: int) -> None:
    _write_varint(out, (n << 1) ^ (n >> 63))


def _write_value(out: bytearray, kind: int, value: Any) -> None:
    if kind in (I16, I32, I64):
        _write_zigzag(out, value)
    elif kind == BINARY:
        _write_varint(out, len(value))
        out += value
    elif kind == STRUCT:
        _write_struct(out, value)
    elif kind in (LIST, SET):
        element, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | element)
        else:
            out.append(0xF0 | element)
            _write_varint(out, len(items))
        for item in items:
            _write_value(out, element, item)
    elif kind in (BOOL_TRUE, BOOL_FALSE):
        out.append(BOOL_TRUE if value else BOOL_FALSE)
    elif kind == BYTE:
        out += struct.pack("<b", value)
    elif kind == DOUBLE:
        out += struct.pack("<d", value)
    elif kind == MAP:
        key_type, value_type, pairs = value
        _write_varint(out, len(pairs))
        if pairs:
            out.append(key_type << 4 | value_type)
            for k, v in pairs:
                _write_value(out, key_type, k)
                _write_value(out, value_type, v)
    else:
        raise ThriftError(f"unknown Thrift compact type {kind}")


def _write_struct(out: bytearray, fields: Struct) -> None:
    _write_fields(out, fields, 0)
    out.append(0)


def _write_fields(out: bytearray, fields: Struct, last: int) -> None:
    for field in sorted(fields):
        kind, value = fields[field]
        wire = (BOOL_TRUE if value else BOOL_FALSE) if kind in (BOOL_TRUE, BOOL_FALSE) else kind
        _write_field_header(out, field, last, wire)
        if wire not in (BOOL_TRUE, BOOL_FALSE):
            _write_value(out, kind, value)
        last = field
