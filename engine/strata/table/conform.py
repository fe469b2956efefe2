"""Making user data fit a table: column selection, casts, null checks, row kinds."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata.errors import SchemaMismatchError
from strata.io.empty_values import empty_array, has_not_null_field
from strata.schema.table_schema import TableSchema

if TYPE_CHECKING:
    import pandas as pd

ROW_KIND_CODES = {"+I": 0, "-U": 1, "+U": 2, "-D": 3}


def to_arrow_table(data: pa.Table | pa.RecordBatch | pd.DataFrame) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    pandas = sys.modules.get("pandas")  # a DataFrame implies pandas was imported: never import it here
    if pandas is not None and isinstance(data, pandas.DataFrame):
        return pa.Table.from_pandas(data, preserve_index=False)
    raise SchemaMismatchError(f"cannot write {type(data).__name__}: give a pyarrow Table/RecordBatch "
                              "or a pandas DataFrame")


def conform(data: pa.Table, schema: TableSchema, where: str, extra: tuple[str, ...] = ()) -> pa.Table:
    """Select and cast the table's columns; errors name the column and the problem."""
    present = set(data.column_names)
    missing = [n for n in schema.field_names if n not in present]
    if missing:
        raise SchemaMismatchError(f"data written to {where} lacks column(s) {missing}")
    unknown = [n for n in data.column_names if n not in schema.field_names and n not in extra]
    if unknown:
        raise SchemaMismatchError(f"data written to {where} has column(s) {unknown} that the table "
                                  f"does not have; columns are {schema.field_names}")
    columns = []
    for f in schema.fields:
        column = data.column(f.name)
        target = f.type.to_arrow()
        if column.type != target:
            column = _cast(column, target, f.name, where)
        if not f.type.nullable and column.null_count:
            what = "primary-key" if f.name in schema.primary_keys else "NOT NULL"
            raise SchemaMismatchError(f"{what} column {f.name!r} of {where} has {column.null_count} null value(s)")
        if has_not_null_field(column.type):
            _check_not_null_fields(column, f.name, where)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=schema.arrow_schema())


def _check_not_null_fields(column: pa.ChunkedArray, path: str, where: str) -> None:
    """A NOT NULL field of a ROW column holds a value in every row that is not null itself (the
    Parquet writer would refuse the file without naming the field)."""
    for chunk in column.chunks:
        valid = chunk.is_valid()
        for i, field in enumerate(chunk.type):
            child, name = chunk.field(i), f"{path}.{field.name}"
            if not field.nullable and child.null_count:
                nulls = pc.sum(pc.and_(valid, child.is_null())).as_py() or 0
                if nulls:
                    raise SchemaMismatchError(f"NOT NULL field {name!r} of {where} has {nulls} null value(s) in rows "
                                              "whose ROW is not null")
            if has_not_null_field(field.type):
                _check_not_null_fields(pa.chunked_array([child.filter(valid)]), name, where)


def _cast(column: pa.ChunkedArray, target: pa.DataType, name: str, where: str) -> pa.ChunkedArray:
    """Convert within a family of types only, and only when no value changes (Arrow's safe casts
    still parse strings, round floats into decimals and drop the time of day, silently)."""
    source = column.type
    problem = None
    if _family(source) not in (_family(target), "null"):
        problem = "incompatible types"
    else:
        try:
            if pa.types.is_integer(source) and pa.types.is_decimal(target):
                column = pc.cast(column, pa.decimal128(20, 0))  # wide enough for any integer
            cast = pc.cast(column, target, safe=True)
            changed = _changed(column, cast)
            if changed is not None and pc.any(changed).as_py():
                problem = f"values would change, e.g. {_first_change(column, cast, changed)}"
            else:
                return cast
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            problem = str(exc)
    raise SchemaMismatchError(f"column {name!r} of {where}: cannot store {source} values as {target}: {problem}")


def _family(t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t) \
            or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_date(t) or pa.types.is_timestamp(t):
        return "datetime"
    if pa.types.is_time(t):
        return "time"
    if pa.types.is_null(t):
        return "null"
    return str(t)  # boolean, nested: only the same type converts


def _changed(before: pa.ChunkedArray, after: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """Where a cast Arrow deems safe still alters values (None: it cannot): float -> decimal past
    the decimal's scale (Arrow rounds), timestamp -> date (time of day), double -> float (overflow
    to infinity)."""
    source, target = before.type, after.type
    if pa.types.is_floating(source) and pa.types.is_decimal(target):
        # a double fits the scale when rounding it there keeps it: 19.99 fits DECIMAL(10,2), 1.005
        # (the double 1.00499999...) does not; comparing the decimal's double instead would refuse
        # 19.99 too, as Arrow's decimal -> double is not correctly rounded
        return pc.not_equal(pc.round(before, target.scale), before)
    if pa.types.is_timestamp(source) and pa.types.is_date(target):
        return pc.not_equal(pc.cast(after, source), before)
    if pa.types.is_floating(source) and pa.types.is_floating(target):
        return pc.and_(pc.is_finite(before), pc.invert(pc.is_finite(after)))
    return None


def _first_change(before: pa.ChunkedArray, after: pa.ChunkedArray, changed: pa.ChunkedArray) -> str:
    """'row 3: 1.005 would become 1.00' for the first value the cast alters."""
    row = pc.index(changed, True).as_py()
    hint = "; round them to the column's scale first, or give decimal values" \
        if pa.types.is_decimal(after.type) else ""
    return f"row {row}: {before[row].as_py()!r} would become {after[row].as_py()!s}{hint}"


def row_kinds(data: pa.Table, kinds: pa.Array | np.ndarray | list[str] | str | None,
              rowkind_field: str | None, where: str) -> np.ndarray | None:
    """Row kinds as int8 codes (0=+I, 1=-U, 2=+U, 3=-D), or None for all inserts."""
    if kinds is None and rowkind_field:
        if rowkind_field not in data.column_names:
            raise SchemaMismatchError(f"data written to {where} lacks the row kind column {rowkind_field!r} "
                                      "(option rowkind.field)")
        kinds = data.column(rowkind_field).combine_chunks()
    if kinds is None:
        return None
    if isinstance(kinds, str):
        return np.full(data.num_rows, _code(kinds, where), dtype=np.int8)
    array = pa.array(kinds) if not isinstance(kinds, (pa.Array, pa.ChunkedArray)) else kinds
    if len(array) != data.num_rows:
        raise SchemaMismatchError(f"{len(array)} row kinds for {data.num_rows} rows written to {where}")
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        codes = pc.index_in(array, value_set=pa.array(list(ROW_KIND_CODES)))
        if codes.null_count:
            bad = pc.filter(array, pc.is_null(codes))[0].as_py()
            raise SchemaMismatchError(f"invalid row kind {bad!r} written to {where}; use +I, -U, +U or -D")
        return codes.to_numpy(zero_copy_only=False).astype(np.int8)
    values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.int64)
    if values.size and (values.min() < 0 or values.max() > 3):
        raise SchemaMismatchError(f"row kind codes written to {where} must be 0..3")
    return values.astype(np.int8)


def _code(kind: str, where: str) -> int:
    try:
        return ROW_KIND_CODES[kind]
    except KeyError:
        raise SchemaMismatchError(f"invalid row kind {kind!r} written to {where}; use +I, -U, +U or -D") from None


def deletion_keys(data: pa.Table, schema: TableSchema, where: str) -> pa.Table:
    """Rows deleting `data`'s keys from a primary-key table: the primary-key columns (and partition
    columns outside the key) must be there; the other columns are filled in (null, or a zero value
    for NOT NULL ones: a deletion's values are never read)."""
    required = list(dict.fromkeys([*schema.primary_keys, *schema.partition_keys]))
    missing = [n for n in required if n not in data.column_names]
    if missing:
        raise SchemaMismatchError(f"keys deleted from {where} lack key column(s) {missing}; a deletion "
                                  f"needs {required}")
    for f in schema.fields:
        if f.name not in data.column_names:
            data = data.append_column(f.name, empty_array(f.type.to_arrow(), f.type.nullable, data.num_rows))
    return data
