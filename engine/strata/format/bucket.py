"""Java-compatible fixed-bucket assignment, vectorized with numpy.

``DefaultBucketFunction``: ``bucket = Math.abs(row.hashCode() % numBuckets)``, where
``BinaryRow.hashCode()`` is MurmurHash3-32 (seed 42) over the row bytes read as little-endian
4-byte words, finished with ``fmix(h ^ sizeInBytes)`` (``MurmurHashUtils.hashBytesByWords``).

The row is never materialized. Every row of the bucket-key columns has the same fixed part, so
its words are built column-wise as uint32 arrays and mixed one word position at a time for all
rows. The variable part follows in column order: non-compact decimals and timestamps add a fixed
number of words per row; long strings add a ragged run of words, which is mixed step by step over
the rows still having words (rows sorted by word count, so those rows are a prefix).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.format.binary_row import (
    DECIMAL_VAR_BYTES,
    HEADER_BITS,
    INLINE_MARK,
    MAX_INLINE_BYTES,
    TIMESTAMP_VAR_BYTES,
    Kind,
    fixed_part_size,
    kind_of,
    null_bits_width,
    row_bytes,
)

SEED = 42
_MASK32 = 0xFFFFFFFF
C1, C2 = 0xCC9E2D51, 0x1B873593
H_ADD, F1, F2 = 0xE6546B64, 0x85EBCA6B, 0xC2B2AE35
_U32 = np.uint32

Words = np.ndarray | None  # None stands for an all-zero word


# -- scalar MurmurHash3 (the reference) -------------------------------------------------------
def _rotl_int(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK32


def mix_int(h: int, k: int) -> int:
    k = _rotl_int((k * C1) & _MASK32, 15) * C2 & _MASK32
    return (_rotl_int(h ^ k, 13) * 5 + H_ADD) & _MASK32


def _fmix_int(h: int) -> int:
    h ^= h >> 16
    h = (h * F1) & _MASK32
    h ^= h >> 13
    h = (h * F2) & _MASK32
    return h ^ (h >> 16)


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def hash_bytes_by_words(data: bytes, seed: int = SEED) -> int:
    """MurmurHashUtils.hashBytesByWords; the length must be a multiple of 4."""
    if len(data) % 4:
        raise ValueError(f"length {len(data)} is not a multiple of 4")
    h = seed
    for (word,) in struct.iter_unpack("<I", data):
        h = mix_int(h, word)
    return _signed(_fmix_int(h ^ len(data)))


def hash_row(values: Sequence[object], types: Sequence[pa.DataType]) -> int:
    """BinaryRow.hashCode() of one row: the slow, obviously-correct reference."""
    return hash_bytes_by_words(row_bytes(values, types))


def java_bucket(hash_code: int, num_buckets: int) -> int:
    """Math.abs(hash % n), with Java's remainder taking the sign of the dividend."""
    return abs(hash_code) % num_buckets


# -- vectorized MurmurHash3 -------------------------------------------------------------------
def _rotl_inplace(x: np.ndarray, r: int) -> None:
    high = x >> _U32(32 - r)
    x <<= _U32(r)
    x |= high


def _mix(h: np.ndarray | int, k: Words) -> np.ndarray | int:
    """One murmur round into a new array; stays a Python int while every word so far was zero."""
    if k is None:
        if isinstance(h, int):
            return mix_int(h, 0)
        x = h.copy()  # mixK1(0) == 0
    else:
        x = k * _U32(C1)
        _rotl_inplace(x, 15)
        x *= _U32(C2)
        x ^= _U32(h) if isinstance(h, int) else h
    _rotl_inplace(x, 13)
    x *= _U32(5)
    x += _U32(H_ADD)
    return x


def _fmix(h: np.ndarray, length: np.ndarray | int) -> np.ndarray:
    h = h ^ (length.astype(_U32) if isinstance(length, np.ndarray) else _U32(length))
    h ^= h >> _U32(16)
    h *= _U32(F1)
    h ^= h >> _U32(13)
    h *= _U32(F2)
    h ^= h >> _U32(16)
    return h


# -- per-column words -------------------------------------------------------------------------
@dataclass
class _Column:
    """One bucket-key column as BinaryRow words: slot (lo, hi) and variable part."""

    valid: np.ndarray | None  # None: no nulls
    lo: Words = None
    hi: Words = None
    var_words: list[Words] = field(default_factory=list)  # same word count for every row
    var_bytes: np.ndarray | int = 0  # variable-part bytes this column adds to each row
    points_to_var: np.ndarray | bool = False  # rows whose slot hi word is the var-part offset
    ragged: _Ragged | None = None


@dataclass
class _Ragged:
    """Long strings: each row's padded bytes as a run of words inside one buffer."""

    words: np.ndarray  # uint32 view of the padded buffer
    start: np.ndarray  # first word index per row
    count: np.ndarray  # word count per row (0 for inline or null)


def _normalize(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    return arr


def _buffer_values(arr: pa.Array, dtype: str, extra: int = 0) -> np.ndarray:
    """Buffer 1 (values, or offsets with extra=1) as numpy, zero-copy; nulls hold garbage."""
    count = arr.offset + len(arr) + extra
    if count == 0:
        return np.zeros(0, dtype)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=count)[arr.offset:]


def _valid_mask(arr: pa.Array) -> np.ndarray | None:
    if arr.null_count == 0:
        return None
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _zero_nulls(words: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    return words if valid is None else np.where(valid, words, _U32(0))


def _split64(values: np.ndarray, valid: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    pair = np.ascontiguousarray(values, dtype="<i8").view(_U32).reshape(-1, 2)
    return _zero_nulls(pair[:, 0], valid), _zero_nulls(pair[:, 1], valid)


def _int_column(values: np.ndarray, unsigned: str, valid: np.ndarray | None) -> _Column:
    """Java writes only the type's own width, so the value is zero- not sign-extended."""
    return _Column(valid, lo=_zero_nulls(values.view(unsigned).astype(_U32), valid))


def _bool_column(arr: pa.Array, valid: np.ndarray | None) -> _Column:
    values = arr.fill_null(False).to_numpy(zero_copy_only=False)
    return _Column(valid, lo=values.astype(_U32))


def _time_millis(arr: pa.Array) -> np.ndarray:
    values = _buffer_values(arr, "<i4" if arr.type.bit_width == 32 else "<i8").astype(np.int64)
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[arr.type.unit]
    return (values * 1000 // per_second if per_second < 1000 else values // (per_second // 1000))


def _timestamp_parts(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(epoch millis, nano of milli); floor division keeps nanos non-negative like Java."""
    values = _buffer_values(arr, "<i8")
    unit = arr.type.unit
    if unit in ("s", "ms"):
        return (values * 1000 if unit == "s" else values), np.zeros(len(values), np.int64)
    nanos_per_unit = 1000 if unit == "us" else 1
    units_per_milli = 1_000_000 // nanos_per_unit
    return values // units_per_milli, (values % units_per_milli) * nanos_per_unit


def _timestamp_column(arr: pa.Array, kind: Kind, valid: np.ndarray | None) -> _Column:
    millis, nanos = _timestamp_parts(arr)
    if kind is Kind.TIMESTAMP_COMPACT:
        lo, hi = _split64(millis, valid)
        return _Column(valid, lo=lo, hi=hi)
    var_lo, var_hi = _split64(millis, valid)
    return _Column(valid, lo=_zero_nulls(nanos.astype(_U32), valid), var_words=[var_lo, var_hi],
                   var_bytes=TIMESTAMP_VAR_BYTES, points_to_var=True)


def _decimal_le_bytes(arr: pa.Array, width: int) -> np.ndarray:
    """(rows, width) little-endian two's-complement unscaled values, sign-extended if needed."""
    stored = arr.type.bit_width // 8
    raw = _buffer_values(arr, f"V{stored}").view(np.uint8).reshape(-1, stored)
    if stored >= width:
        return raw[:, :width]
    sign = np.where(raw[:, -1:] >= 0x80, np.uint8(0xFF), np.uint8(0))
    return np.hstack([raw, np.repeat(sign, width - stored, axis=1)])


def _bit_length(x: np.ndarray) -> np.ndarray:
    """Exact bit length of uint64 values; float64 rounding may overshoot by one, so correct it."""
    exponent = np.minimum(np.frexp(x.astype(np.float64))[1].astype(np.int64), 64)
    below = (exponent > 0) & ((x >> (np.maximum(exponent, 1) - 1).astype(np.uint64)) == 0)
    return exponent - below


def _shift_left_128(hi: np.ndarray, lo: np.ndarray, bits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(hi, lo) << bits for 0 <= bits < 128, without relying on shifts by 64 or more."""
    wide = bits >= 64
    small = np.where(wide, 0, bits).astype(np.uint64)
    carry = np.where(small == 0, 0, lo >> np.minimum(64 - small, 63).astype(np.uint64))
    new_hi = np.where(wide, lo << np.where(wide, bits - 64, 0).astype(np.uint64), (hi << small) | carry)
    return new_hi, np.where(wide, np.uint64(0), lo << small)


def _minimal_big_endian(le: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """BigInteger.toByteArray() of 16-byte values, left-aligned in 16 zeroed bytes: returns the
    bytes as (rows, 4) little-endian words, and the lengths."""
    halves = np.ascontiguousarray(le).view("<u8")
    lo, hi = halves[:, 0], halves[:, 1]
    sign = (hi.view(np.int64) >> 63).view(np.uint64)
    m_hi, m_lo = hi ^ sign, lo ^ sign  # what toByteArray sizes: v, or ~v when negative
    bits = np.where(m_hi != 0, 64 + _bit_length(m_hi), _bit_length(m_lo))
    length = bits // 8 + 1
    new_hi, new_lo = _shift_left_128(hi, lo, (DECIMAL_VAR_BYTES - length) * 8)
    big_endian = np.stack([new_hi, new_lo], axis=1).astype(">u8")
    return big_endian.view("<u4"), length


def _decimal_column(arr: pa.Array, kind: Kind, valid: np.ndarray | None) -> _Column:
    if kind is Kind.DECIMAL_COMPACT:
        lo, hi = _split64(np.ascontiguousarray(_decimal_le_bytes(arr, 8)).view("<i8")[:, 0], valid)
        return _Column(valid, lo=lo, hi=hi)
    words, length = _minimal_big_endian(_decimal_le_bytes(arr, DECIMAL_VAR_BYTES))
    var_words: list[Words] = [_zero_nulls(words[:, i], valid) for i in range(4)]
    return _Column(valid, lo=_zero_nulls(length.astype(_U32), valid), var_words=var_words,
                   var_bytes=DECIMAL_VAR_BYTES, points_to_var=True)


def _binary_like(arr: pa.Array) -> pa.Array:
    """Offsets-based binary/string array with nulls turned into empty values."""
    t = arr.type
    if pa.types.is_string_view(t):
        arr = arr.cast(pa.large_string())
    elif pa.types.is_binary_view(t) or pa.types.is_fixed_size_binary(t):
        arr = arr.cast(pa.large_binary())
    return arr.fill_null(_empty(arr.type))


def _empty(t: pa.DataType) -> pa.Scalar:
    return pa.scalar(b"", pa.binary()).cast(t)


def _padded(arr: pa.Array, lengths: np.ndarray) -> pa.Array:
    """Each value zero-padded to max(8, round-up-to-8) bytes, as the row would hold it."""
    pad = np.maximum(8, (lengths + 7) & ~7) - lengths
    if not pad.any():
        return arr  # e.g. all values 8 or 16 bytes long: the buffer is already laid out
    pads = pa.array([b"\0" * i for i in range(9)], pa.binary()).cast(arr.type)
    return pc.binary_join_element_wise(arr, pads.take(pa.array(pad)), _empty(arr.type))


def _padded_words(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(uint32 words of the padded values buffer, first byte of each value within it)."""
    large = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets = _buffer_values(arr, "<i8" if large else "<i4", extra=1).astype(np.int64)
    if len(arr) == 0:
        return np.zeros(0, _U32), np.zeros(0, np.int64)
    data = np.frombuffer(arr.buffers()[2], np.uint8, count=int(offsets[-1]))[offsets[0]:]
    return data.view("<u4"), offsets[:-1] - offsets[0]


def _bytes_column(arr: pa.Array, valid: np.ndarray | None) -> _Column:
    arr = _binary_like(arr)
    lengths = pc.binary_length(arr).to_numpy().astype(np.int64)
    words, start = _padded_words(_padded(arr, lengths))
    is_long = lengths > MAX_INLINE_BYTES
    if valid is not None:
        is_long &= valid
    # Inline: the first 8 padded bytes, tagged with 0x80 | len in the top byte.
    first = words[start // 4], words[start // 4 + 1]
    tag = ((INLINE_MARK | lengths) << 24).astype(_U32)
    lo = np.where(is_long, lengths.astype(_U32), first[0])
    hi = np.where(is_long, _U32(0), first[1] | tag)
    if valid is not None:
        lo, hi = _zero_nulls(lo, valid), _zero_nulls(hi, valid)
    count = np.where(is_long, ((lengths + 7) & ~7) // 4, 0)
    var_bytes = count * 4
    return _Column(valid, lo=lo, hi=hi, var_bytes=var_bytes, points_to_var=is_long,
                   ragged=_Ragged(words, start // 4, count))


_INT_VIEWS = {Kind.TINYINT: ("<i1", "<u1"), Kind.SMALLINT: ("<i2", "<u2"), Kind.INT: ("<i4", "<u4"),
              Kind.DATE: ("<i4", "<u4"), Kind.FLOAT: ("<f4", "<u4")}


def _column(arr: pa.Array) -> _Column:
    kind = kind_of(arr.type)
    valid = _valid_mask(arr)
    if kind in _INT_VIEWS:
        signed, unsigned = _INT_VIEWS[kind]
        return _int_column(_buffer_values(arr, signed), unsigned, valid)
    if kind in (Kind.BIGINT, Kind.DOUBLE):
        lo, hi = _split64(_buffer_values(arr, "<i8"), valid)
        return _Column(valid, lo=lo, hi=hi)
    if kind is Kind.BOOLEAN:
        return _bool_column(arr, valid)
    if kind is Kind.TIME:
        return _int_column(_time_millis(arr).astype("<i4"), "<u4", valid)
    if kind in (Kind.TIMESTAMP_COMPACT, Kind.TIMESTAMP):
        return _timestamp_column(arr, kind, valid)
    if kind in (Kind.DECIMAL_COMPACT, Kind.DECIMAL):
        return _decimal_column(arr, kind, valid)
    return _bytes_column(arr, valid)


# -- whole rows -------------------------------------------------------------------------------
def _null_words(columns: list[_Column]) -> list[Words]:
    """The header/null-bitset words; the header byte (RowKind INSERT) is zero."""
    words: list[Words] = [None] * (null_bits_width(len(columns)) // 4)
    for pos, col in enumerate(columns):
        if col.valid is None:
            continue
        bit = pos + HEADER_BITS
        flag = (~col.valid).astype(_U32) << _U32(bit % 32)
        current = words[bit // 32]
        words[bit // 32] = flag if current is None else current | flag
    return words


def _point_to_var(columns: list[_Column], num_rows: int) -> np.ndarray | int:
    """Set each var-part slot's hi word to its offset; return the total row length."""
    cursor: np.ndarray | int = fixed_part_size(len(columns))
    for col in columns:
        if col.points_to_var is not False:
            at = cursor if isinstance(cursor, np.ndarray) else np.full(num_rows, cursor, np.int64)
            offset = np.where(col.points_to_var, at, 0).astype(_U32)
            col.hi = offset if col.hi is None else np.where(col.points_to_var, offset, col.hi)
        cursor = cursor + col.var_bytes
    return cursor


def _mix_ragged(h: np.ndarray, ragged: _Ragged) -> None:
    """Mix each row's run of words in place, step k covering the rows with more than k words."""
    rows = np.flatnonzero(ragged.count)
    if rows.size == 0:
        return
    count = ragged.count[rows]
    if count.min() != count.max():
        # Longest first, so the rows still active at step k are a prefix (radix sort if small).
        key = -count.astype(np.int16) if count.max() < 2**15 else -count
        order = np.argsort(key, kind="stable")
        rows, count = rows[order], count[order]
    start = ragged.start[rows]
    active = count.size - np.cumsum(np.bincount(count))
    sub = h[rows]
    for k in range(int(count[0])):
        n = int(active[k])
        sub[:n] = _mix(sub[:n], ragged.words[start[:n] + k])
    h[rows] = sub


def hash_rows(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """BinaryRow.hashCode() (int32) of each row made of `columns`, as Java computes it."""
    if not columns:
        raise ValueError("hash_rows needs at least one column")
    arrays = [_normalize(c) for c in columns]
    num_rows = len(arrays[0])
    if any(len(a) != num_rows for a in arrays):
        raise ValueError("columns differ in length")
    cols = [_column(a) for a in arrays]
    length = _point_to_var(cols, num_rows)
    h: np.ndarray | int = SEED
    for word in _null_words(cols):
        h = _mix(h, word)
    for col in cols:
        h = _mix(_mix(h, col.lo), col.hi)
    for col in cols:
        for word in col.var_words:
            h = _mix(h, word)
        if col.ragged is not None:
            h = _as_rows(h, num_rows)
            _mix_ragged(h, col.ragged)
    return _fmix(_as_rows(h, num_rows), length).view(np.int32)


def _as_rows(h: np.ndarray | int, num_rows: int) -> np.ndarray:
    """A writable per-row state (it is a plain int while every word so far was zero)."""
    return np.full(num_rows, h, _U32) if isinstance(h, int) else h


def buckets_from_hashes(hashes: np.ndarray, num_buckets: int) -> np.ndarray:
    """Math.abs(hash % numBuckets) for int32 hashes, as int32."""
    if num_buckets <= 0:
        raise ValueError(f"num_buckets must be positive, got {num_buckets}")
    # np.fmod truncates toward zero like Java's %, so the remainder is never Integer.MIN_VALUE.
    return np.abs(np.fmod(hashes.astype(np.int64), num_buckets)).astype(np.int32)


def bucket_ids(columns: Sequence[pa.Array | pa.ChunkedArray], num_buckets: int) -> np.ndarray:
    """DefaultBucketFunction's bucket (int32) of each row made of the bucket-key `columns`."""
    if num_buckets <= 0:
        raise ValueError(f"num_buckets must be positive, got {num_buckets}")
    return buckets_from_hashes(hash_rows(columns), num_buckets)
