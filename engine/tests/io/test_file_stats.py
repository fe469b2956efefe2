"""A data file's statistics (DataFileMeta key / value stats, sequence range) against the rows the
file holds: the writer reads most columns' min and max back from the Parquet footer it wrote,
computes the others (types whose footer values differ from Arrow's), and counts nulls itself."""

from __future__ import annotations

import datetime
import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import strata
from strata.format import binary_row
from strata.io import data_file_writer
from strata.schema.table_schema import SEQUENCE_NUMBER

ROWS = 70_000  # several row groups per file (ROW_GROUP_BYTES is made small below)


def _rows(rng: np.random.Generator, n: int, offset: int) -> pa.Table:
    def nulls(values: np.ndarray, share: float) -> np.ndarray:
        return rng.random(n) < share

    f64 = rng.normal(size=n)
    f64[rng.random(n) < 0.01] = np.nan  # NaN among values: Parquet and Arrow both skip it
    days = rng.integers(-1000, 20_000, n)
    return pa.table({
        "id": pa.array(np.arange(offset, offset + n), pa.int64()),
        "i8": pa.array(rng.integers(-128, 128, n), pa.int8(), mask=nulls(days, 0.1)),
        "i16": pa.array(rng.integers(-30_000, 30_000, n), pa.int16()),
        "i32": pa.array(rng.integers(-2**31, 2**31, n), pa.int32()),
        "f32": pa.array(rng.normal(size=n).astype(np.float32), pa.float32()),
        "f64": pa.array(f64, pa.float64(), mask=nulls(f64, 0.2)),
        "nan": pa.array(np.full(n, np.nan), pa.float64()),  # no min / max to give
        "flag": pa.array(rng.random(n) < 0.5, pa.bool_()),
        "s": pa.array([f"v{x:09d}-some-longer-text" for x in rng.integers(0, 10**9, n)], pa.string(),
                      mask=nulls(days, 0.3)),
        "empty": pa.array([None] * n, pa.string()),
        "d": pa.array(days.astype(np.int32), pa.date32()),
        "ts": pa.array(rng.integers(0, 2**50, n), pa.timestamp("us")),
        "tz": pa.array(rng.integers(0, 2**40, n), pa.timestamp("ms", tz="UTC")),
        "dec": pa.array([decimal.Decimal(int(x)).scaleb(-2) for x in rng.integers(-10**8, 10**8, n)],
                        pa.decimal128(10, 2)),
        "wide": pa.array([decimal.Decimal(int(x)).scaleb(-4) for x in rng.integers(-10**12, 10**12, n)],
                         pa.decimal128(30, 4)),  # a FIXED_LEN_BYTE_ARRAY: computed by Arrow
        "b": pa.array([bytes([x % 256, x // 256 % 256]) for x in rng.integers(0, 65536, n)], pa.binary()),
    })


def _expected(column: pa.ChunkedArray) -> tuple[object, object, int]:
    """Arrow's min / max / null count of a file's column; NaN-only and null-only: no bounds."""
    values = pc.drop_null(column)
    if pa.types.is_floating(column.type):
        values = values.filter(pc.invert(pc.is_nan(values)))
    if len(values) == 0:
        return None, None, column.null_count
    mm = pc.min_max(values)
    return mm["min"].as_py(), mm["max"].as_py(), column.null_count


@pytest.mark.parametrize("primary_key", [True, False], ids=["pk", "append"])
def test_file_stats_are_the_rows_bounds_and_null_counts(tmp_path, monkeypatch, primary_key) -> None:
    monkeypatch.setattr(data_file_writer, "ROW_GROUP_BYTES", 256 * 1024)
    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    rng = np.random.default_rng(7)
    data = _rows(rng, ROWS, 0)
    table = catalog.create_table("db.t", data.schema, primary_keys=["id"] if primary_key else None,
                                 options={"bucket": "1" if primary_key else "-1", "metadata.stats-mode": "full",
                                          "target-file-size": "2mb", "write-only": "true"})
    table.write(data)
    table.write(_rows(rng, ROWS // 2, ROWS // 3))  # overlapping keys: updates in a second file set
    files = [(s, f) for s in table.new_scan().plan().splits for f in s.files]
    assert len(files) >= 3
    value_types = [f.type for f in data.schema]
    checked_groups = 0
    for split, meta in files:
        path = f"{table.path}/bucket-{split.bucket}/{meta.file_name}"
        parquet = pq.ParquetFile(path)
        checked_groups += parquet.metadata.num_row_groups
        rows = parquet.read()
        mins = binary_row.deserialize(meta.value_stats.min_values, value_types)
        maxs = binary_row.deserialize(meta.value_stats.max_values, value_types)
        for i, name in enumerate(data.column_names):
            lo, hi, nulls = _expected(rows.column(name))
            assert (mins[i], maxs[i], meta.value_stats.null_counts[i]) == (lo, hi, nulls), \
                f"{meta.file_name}: stats of {name}"
        if primary_key:
            keys = binary_row.deserialize(meta.key_stats.min_values, [pa.int64()]), \
                binary_row.deserialize(meta.key_stats.max_values, [pa.int64()])
            ids = rows.column("_KEY_id")
            assert keys == ([pc.min(ids).as_py()], [pc.max(ids).as_py()])
            sequence = pc.min_max(rows.column(SEQUENCE_NUMBER))
            assert (meta.min_sequence_number, meta.max_sequence_number) == \
                (sequence["min"].as_py(), sequence["max"].as_py())
    assert checked_groups > len(files)  # files of several row groups: bounds across groups


def test_stats_mode_none_keeps_no_bounds(tmp_path) -> None:
    catalog = strata.load_catalog(str(tmp_path / "warehouse"))
    catalog.create_database("db")
    data = _rows(np.random.default_rng(3), 1000, 0)
    table = catalog.create_table("db.t", data.schema, primary_keys=["id"],
                                 options={"bucket": "1", "metadata.stats-mode": "none"})
    table.write(data)
    (meta,) = [f for s in table.new_scan().plan().splits for f in s.files]
    types = [f.type for f in data.schema]
    assert binary_row.deserialize(meta.value_stats.min_values, types) == [None] * len(types)
    assert meta.value_stats.null_counts[data.column_names.index("s")] == data.column("s").null_count
    # the key's bounds are kept whatever the mode: merges and lookups need them
    assert binary_row.deserialize(meta.key_stats.max_values, [pa.int64()]) == [999]


def test_footer_values_are_python_values_of_each_type() -> None:
    """The types read from the footer come back as the values Arrow's as_py gives."""
    samples = {
        pa.date32(): datetime.date(2024, 2, 29),
        pa.timestamp("us"): datetime.datetime(2024, 2, 29, 12, 0, 0, 5),
        pa.decimal128(10, 2): decimal.Decimal("-12.50"),
        pa.float32(): 1.5,
    }
    for t, value in samples.items():
        sink = pa.BufferOutputStream()
        column = pa.array([value, None], t)
        writer = pq.ParquetWriter(sink, pa.schema([("c", t)]), store_decimal_as_integer=True)
        writer.write_table(pa.table({"c": column}))
        writer.close()
        stats = data_file_writer._ColumnStats(0)
        stats.add_footer(writer.writer.metadata)
        assert (stats.min, stats.max) == (value, value) and type(stats.min) is type(column[0].as_py())
