"""Mapping Strata (Paimon) types to Spark types, and Arrow data to what Spark expects.

Spark receives Arrow batches from a Python data source and checks their schema for *exact*
equality with ``to_arrow_schema(schema, timezone="UTC")``: the same types, units, time zone and
nullability. Strata reads give the table's own Arrow types (``timestamp[ms]`` for TIMESTAMP(3),
``timestamp[ns, tz=UTC]`` for TIMESTAMP_LTZ(9), ...), so every batch is cast on the way out.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    TimeType,
)
from pyspark.sql.types import (
    DataType as SparkType,
)

from strata.schema.table_schema import TableSchema
from strata.schema.types import DataType

if TYPE_CHECKING:
    from strata.table.table import Table

ROW_KIND_COLUMN = "_ROW_KIND"
ROW_KIND_FIELD = StructField(ROW_KIND_COLUMN, StringType(), nullable=False)

_SIMPLE: dict[str, SparkType] = {
    "BOOLEAN": BooleanType(), "TINYINT": ByteType(), "SMALLINT": ShortType(), "INT": IntegerType(),
    "BIGINT": LongType(), "FLOAT": FloatType(), "DOUBLE": DoubleType(), "DATE": DateType(),
    "VARCHAR": StringType(), "CHAR": StringType(), "VARBINARY": BinaryType(), "BINARY": BinaryType(),
    "TIMESTAMP": TimestampNTZType(), "TIMESTAMP_LTZ": TimestampType(),
}


def to_spark_type(data_type: DataType) -> SparkType:
    """TIMESTAMP -> TimestampNTZType, TIMESTAMP_LTZ -> TimestampType (both microseconds in Spark),
    DECIMAL(p, s) -> DecimalType(p, s), CHAR/VARCHAR -> StringType, BINARY/VARBINARY -> BinaryType,
    ARRAY -> ArrayType, MAP -> MapType, MULTISET<T> -> MapType(T, INT) (its Arrow form)."""
    if data_type.element is not None and data_type.root == "ARRAY":
        return ArrayType(to_spark_type(data_type.element), containsNull=data_type.element.nullable)
    if data_type.key is not None and data_type.value is not None:
        return MapType(to_spark_type(data_type.key), to_spark_type(data_type.value),
                       valueContainsNull=data_type.value.nullable)
    if data_type.element is not None and data_type.root == "MULTISET":
        return MapType(to_spark_type(data_type.element), IntegerType(), valueContainsNull=False)
    if data_type.root == "DECIMAL":
        assert data_type.precision is not None and data_type.scale is not None
        return DecimalType(data_type.precision, data_type.scale)
    if data_type.root == "TIME":
        return TimeType(min(data_type.precision or 0, 6))
    try:
        return _SIMPLE[data_type.root]
    except KeyError:
        raise TypeError(f"type {data_type} has no Spark equivalent") from None


def spark_schema(schema: TableSchema, with_row_kind: bool = False) -> StructType:
    fields = [StructField(f.name, to_spark_type(f.type), nullable=f.type.nullable) for f in schema.fields]
    return StructType([ROW_KIND_FIELD, *fields] if with_row_kind else fields)


def expected_arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark checks returned batches against (its session time zone is not
    used: the Python data source worker always expects UTC)."""
    return to_arrow_schema(schema, timezone="UTC")


def resolve_columns(requested: StructType, table_schema: TableSchema) -> list[str]:
    """For each field of a (possibly narrower, user-given) Spark schema, the table column it
    reads, matched by name (exactly, else case-insensitively as Spark does), or `_ROW_KIND`."""
    by_lower = {n.lower(): n for n in table_schema.field_names}
    sources: list[str] = []
    for field in requested.fields:
        if field.name.lower() == ROW_KIND_COLUMN.lower() and field.name not in table_schema.field_names:
            sources.append(ROW_KIND_COLUMN)
            continue
        name = field.name if field.name in table_schema.field_names else by_lower.get(field.name.lower())
        if name is None:
            raise ValueError(f"column {field.name!r} is not in the table; columns are {table_schema.field_names}")
        sources.append(name)
    return sources


def conform_output(table: pa.Table, target: pa.Schema, sources: Sequence[str]) -> Iterator[pa.RecordBatch]:
    """Batches of `table` with column `sources[i]` cast to `target[i]` (names and nullability of
    `target`). Timestamps are converted between units (nanoseconds are truncated to Spark's
    microseconds) and time zones; other casts must not change values."""
    columns = [_cast_for_spark(table.column(src), field.type) for src, field in zip(sources, target, strict=True)]
    out = pa.Table.from_arrays(columns, schema=target)
    yield from out.to_batches()


def _cast_for_spark(column: pa.ChunkedArray, target: pa.DataType) -> pa.ChunkedArray:
    if column.type == target:
        return column
    if pa.types.is_timestamp(column.type) and pa.types.is_timestamp(target):
        return pc.cast(column, target, safe=False)
    if pa.types.is_time(column.type) and pa.types.is_time(target):
        return pc.cast(column, target, safe=False)
    return pc.cast(column, target, safe=True)


def truncate_timestamps(table: pa.Table, schema: TableSchema) -> pa.Table:
    """Spark timestamps are microseconds; a TIMESTAMP(0..3) column keeps milliseconds or seconds.
    Like Paimon's Spark writer, extra digits are truncated rather than refused."""
    for i, name in enumerate(table.column_names):
        column = table.column(i)
        if not pa.types.is_timestamp(column.type) or name not in schema.field_names:
            continue
        target = schema.field(name).type.to_arrow()
        if pa.types.is_timestamp(target) and _unit_rank(target.unit) < _unit_rank(column.type.unit):
            table = table.set_column(i, name, pc.cast(column, pa.timestamp(target.unit, column.type.tz), safe=False))
    return table


def _unit_rank(unit: str) -> int:
    return {"s": 0, "ms": 1, "us": 2, "ns": 3}[unit]


LIVE_KINDS = pa.array(["+I", "+U"])


class Projection:
    """What a reader outputs: table columns (+ `_ROW_KIND`) cast to Spark's Arrow schema."""

    def __init__(self, table: Table, schema: StructType):
        self.sources = resolve_columns(schema, table.schema)
        self.columns = [s for s in self.sources if s != ROW_KIND_COLUMN]
        self.with_kind = len(self.columns) < len(self.sources)
        self.target = expected_arrow_schema(schema)

    def batches(self, data: pa.Table, has_kind: bool) -> Iterator[pa.RecordBatch]:
        """`data` holds `self.columns` (and `_ROW_KIND` first when `has_kind`)."""
        if has_kind:
            if not self.with_kind:
                kinds = data.column(ROW_KIND_COLUMN)
                data = data.filter(pc.is_in(kinds, value_set=LIVE_KINDS)).drop_columns([ROW_KIND_COLUMN])
        elif self.with_kind:
            data = data.add_column(0, ROW_KIND_COLUMN, pa.repeat(pa.scalar("+I"), data.num_rows))
        if data.num_rows:
            yield from conform_output(data, self.target, self.sources)
