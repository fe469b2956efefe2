"""Arrow arrays to and from numpy, and scalars, without pyarrow's ``to_numpy``, ``pa.array`` and
``pa.scalar``, whose first call imports pandas: a third of a second that a short job's first
read would pay for nothing."""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa


def to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """The values of ``column`` (dates and timestamps as their integers). Numbers and booleans
    without nulls come straight from the Arrow buffers (numbers zero-copy, read-only); anything
    else goes through pyarrow."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    kind = column.type
    if pa.types.is_date(kind) or pa.types.is_timestamp(kind):
        column = column.view(pa.int32() if pa.types.is_date32(kind) else pa.int64())
        kind = column.type
    if column.null_count == 0:
        if pa.types.is_integer(kind) or pa.types.is_floating(kind):
            dtype = np.dtype(kind.to_pandas_dtype())
            return np.frombuffer(column.buffers()[1], dtype=dtype, count=len(column),
                                 offset=column.offset * dtype.itemsize)
        if pa.types.is_boolean(kind):
            bits = np.frombuffer(column.buffers()[1], dtype=np.uint8)
            return np.unpackbits(bits, bitorder="little", count=column.offset + len(column))[column.offset:].view(bool)
    return column.to_numpy(zero_copy_only=False)


def from_numpy(values: np.ndarray) -> pa.Array:
    """A numpy array of numbers or booleans as an Arrow array, from its buffer (numbers without a
    copy when contiguous); ``pa.array`` would import pandas on first use."""
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    if values.dtype.kind in "iuf" and values.dtype.byteorder in "=|<":
        values = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)])
    return pa.array(values)


def scalar(value: object, kind: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, kind)`` for an integer, string or binary ``kind``, built from the
    value's bytes."""
    if pa.types.is_integer(kind):
        assert isinstance(value, int)
        data = value.to_bytes(kind.bit_width // 8, "little", signed=pa.types.is_signed_integer(kind))
        return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(data)])[0]
    raw = value.encode() if isinstance(value, str) else value
    assert isinstance(raw, bytes)
    offsets = struct.pack("<ii", 0, len(raw))  # string and binary: 32-bit offsets
    return pa.Array.from_buffers(kind, 1, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])[0]
