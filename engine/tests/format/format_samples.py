"""Arrow columns for the BinaryRow and bucket tests: edge cases, random data, hypothesis strategies,
and the pypaimon oracle driver."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import strategies as st
from pypaimon_oracle import run_pypaimon

from strata.format.binary_row import Kind, kind_of
from strata.schema.types import DataType

TYPES: list[pa.DataType] = [
    pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.float32(), pa.float64(),
    pa.decimal128(10, 2), pa.decimal128(18, 0), pa.decimal128(20, 0), pa.decimal128(38, 10),
    pa.string(), pa.large_string(), pa.binary(), pa.large_binary(), pa.date32(),
    pa.time32("s"), pa.time32("ms"), pa.time64("us"), pa.time64("ns"),
    pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us"), pa.timestamp("ns"),
    pa.timestamp("ms", tz="UTC"), pa.timestamp("us", tz="UTC"), pa.timestamp("us", tz="Asia/Shanghai"),
]

_STRINGS = ["", "a", "abcdefg", "abcdefgh", "ü€中文", "0123456789abcdef", "x" * 100, "hello-java", None]
_BYTES = [b"", b"\x00", b"\xff" * 7, b"\x00" * 8, bytes(range(256)), bytes([0, 1, 255, 127]), None]
_MIN_DATETIME, _MAX_DATETIME = datetime(1, 1, 1), datetime(9999, 12, 31, 23, 59, 59, 999999)


def _decimals(*texts: str | None) -> list[Decimal | None]:
    return [None if t is None else Decimal(t) for t in texts]


def edge_values(t: pa.DataType) -> list[object]:
    """Boundary values of a type, always with a null."""
    if pa.types.is_boolean(t):
        return [True, False, None]
    if pa.types.is_integer(t):
        bits = t.bit_width
        return [0, -1, 1, 5, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, None]
    if pa.types.is_floating(t):
        return [0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1.5, -3.25, 1e-30, None]
    if pa.types.is_decimal(t):
        return _edge_decimals(t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return list(_STRINGS)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return list(_BYTES)
    if pa.types.is_date(t):
        return [date(1970, 1, 1), date(1969, 12, 31), date(1, 1, 1), date(9999, 12, 31), None]
    if pa.types.is_time(t):
        return [time(0), time(23, 59, 59), time(12, 0, 0), time(0, 0, 1), None] + (
            [] if t.unit == "s" else [time(23, 59, 59, 999000), time(0, 0, 0, 1000)])
    return _edge_timestamps(t)


def _edge_decimals(t: pa.DataType) -> list[object]:
    if t.precision == 10:
        return _decimals("0.00", "-1.28", "1.27", "99999999.99", "-99999999.99", "0.01", None)
    if t.precision == 18:
        return _decimals("0", "-1", "999999999999999999", "-999999999999999999", None)
    if t.precision == 20:
        return _decimals("0", "-1", "127", "128", "-129", "255", "-256", str(2**63), str(-(2**63) - 1),
                         "99999999999999999999", "-99999999999999999999", None)
    return _decimals("0", "-1", "0.0000000001", "1234567890123456789012345678.0123456789",
                     "-9999999999999999999999999999.9999999999", "-1.28", None)


def _edge_timestamps(t: pa.DataType) -> list[object]:
    values: list[object] = [datetime(1970, 1, 1), datetime(1969, 12, 31, 23, 59, 59),
                            datetime(2026, 1, 2, 3, 4, 5), datetime(1900, 1, 1), None]
    if t.unit != "s":
        values += [datetime(1969, 12, 31, 23, 59, 59, 999000), datetime(2026, 1, 2, 3, 4, 5, 123000)]
    if t.unit in ("us", "ns"):
        values += [datetime(1969, 12, 31, 23, 59, 59, 999999), datetime(2026, 1, 2, 3, 4, 5, 123456)]
    if t.unit != "ns" and t.tz is None:  # a zone offset would push these out of datetime's range
        values += [_MIN_DATETIME.replace(microsecond=0), _MAX_DATETIME.replace(microsecond=0)]
    if t.tz is not None:
        values = [v if v is None else v.replace(tzinfo=UTC) for v in values]  # type: ignore[attr-defined]
    return values


def edge_column(t: pa.DataType) -> pa.Array:
    arr = pa.array(edge_values(t), type=t)
    if pa.types.is_timestamp(t) and t.unit == "ns":  # values with sub-microsecond digits
        extra = pa.array([1, -1, 1_000_000_007, -999_999_999], pa.int64()).cast(t)
        arr = pa.concat_arrays([arr, extra])
    return arr


# -- raw storage ranges, so random data can be drawn as integers ------------------------------
_UNIT_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}
_DAY_SECONDS = 86_400
_MIN_EPOCH_S, _MAX_EPOCH_S = -62_135_596_800, 253_402_300_799  # years 1 and 9999


def storage_range(t: pa.DataType) -> tuple[int, int]:
    """Inclusive range of the integer storage of int-like types whose as_py() works."""
    if pa.types.is_date(t):
        return -719_162, 2_932_896
    if pa.types.is_time(t):
        return 0, _DAY_SECONDS * _UNIT_PER_SECOND[t.unit] - 1
    if pa.types.is_timestamp(t):
        if t.unit == "ns":
            return -(2**63) + 1, 2**63 - 1
        per = _UNIT_PER_SECOND[t.unit]
        margin = _DAY_SECONDS * per if t.tz else 0  # as_py() shifts zoned values by their offset
        return _MIN_EPOCH_S * per + margin, _MAX_EPOCH_S * per + per - 1 - margin
    bits = t.bit_width
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def _int_storage(t: pa.DataType) -> pa.DataType:
    return pa.int32() if pa.types.is_date(t) or (pa.types.is_time(t) and t.bit_width == 32) else pa.int64()


def from_storage(values: list[int | None], t: pa.DataType) -> pa.Array:
    if pa.types.is_integer(t):
        return pa.array(values, t)
    return pa.array(values, _int_storage(t)).cast(t)


def _random_value(rng: np.random.Generator, t: pa.DataType) -> object:
    kind = kind_of(t)
    if kind is Kind.BOOLEAN:
        return bool(rng.integers(2))
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        return float(rng.normal() * 10.0 ** rng.integers(-5, 6))
    if kind in (Kind.DECIMAL_COMPACT, Kind.DECIMAL):
        digits = int(rng.integers(1, t.precision + 1))
        unscaled = int(rng.integers(0, 10**min(digits, 18))) * 10 ** max(0, digits - 18)
        return Decimal(f"{unscaled if rng.integers(2) else -unscaled}e-{t.scale}")
    if kind is Kind.STRING:
        alphabet = [*"abcXYZ019-_ ", "é", "中", "🙂"]
        return "".join(rng.choice(alphabet, int(rng.integers(0, 30))))
    if kind is Kind.BINARY:
        return rng.bytes(int(rng.integers(0, 30)))
    return None  # int-like kinds are drawn as storage integers


def random_column(t: pa.DataType, n: int, seed: int, null_rate: float = 0.1) -> pa.Array:
    rng = np.random.default_rng(seed)
    nulls = rng.random(n) < null_rate
    if _random_value(rng, t) is None:  # int-like: draw the storage integers
        lo, hi = storage_range(t)
        ints = [int(rng.integers(lo, hi, endpoint=True)) for _ in range(n)]
        if pa.types.is_timestamp(t) and t.unit == "ns":  # half without sub-microsecond digits
            ints = [v - v % 1000 if rng.integers(2) else v for v in ints]
        return from_storage([None if z else v for v, z in zip(ints, nulls, strict=True)], t)
    return pa.array([None if z else _random_value(rng, t) for z in nulls], type=t)


# -- hypothesis ---------------------------------------------------------------------------------
def _value_strategy(t: pa.DataType) -> st.SearchStrategy[object]:
    kind = kind_of(t)
    if kind is Kind.BOOLEAN:
        return st.booleans()
    if kind in (Kind.FLOAT, Kind.DOUBLE):
        # NaN is covered by the edge cases; its payload bits are not stable through as_py().
        return st.floats(width=32 if kind is Kind.FLOAT else 64, allow_nan=False)
    if kind in (Kind.DECIMAL_COMPACT, Kind.DECIMAL):
        bound = 10**t.precision - 1
        return st.integers(-bound, bound).map(lambda u: Decimal(f"{u}e-{t.scale}"))
    if kind is Kind.STRING:
        return st.text(max_size=24)
    if kind is Kind.BINARY:
        return st.binary(max_size=24)
    lo, hi = storage_range(t)
    return st.integers(lo, hi)


@st.composite
def columns(draw: st.DrawFn, max_columns: int = 4, max_rows: int = 12) -> list[pa.Array]:
    """A few equally long Arrow columns of random types, with nulls."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=1, max_size=max_columns))
    n = draw(st.integers(0, max_rows))
    out = []
    for t in types:
        values = draw(st.lists(st.none() | _value_strategy(t), min_size=n, max_size=n))
        out.append(pa.array(values, t) if _is_object_kind(t) else from_storage(values, t))
    return out


def _is_object_kind(t: pa.DataType) -> bool:
    return kind_of(t) in (Kind.BOOLEAN, Kind.FLOAT, Kind.DOUBLE, Kind.DECIMAL_COMPACT, Kind.DECIMAL,
                          Kind.STRING, Kind.BINARY)


def rows_of(cols: list[pa.Array]) -> list[list[object]]:
    return [[c[i].as_py() for c in cols] for i in range(len(cols[0]) if cols else 0)]


# -- pypaimon oracle -------------------------------------------------------------------------------
_ORACLE = """
import json, sys
import pyarrow as pa
from pypaimon.schema.data_types import AtomicType, DataField
from pypaimon.schema.table_schema import TableSchema
from pypaimon.table.row.generic_row import GenericRow, GenericRowSerializer
from pypaimon.write.row_key_extractor import FixedBucketRowKeyExtractor

out = []
for case in json.load(open(sys.argv[1])):
    batch = pa.ipc.open_file(case["path"]).read_all().combine_chunks().to_batches()[0]
    names = batch.schema.names
    fields = [DataField(i, n, AtomicType(t)) for i, (n, t) in enumerate(zip(names, case["types"]))]
    schema = TableSchema(fields=fields, options={"bucket": str(case["buckets"]),
                                                 "bucket-key": ",".join(names)})
    extractor = FixedBucketRowKeyExtractor(schema)
    rows = [[c[i].as_py() for c in batch.columns] for i in range(batch.num_rows)]
    hashes = [extractor._binary_row_hash_code(tuple(r), fields) for r in rows]
    out.append({
        "rows": [GenericRowSerializer.to_bytes(GenericRow(r, fields)).hex() for r in rows],
        "hashes": [h - (1 << 32) if h >= 1 << 31 else h for h in hashes],
        "buckets": extractor._extract_buckets_batch(batch),
    })
print(json.dumps(out))
"""


def paimon_type(t: pa.DataType) -> str:
    return DataType.from_arrow(t).to_json()


def run_oracle(cases: list[tuple[list[pa.Array], int]], workdir: Path) -> list[dict[str, list]]:
    """pypaimon's serialized rows, hashes and fixed buckets for each (columns, num_buckets)."""
    specs = []
    for i, (cols, num_buckets) in enumerate(cases):
        path = workdir / f"case{i}.arrow"
        table = pa.table({f"c{j}": c for j, c in enumerate(cols)})
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        specs.append({"path": str(path), "types": [paimon_type(c.type) for c in cols],
                      "buckets": num_buckets})
    manifest = workdir / "cases.json"
    manifest.write_text(json.dumps(specs))
    return json.loads(run_pypaimon(_ORACLE, str(manifest)))
