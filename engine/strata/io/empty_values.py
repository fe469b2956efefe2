"""The empty value of an Arrow type, for NOT NULL columns and fields that must hold something
where no value exists: zero, "", an empty ARRAY or MAP, a ROW of its fields' empty values."""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def empty_array(arrow_type: pa.DataType, nullable: bool, rows: int) -> pa.Array:
    """`rows` values where none exists: nulls, or for a NOT NULL type its empty value (nested
    fields follow their own nullability)."""
    if nullable:
        return pa.nulls(rows, arrow_type)
    if pa.types.is_struct(arrow_type):
        children = [empty_array(child.type, child.nullable, rows) for child in arrow_type]
        return pa.StructArray.from_arrays(children, fields=list(arrow_type))
    if pa.types.is_map(arrow_type):
        offsets = pa.array(np.zeros(rows + 1, dtype=np.int32))
        return pa.MapArray.from_arrays(offsets, pa.array([], arrow_type.key_type), pa.array([], arrow_type.item_type),
                                       type=arrow_type)
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        width = np.int64 if pa.types.is_large_list(arrow_type) else np.int32
        offsets = pa.array(np.zeros(rows + 1, dtype=width))
        return type(pa.array([], arrow_type)).from_arrays(offsets, pa.array([], arrow_type.value_type),
                                                          type=arrow_type)
    if pa.types.is_fixed_size_list(arrow_type):
        values = empty_array(arrow_type.value_type, arrow_type.value_field.nullable, rows * arrow_type.list_size)
        return pa.FixedSizeListArray.from_arrays(values, type=arrow_type)
    return pa.nulls(rows, arrow_type).fill_null(_zero(arrow_type))


def _zero(arrow_type: pa.DataType) -> pa.Scalar:
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return pa.scalar("", arrow_type)
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return pa.scalar(b"", arrow_type)
    if pa.types.is_fixed_size_binary(arrow_type):
        return pa.scalar(b"\0" * arrow_type.byte_width, arrow_type)
    if pa.types.is_boolean(arrow_type):
        return pa.scalar(False)
    if pa.types.is_decimal(arrow_type):
        return pa.scalar(Decimal(0), arrow_type)
    # numbers, dates, times and timestamps: zero (the epoch)
    return pa.scalar(0, pa.int32() if arrow_type.bit_width == 32 else pa.int64()).cast(arrow_type)


def fill_under_null_rows(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A ROW column whose NOT NULL fields hold nulls only under null rows, with those nulls made
    empty values. Arrow's kernels (take, if_else, coalesce) leave nulls in a null row's fields;
    Arrow's cast and the Parquet writer refuse them in a NOT NULL field, though the file stores
    nothing there. A null under a valid row stays, for the writer to refuse."""
    if not has_not_null_field(column.type):
        return column
    return pa.chunked_array([_fill_chunk(chunk) for chunk in column.chunks], type=column.type)


def has_not_null_field(arrow_type: pa.DataType) -> bool:
    """Whether `arrow_type` is a ROW with a NOT NULL field at some depth of ROWs."""
    return pa.types.is_struct(arrow_type) and any(not f.nullable or has_not_null_field(f.type) for f in arrow_type)


def _fill_chunk(array: pa.Array) -> pa.Array:
    if array.null_count == 0 and not any(has_not_null_field(f.type) for f in array.type):
        return array
    valid = array.is_valid()
    children = []
    for i, field in enumerate(array.type):
        child = array.field(i)  # the field's values, the row's validity not applied
        if has_not_null_field(field.type):
            child = _fill_chunk(child)
        if not field.nullable and child.null_count:
            child = pc.if_else(valid, child, empty_array(field.type, False, len(child)))
        children.append(child)
    mask = pc.invert(valid) if array.null_count else None
    return pa.StructArray.from_arrays(children, fields=list(array.type), mask=mask)
