"""Strata tables as Polars LazyFrames, through Polars' IO-plugin interface.

    lf = strata.polars.scan(table)              # or table.to_polars(lazy=True)
    lf.filter(pl.col("dt") == "2024-01-01").select("id", "v").head(10).collect()

Polars hands the plugin the columns a query needs, its row limit and its predicate. The columns
and the limit go into Strata's scan. The predicate's parts that have a Strata form (comparisons
of a column with a literal, ``is_in``, ``is_null``/``is_not_null``, and ``&``/``|``/``~`` of
those) become the scan's filter, which prunes partitions, files, row groups and pages, and which
Strata's read applies to every row. A predicate that translated whole is not evaluated again
(the row limit then goes into the scan too); one with a part Strata cannot take is applied whole
by Polars to the rows read, so the answer is always Polars' own. Float columns are left to
Polars (NaN compares differently there).

When the planned files need no merge and no mapping (``strata.arrow_stream.native_files``: a
local append table's whole files of its current schema), Polars' own Parquet reader reads them,
the whole predicate fused into its scan; Strata's plan still prunes partitions and files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from strata.arrow_stream import ArrowScan, TableLike, native_files
from strata.errors import FilterError
from strata.expressions import Leaf, Predicate, all_of
from strata.expressions.literals import bind
from strata.scan.planner import DataSplit

if TYPE_CHECKING:
    import polars as pl

    from strata.schema.table_schema import TableSchema

_COMPARISONS = {"Eq": "eq", "NotEq": "ne", "Lt": "lt", "LtEq": "le", "Gt": "gt", "GtEq": "ge"}
_FLIPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
_NULL_CHECKS = {"IsNull": "is_null", "IsNotNull": "is_not_null"}
_UNTRANSLATED = object()


def scan(table: TableLike, snapshot_id: int | None = None, tag: str | None = None,
         branch: str | None = None) -> pl.LazyFrame:
    """The table as a LazyFrame, pinned to one snapshot: `snapshot_id`, `tag`, else the latest
    of `branch` (default: the table's) when this is called."""
    import polars as pl
    from polars.io.plugins import register_io_source

    if branch is not None:
        table = table.on_branch(branch)
    if snapshot_id is None and tag is None:
        snapshot_id = table.snapshot_manager.latest_id()
    schema = ArrowScan(table, snapshot_id=snapshot_id, tag=tag).schema
    empty = pl.from_arrow(schema.empty_table())
    assert isinstance(empty, pl.DataFrame)

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               batch_size: int | None) -> Iterator[pl.DataFrame]:
        pushed, whole = translate(predicate, table.schema)
        planned = ArrowScan(table, None, pushed, snapshot_id, tag)
        files = native_files(planned)
        if files is not None:  # Polars reads the files the plan kept itself, predicate and all
            if predicate is None and n_rows is not None:
                files = _enough(files, n_rows)
            return _native_frames([path for path, _ in files], with_columns or schema.names, predicate, n_rows,
                                  empty.schema)
        splits = planned.splits  # the same snapshot and filter: the reads below take this plan
        if whole:  # Strata's read selects exactly the predicate's rows: no second pass
            read = ArrowScan(table, with_columns, pushed, snapshot_id, tag, limit=n_rows)
            return _frames(read, splits, with_columns, None, n_rows)
        read = ArrowScan(table, _needed(with_columns, predicate, schema.names), pushed, snapshot_id, tag,
                         limit=n_rows if predicate is None else None)
        return _frames(read, splits, with_columns, predicate, n_rows)

    return register_io_source(source, schema=empty.schema, explain_name="strata",
                              explain_detail=f"{table.identifier} snapshot={snapshot_id} tag={tag}")


def _enough(files: list[tuple[str, int]], n_rows: int) -> list[tuple[str, int]]:
    """The first files that hold `n_rows` rows (a row limit without a predicate)."""
    total = 0
    for i, (_, rows) in enumerate(files):
        if total >= n_rows:
            return files[:i]
        total += rows
    return files


def _native_frames(paths: list[str], columns: Sequence[str], predicate: pl.Expr | None, n_rows: int | None,
                   schema: pl.Schema) -> Iterator[pl.DataFrame]:
    """The files through Polars' own Parquet reader (parallel, its predicate fused with the
    read), batch by batch, cast to the scan's declared types."""
    import polars as pl

    if not paths:
        return
    frame = pl.scan_parquet(paths, hive_partitioning=False, glob=False, extra_columns="ignore")
    if predicate is not None:
        frame = frame.filter(predicate)
    frame = frame.select(pl.col(n).cast(schema[n]) for n in columns)
    if n_rows is not None:
        frame = frame.head(n_rows)
    yield from frame.collect_batches()


def _needed(with_columns: list[str] | None, predicate: pl.Expr | None, names: Sequence[str]) -> list[str] | None:
    """The columns to read: the query's and its predicate's, in table order (None: all)."""
    if with_columns is None:
        return None
    wanted = set(with_columns) | (set(predicate.meta.root_names()) if predicate is not None else set())
    return [n for n in names if n in wanted]


def _frames(read: ArrowScan, splits: Sequence[DataSplit], with_columns: list[str] | None,
            predicate: pl.Expr | None, n_rows: int | None) -> Iterator[pl.DataFrame]:
    import polars as pl

    left = n_rows
    for batch in read.to_batches(splits):
        frame = pl.from_arrow(batch)
        assert isinstance(frame, pl.DataFrame)
        if predicate is not None:
            frame = frame.filter(predicate)
        if with_columns is not None:
            frame = frame.select(with_columns)
        if left is not None:
            frame = frame.head(left)
            left -= frame.height
        if frame.height:
            yield frame
        if left == 0:
            return


def to_strata_filter(predicate: pl.Expr | None, schema: TableSchema) -> Predicate | None:
    """The part of a Polars predicate that Strata can evaluate (a conjunct it cannot is left
    out, so the result selects at least the rows `predicate` selects), bound to `schema`; None
    when nothing translates."""
    return translate(predicate, schema)[0]


def translate(predicate: pl.Expr | None, schema: TableSchema) -> tuple[Predicate | None, bool]:
    """``to_strata_filter``'s predicate, and whether it is the whole of `predicate` (it then
    selects exactly Polars' rows). No predicate: (None, False)."""
    if predicate is None:
        return None, False
    tree = json.loads(predicate.meta.serialize(format="json"))
    types = {f.name: f.type.to_arrow() for f in schema.fields}
    conjuncts = _conjuncts(tree)
    parts = [p for p in (_translate(c, schema, types) for c in conjuncts) if p is not None]
    return all_of(parts), bool(parts) and len(parts) == len(conjuncts)


def _conjuncts(node: dict[str, Any]) -> list[dict[str, Any]]:
    binary = node.get("BinaryExpr")
    if binary is not None and binary["op"] in ("And", "LogicalAnd"):
        return _conjuncts(binary["left"]) + _conjuncts(binary["right"])
    return [node]


def _translate(node: dict[str, Any], schema: TableSchema, types: dict[str, pa.DataType]) -> Predicate | None:
    """The Strata predicate, bound to `schema`, selecting exactly the rows `node` selects, or None."""
    try:
        return bind(_node(node, types), schema)
    except (FilterError, ValueError, TypeError, KeyError, IndexError, pa.ArrowException):
        return None  # a form this reader does not know, a literal of another type: Polars decides


def _node(node: dict[str, Any], types: dict[str, pa.DataType]) -> Predicate | None:
    if "BinaryExpr" in node:
        return _binary(node["BinaryExpr"], types)
    function = node.get("Function")
    if function is None:
        return None
    spec, inputs = function["function"], function["input"]
    kind = spec.get("Boolean") if isinstance(spec, dict) else None
    if isinstance(kind, str) and kind in _NULL_CHECKS and "Column" in inputs[0]:
        return Leaf(inputs[0]["Column"], _NULL_CHECKS[kind]) if inputs[0]["Column"] in types else None
    if kind == "Not":
        child = _node(inputs[0], types)
        return ~child if child is not None else None
    if isinstance(kind, dict) and "IsIn" in kind and "Column" in inputs[0]:
        values = _list_literal(inputs[1])
        name = inputs[0]["Column"]
        if values is None or not _exact_type(types.get(name)):
            return None
        found = Leaf(name, "in", tuple(values))  # unknown for a null, as Polars' is_in
        # nulls_equal: false for a null (the list holds none), negated too
        options = kind["IsIn"]
        return found & Leaf(name, "is_not_null") if isinstance(options, dict) and options.get("nulls_equal") else found
    return None


def _binary(binary: dict[str, Any], types: dict[str, pa.DataType]) -> Predicate | None:
    op = binary["op"]
    if op in ("And", "LogicalAnd", "Or", "LogicalOr"):
        left, right = _node(binary["left"], types), _node(binary["right"], types)
        if left is None or right is None:
            return None
        return left & right if op in ("And", "LogicalAnd") else left | right
    if op not in _COMPARISONS:
        return None
    strata_op = _COMPARISONS[op]
    column, literal = binary["left"], binary["right"]
    if "Column" not in column:
        column, literal, strata_op = literal, column, _FLIPPED[strata_op]
    name = column.get("Column")
    if name is None or not _exact_type(types.get(name)):
        return None
    value = _scalar_literal(literal)
    return None if value is _UNTRANSLATED or value is None else Leaf(name, strata_op, (value,))


def _exact_type(data_type: pa.DataType | None) -> bool:
    """Columns whose comparisons Polars and Strata decide alike (not floats: NaN)."""
    return data_type is not None and not pa.types.is_floating(data_type)


def _scalar_literal(node: dict[str, Any]) -> Any:
    literal = node.get("Literal")
    if not isinstance(literal, dict):
        return _UNTRANSLATED
    for kind in ("Dyn", "Scalar"):
        value = literal.get(kind)
        if isinstance(value, dict) and len(value) == 1:
            (type_name, inner), = value.items()
            if type_name in ("Int", "Str", "String", "Boolean") or type_name[:3] in ("Int", "UIn"):
                return inner
    return _UNTRANSLATED


def _list_literal(node: dict[str, Any]) -> list[Any] | None:
    """The values of an ``is_in`` list literal without NULL: an Arrow IPC stream of one list
    value, or (newer Polars) of the values themselves."""
    blob = node.get("Literal", {}).get("Scalar", {}).get("List") if isinstance(node.get("Literal"), dict) else None
    if not isinstance(blob, list):
        return None
    column = pa.ipc.open_stream(bytes(blob)).read_all().column(0)
    values = column.to_pylist()
    if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        if len(values) != 1 or not isinstance(values[0], list):
            return None
        values = values[0]
    return None if any(v is None for v in values) else values


def to_polars(table: TableLike, columns: Sequence[str] | None = None, filter: Predicate | None = None,
              snapshot_id: int | None = None, tag: str | None = None) -> pl.DataFrame:
    """The rows as one Polars DataFrame (eager), from the Arrow stream without copies."""
    import polars as pl

    frame = pl.from_arrow(ArrowScan(table, columns, filter, snapshot_id, tag).to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame
