"""Z-order sort keys, with Paimon's ZIndexer semantics.

Every column becomes order-preserving big-endian bytes: 8 for fixed-width types (integers,
floats, booleans, decimals, dates, times, timestamps), the first `var_length_bytes` of strings
and binaries (Paimon's ``zorder.var-length-contribution``, zero padded); a null is all zeros,
so nulls sort first. The bits of the columns interleave round-robin from the most significant
(a column with fewer bytes drops out when it runs out), and rows sort by the resulting bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PRIMITIVE_BYTES = 8
DEFAULT_VAR_LENGTH_BYTES = 8
_SIGN_BIT = np.uint64(1 << 63)
# rows keyed at a time: interleaving unpacks every key bit to a byte, so bound that memory
_CHUNK_ROWS = 64 * 1024


class UnsupportedSortTypeError(TypeError):
    """A column type that has no order-preserving byte form (lists, maps, structs...)."""


def check_zorder_type(name: str, data_type: pa.DataType) -> None:
    if _kind(data_type) is None:
        raise UnsupportedSortTypeError(
            f"column {name!r} of type {data_type} cannot be z-ordered: supported are integer, floating, "
            "decimal, boolean, string, binary, date, time and timestamp columns")


def zorder_sort_indices(table: pa.Table, columns: Sequence[str],
                        var_length_bytes: int = DEFAULT_VAR_LENGTH_BYTES) -> pa.Array:
    """Row order of `table` by the z-order key of `columns` (stable for equal keys)."""
    keys = zorder_keys([table.column(c) for c in columns], columns, var_length_bytes)
    return pc.sort_indices(keys)


def zorder_keys(columns: Sequence[pa.ChunkedArray | pa.Array], names: Sequence[str],
                var_length_bytes: int = DEFAULT_VAR_LENGTH_BYTES) -> pa.Array:
    """The z-order key of every row, as fixed-size binary compared byte by byte (unsigned)."""
    if var_length_bytes < 1:
        raise ValueError(f"zorder var-length contribution must be at least 1 byte, got {var_length_bytes}")
    arrays = [_combined(c) for c in columns]
    for name, array in zip(names, arrays, strict=True):
        check_zorder_type(name, array.type)
    widths = [_width(a.type, var_length_bytes) for a in arrays]
    permutation = _interleave_order(widths)
    rows = len(arrays[0]) if arrays else 0
    out = np.empty((rows, sum(widths)), dtype=np.uint8)
    for start in range(0, rows, _CHUNK_ROWS):
        parts = [_ordered_bytes(a.slice(start, _CHUNK_ROWS), w) for a, w in zip(arrays, widths, strict=True)]
        bits = np.concatenate([np.unpackbits(p, axis=1) for p in parts], axis=1)
        out[start:start + len(parts[0])] = np.packbits(bits[:, permutation], axis=1)
    return pa.Array.from_buffers(pa.binary(out.shape[1]), rows, [None, pa.py_buffer(out.tobytes())])


def _interleave_order(widths: Sequence[int]) -> np.ndarray:
    """Positions, in the concatenated bits of all columns, of the interleaved key's bits."""
    starts = np.cumsum([0, *(8 * w for w in widths)])[:-1]
    return np.array([starts[c] + bit for bit in range(8 * max(widths, default=0))
                     for c, w in enumerate(widths) if bit < 8 * w], dtype=np.int64)


def _combined(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _kind(t: pa.DataType) -> str | None:
    if pa.types.is_signed_integer(t):
        return "signed"
    if pa.types.is_unsigned_integer(t) or pa.types.is_boolean(t):
        return "unsigned"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "float"
    if pa.types.is_temporal(t) and not pa.types.is_interval(t):
        return "temporal"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) \
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return "bytes"
    return None


def _width(t: pa.DataType, var_length_bytes: int) -> int:
    return var_length_bytes if _kind(t) == "bytes" else PRIMITIVE_BYTES


def _ordered_bytes(array: pa.Array, width: int) -> np.ndarray:
    """(rows, width) unsigned bytes whose byte-wise order is the values' order; nulls all zero."""
    kind = _kind(array.type)
    if kind == "bytes":
        out = _prefix_bytes(array, width)
    else:
        keys = _ordered_uint64(array, kind)
        out = keys.astype(">u8").view(np.uint8).reshape(len(array), PRIMITIVE_BYTES)
    if array.null_count:
        out[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return out


def _ordered_uint64(array: pa.Array, kind: str | None) -> np.ndarray:
    if kind == "float":
        bits = pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy().view(np.uint64)
        # negative floats: invert every bit (larger magnitude sorts lower); others: set the sign bit
        return np.where(bits & _SIGN_BIT, ~bits, bits | _SIGN_BIT)
    if kind == "temporal":
        array = array.view(pa.int32() if array.type.bit_width == 32 else pa.int64())
        kind = "signed"
    if kind == "signed":
        return pc.fill_null(array.cast(pa.int64()), 0).to_numpy().view(np.uint64) ^ _SIGN_BIT
    return pc.fill_null(array.cast(pa.uint64()), 0).to_numpy()


def _prefix_bytes(array: pa.Array, width: int) -> np.ndarray:
    """The first `width` bytes of each value, zero padded (a shorter value sorts first)."""
    binary = array.cast(pa.large_binary())
    rows = len(binary)
    out = np.zeros((rows, width), dtype=np.uint8)
    _, offsets_buffer, data_buffer = binary.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int64)[binary.offset:binary.offset + rows + 1]
    if data_buffer is None or rows == 0:
        return out
    data = np.frombuffer(data_buffer, dtype=np.uint8)
    taken = np.minimum(np.diff(offsets), width)
    row = np.repeat(np.arange(rows), taken)
    position = np.arange(int(taken.sum())) - np.repeat(np.cumsum(taken) - taken, taken)
    out[row, position] = data[np.repeat(offsets[:-1], taken) + position]
    return out
