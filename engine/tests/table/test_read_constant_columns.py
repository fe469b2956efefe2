"""Data-file reading repeats a string or integer column that holds one value in every row group
read (a partition column, say) instead of decoding it: the rows must be exactly those Parquet holds."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.fs.file_io import LocalFileIO
from strata.io.data_file_reader import ColumnMapping, _constant_columns, read_file
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType

GROUP_ROWS = 4


def _constants(path: str, columns: list[str], groups: list[int] | None) -> dict[str, pa.Scalar]:
    parquet = pq.ParquetFile(path)
    return _constant_columns(parquet.metadata, parquet.schema_arrow, columns, groups)


def write(path: str, columns: dict[str, pa.Array]) -> None:
    pq.write_table(pa.table(columns), path, row_group_size=GROUP_ROWS)


def read_back(path: str, columns: list[str], groups_filter=None, use_threads: bool = True) -> pa.Table:
    types = pq.read_schema(path)
    schema = TableSchema(0, [DataField(i, n, DataType.from_arrow(types.field(n).type)) for i, n in enumerate(columns)])
    mapping = ColumnMapping(schema, schema, columns)
    return pa.concat_tables(read_file(LocalFileIO(), path, mapping, groups_filter, use_threads=use_threads))


CASES = {
    "one value": (pa.array(["2024-01-01"] * 10), {"s"}),
    "binary": (pa.array([b"\x00\xff"] * 10, pa.binary()), {"s"}),
    "int8": (pa.array([3] * 10, pa.int8()), {"s"}),
    "int64 minimum": (pa.array([-(2**63)] * 10, pa.int64()), {"s"}),
    "float": (pa.array([1.5] * 10, pa.float64()), set()),
    "constant per group, groups differ": (pa.array(["a"] * 4 + ["b"] * 6), set()),
    "a null": (pa.array(["a"] * 9 + [None]), set()),
    "all null": (pa.array([None] * 10, pa.string()), set()),
    "varying": (pa.array([str(i) for i in range(10)]), set()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_constant_columns_read_back_exactly(tmp_path, case: str) -> None:
    values, constant = CASES[case]
    path = str(tmp_path / "f.parquet")
    write(path, {"id": pa.array(range(10), pa.int64()), "s": values})  # id varies: always decoded
    assert set(_constants(path, ["id", "s"], None)) == constant
    for use_threads in (True, False):
        got = read_back(path, ["id", "s"], use_threads=use_threads)
        assert got.column("s").type == values.type
        assert got.equals(pq.read_table(path))


def test_constant_in_the_row_groups_read(tmp_path) -> None:
    """Only the row groups that are read count: the last group alone holds a single value."""
    path = str(tmp_path / "f.parquet")
    write(path, {"id": pa.array(range(10), pa.int64()), "s": pa.array(["a"] * 4 + ["b"] * 6)})
    assert set(_constants(path, ["s"], [1, 2])) == set()  # the only column stays decoded
    assert set(_constants(path, ["id", "s"], [1, 2])) == {"s"}
    got = read_back(path, ["id", "s"], strata.col("id") >= 8)
    assert got.to_pydict() == {"id": [8, 9], "s": ["b", "b"]}


def test_partitioned_pk_table_reads_its_partition_column(catalog: strata.Catalog) -> None:
    catalog.create_database("db", ignore_if_exists=True)
    schema = pa.schema([("dt", pa.string()), ("id", pa.int64()), ("v", pa.string())])
    table = catalog.create_table("db.t", schema, partition_keys=["dt"], primary_keys=["dt", "id"],
                                 options={"bucket": "1"})
    table.write(pa.table({"dt": ["d1", "d2", "d1"], "id": [1, 1, 2], "v": ["a", "b", "c"]}, schema=schema))
    table.write(pa.table({"dt": ["d1"], "id": [2], "v": ["c2"]}, schema=schema))
    got = table.to_arrow().sort_by([("dt", "ascending"), ("id", "ascending")])
    assert got.to_pydict() == {"dt": ["d1", "d1", "d2"], "id": [1, 2, 1], "v": ["a", "c2", "b"]}
