"""Arrow arrays as numpy arrays without pyarrow's ``to_numpy``, whose first call imports pandas:
a third of a second that a short job's first read would pay for nothing."""

from __future__ import annotations

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
