"""Random values of each Paimon type, in the Python form Arrow's ``to_pylist`` gives back, so
the model and the table's output compare directly. Value ranges are small, so that writes hit
existing keys, filters hit existing values and sums stay far from overflow."""

from __future__ import annotations

import datetime as dt
import decimal
import random
from typing import Any

from strata.schema.types import DataType

WORDS = ("", "a", "ab", "abc", "b", "ba", "zz", "é", "key", "key1", "x y", "Z")
EPOCH = dt.date(2024, 1, 1)
UTC = dt.UTC
NULL_SHARE = 0.15


def random_value(rng: random.Random, dtype: DataType, spread: int = 50) -> Any:
    """A value of `dtype` (None for some nullable ones); `spread` bounds how many distinct
    atomic values come out, so that keys repeat."""
    if dtype.nullable and rng.random() < NULL_SHARE:
        return None
    if dtype.is_nested:
        return _nested(rng, dtype, spread)
    return atomic_value(rng, dtype, rng.randrange(spread))


def atomic_value(rng: random.Random, dtype: DataType, n: int) -> Any:
    """The n-th value of an atomic type (`rng` varies the sub-second and fraction parts)."""
    root = dtype.root
    if root == "BOOLEAN":
        return n % 2 == 0
    if root in ("TINYINT", "SMALLINT", "INT", "BIGINT"):
        return n - 20
    if root == "FLOAT":
        return (n - 20) / 4  # exact in float32
    if root == "DOUBLE":
        return (n - 20) / 8
    if root == "DECIMAL":
        scale = dtype.scale or 0
        return decimal.Decimal(n * 37 - 500).scaleb(-scale).quantize(decimal.Decimal(1).scaleb(-scale))
    if root in ("VARCHAR", "CHAR"):
        return WORDS[n % len(WORDS)] + ("" if n < len(WORDS) else str(n))
    if root in ("VARBINARY", "BINARY"):
        return bytes([n % 7, n % 251]) if n % 3 else b""
    if root == "DATE":
        return EPOCH + dt.timedelta(days=n - 10)
    if root in ("TIMESTAMP", "TIMESTAMP_LTZ"):
        return _timestamp(dtype, n)
    if root == "TIME":
        return dt.time(n % 24, n % 60, 0, (n * 1000) % 1_000_000)
    raise ValueError(f"no random values for type {dtype}")


def _timestamp(dtype: DataType, n: int) -> dt.datetime:
    micros = n * 1_001_001 if (dtype.precision or 0) > 3 else n * 1_001_000
    value = dt.datetime(2024, 1, 1, 12) + dt.timedelta(minutes=n * 7, microseconds=micros % 1_000_000)
    return value.replace(tzinfo=UTC) if dtype.root == "TIMESTAMP_LTZ" else value


def _nested(rng: random.Random, dtype: DataType, spread: int) -> Any:
    if dtype.root == "ARRAY":
        assert dtype.element is not None
        return [random_value(rng, dtype.element, spread) for _ in range(rng.randint(0, 3))]
    if dtype.root in ("MAP", "MULTISET"):
        key_type = dtype.key if dtype.root == "MAP" else dtype.element
        assert key_type is not None
        keys = {atomic_value(rng, key_type, rng.randrange(spread)) for _ in range(rng.randint(0, 3))}
        if dtype.root == "MULTISET":
            return [(k, rng.randint(1, 3)) for k in sorted(keys, key=repr)]
        assert dtype.value is not None
        return [(k, random_value(rng, dtype.value, spread)) for k in sorted(keys, key=repr)]
    return {f.name: random_value(rng, f.type, spread) for f in dtype.fields or ()}
