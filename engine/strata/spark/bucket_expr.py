"""Paimon's fixed bucket of each row as Spark SQL expressions, computed in the JVM.

``strata.format.bucket`` hashes the BinaryRow of the bucket-key columns (MurmurHash3-32, seed 42,
over little-endian 4-byte words, then ``fmix(h ^ size)``) with numpy. Spark can do the same with
its own expressions when every key lives in its 8-byte slot as an integral value (BOOLEAN,
TINYINT, SMALLINT, INT, BIGINT, DATE): the words are the header and null bits, then each slot's
low and high word. Rows then never leave the JVM to be bucketed, where a ``mapInArrow`` pass
would convert every column to Arrow and back. Other key types (strings, decimals, timestamps,
floats) are left to that pass: ``bucket_frame`` returns None for them.

Arithmetic stays in BIGINT below 2^50 (a 32-bit product is formed from two 16-bit halves of the
constant), so nothing overflows under ANSI mode. Each murmur round is its own projection: the
rounds reference the previous hash several times, and Spark does not collapse projections that
would repeat a non-trivial expression, so the plan stays linear in the number of words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from strata.format.binary_row import HEADER_BITS, Kind, fixed_part_size, kind_of, null_bits_width
from strata.format.bucket import C1, C2, F1, F2, H_ADD, SEED, mix_int

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType as SparkType

_MASK = 0xFFFFFFFF
_SLOT_MASK = {Kind.BOOLEAN: 0xFF, Kind.TINYINT: 0xFF, Kind.SMALLINT: 0xFFFF, Kind.INT: _MASK, Kind.DATE: _MASK}
_INTEGRAL_KINDS = (Kind.TINYINT, Kind.SMALLINT, Kind.INT, Kind.BIGINT)
_PREFIX = "__strata_bucket_"


def bucket_frame(df: DataFrame, columns: Sequence[str], types: Sequence[pa.DataType], num_buckets: int,
                 name: str) -> DataFrame | None:
    """`df` with column `name`: the bucket of each row's key `columns` (Spark names) as the
    table's `types` hash them; None when a key type has no JVM form here."""
    words = _slot_words(df, columns, types)
    if words is None:
        return None
    original = [f"`{_escape(c)}`" for c in df.columns]
    arity = len(columns)
    null_words = null_bits_width(arity) // 4
    header: list[str | None] = [None] * null_words
    for i, column in enumerate(columns):
        bit = HEADER_BITS + i
        if df.schema[column].nullable:
            term = f"IF(`{_escape(column)}` IS NULL, {1 << (bit % 32)}, 0)"
            previous = header[bit // 32]
            header[bit // 32] = term if previous is None else f"({previous} | {term})"
    h: int | str = SEED  # a Python int while every word so far was a constant zero
    step = 0
    for word in [*header, *words]:
        if word is None and isinstance(h, int):
            h = mix_int(h, 0)
            continue
        step += 1
        mixed = _mix(str(h), "0" if word is None else _mix_k(word))
        df = df.selectExpr(*original, f"{mixed} AS {_PREFIX}{step}")
        h = f"{_PREFIX}{step}"
    size = fixed_part_size(arity)
    first = f"({h} ^ {size})" if isinstance(h, str) else str(h ^ size)
    df = df.selectExpr(*original, f"{_xor_shift(first, 16)} AS {_PREFIX}f1")
    df = df.selectExpr(*original, f"{_xor_shift(_mul32(f'{_PREFIX}f1', F1), 13)} AS {_PREFIX}f2")
    df = df.selectExpr(*original, f"{_xor_shift(_mul32(f'{_PREFIX}f2', F2), 16)} AS {_PREFIX}f3")
    signed = f"IF({_PREFIX}f3 >= 2147483648, {_PREFIX}f3 - 4294967296, {_PREFIX}f3)"
    return df.selectExpr(*original, f"CAST(abs({signed} % {num_buckets}) AS INT) AS `{_escape(name)}`")


def _slot_words(df: DataFrame, columns: Sequence[str], types: Sequence[pa.DataType]) -> list[str | None] | None:
    """(low, high) SQL words of each key's slot, zero for a null; None: a type without a JVM form."""
    out: list[str | None] = []
    for column, arrow_type in zip(columns, types, strict=True):
        try:
            kind = kind_of(arrow_type)
        except ValueError:
            return None
        if not _fits(kind, df.schema[column].dataType):
            return None
        ref = f"`{_escape(column)}`"
        value = f"CAST({f'unix_date({ref})' if kind is Kind.DATE else ref} AS BIGINT)"
        if kind is Kind.BIGINT:
            out += [f"coalesce({value} & {_MASK}, 0)", f"coalesce(shiftright({value}, 32) & {_MASK}, 0)"]
        else:
            out += [f"coalesce({value} & {_SLOT_MASK[kind]}, 0)", None]  # Java writes only the type's width
    return out


def _fits(kind: Kind, spark_type: SparkType) -> bool:
    """Whether a Spark column of `spark_type` holds the values a key of `kind` hashes (the
    Python path casts the column to the table's type first; integral types cast alike here)."""
    from pyspark.sql.types import BooleanType, ByteType, DateType, IntegerType, LongType, ShortType

    if kind in _INTEGRAL_KINDS:
        return isinstance(spark_type, ByteType | ShortType | IntegerType | LongType)
    if kind is Kind.DATE:
        return isinstance(spark_type, DateType)
    return kind is Kind.BOOLEAN and isinstance(spark_type, BooleanType)


def _escape(name: str) -> str:
    return name.replace("`", "``")


def _mul32(x: str, c: int) -> str:
    """(x * c) mod 2^32 for 0 <= x < 2^32, from c's 16-bit halves (no 64-bit overflow)."""
    return f"((({x}) * {c & 0xFFFF} + shiftleft((({x}) * {c >> 16}) & 65535, 16)) & {_MASK})"


def _rotl(x: str, r: int) -> str:
    return f"((shiftleft({x}, {r}) & {_MASK}) | shiftright({x}, {32 - r}))"


def _mix_k(word: str) -> str:
    return _mul32(_rotl(_mul32(word, C1), 15), C2)


def _mix(h: str, k: str) -> str:
    return f"(({_rotl(f'(({h}) ^ {k})', 13)} * 5 + {H_ADD}) & {_MASK})"


def _xor_shift(x: str, r: int) -> str:
    """x ^ (x >>> r) for 0 <= x < 2^32."""
    return f"(({x}) ^ shiftright({x}, {r}))"
