"""Strata tables in DuckDB: SQL streams record batches from Strata's scan, with pushdown.

    con = table.to_duckdb(name="orders")        # or strata.duckdb.register(table, con, "orders")
    con.sql("SELECT dt, sum(price) FROM orders WHERE id > 100 GROUP BY dt")

A local append table whose files need no merge and no mapping is a view over DuckDB's own
``read_parquet`` of them (``register``). Any other table is registered as a pyarrow dataset
whose ``scanner(columns, filter)`` DuckDB calls with
the columns a query needs and the filters it pushes into table scans (comparisons of a column
with a constant, IN lists (``if_else(is_valid(k), is_in(k, ...), null)``: NULL for a NULL k, as
SQL's), IS [NOT] NULL, and AND/OR/NOT of them). The columns become Strata's
projection; the filter's parts with a Strata form become the scan's filter (pruning partitions,
files, row groups and pages; Strata's read applies it to every row). When a part has none, the
whole filter is applied again to the rows read, so DuckDB gets exactly the rows it asked for.
DuckDB does not hand over: a LIMIT (the scan reads on until DuckDB stops pulling batches),
filters on expressions (``lower(v) = 'x'``, ``k + 1 > 3``), LIKE, joins' dynamic filters, and
aggregates; it evaluates those itself. Float columns are filtered
by DuckDB's expression only (NaN compares differently in Strata's statistics).
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from strata.arrow_stream import ArrowScan, TableLike, native_files
from strata.errors import FilterError
from strata.expressions import Leaf, Predicate, all_of
from strata.expressions.literals import bind

if TYPE_CHECKING:
    import duckdb


_COMPARISONS = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
                "greater_equal": "ge"}
NATIVE_MAX_FILES = 1_000  # a view over read_parquet reads each file's footer at every query
_FLIPPED = {"eq": "eq", "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}


def register(table: TableLike, con: duckdb.DuckDBPyConnection | None = None, name: str | None = None,
             snapshot_id: int | None = None, tag: str | None = None, native: bool = True
             ) -> duckdb.DuckDBPyConnection:
    """Register `table` as `name` (default: the table's name) in `con` (default: a new in-memory
    connection), pinned to `snapshot_id`, `tag`, else the latest snapshot now; returns `con`.

    The files of a local append table written under its current schema (``strata.arrow_stream.
    native_files``), up to NATIVE_MAX_FILES of them, become a view over DuckDB's own
    ``read_parquet``: DuckDB's parallel reader, its filters and LIMIT applied by itself, pruning
    row groups by their statistics (it reads every file's footer, hence the bound). Any other
    table, or any with `native` false, is the pyarrow dataset of the module's docs, pruned by
    Strata's plan."""
    import duckdb

    con = con if con is not None else duckdb.connect()
    if snapshot_id is None and tag is None:
        snapshot_id = table.snapshot_manager.latest_id()
    name = name or table.identifier.table
    with contextlib.suppress(duckdb.Error):  # a view or a dataset of that name is replaced
        con.unregister(name)
    with contextlib.suppress(duckdb.Error):
        con.execute(f"DROP VIEW IF EXISTS {_identifier(name)}")
    planned = ArrowScan(table, snapshot_id=snapshot_id, tag=tag)
    files = native_files(planned) if native else None
    if files and len(files) <= NATIVE_MAX_FILES:
        # the types the Arrow scan gives (DuckDB reads a TIMESTAMP_MS file column as TIMESTAMP)
        types = con.from_arrow(planned.schema.empty_table()).types
        columns = ", ".join(f"CAST({_identifier(n)} AS {t}) AS {_identifier(n)}"
                            for n, t in zip(planned.schema.names, types, strict=True))
        paths = ", ".join(_literal(path) for path, _ in files)
        con.execute(f"CREATE TEMP VIEW {_identifier(name)} AS SELECT {columns} FROM "
                    f"read_parquet([{paths}], hive_partitioning = false)")
    else:
        con.register(name, strata_dataset(table, snapshot_id, tag))
    return con


def _identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def strata_dataset(table: TableLike, snapshot_id: int | None = None, tag: str | None = None) -> ds.Dataset:
    """A pyarrow dataset whose scanner reads `table` through Strata's scan (see the module)."""
    schema = ArrowScan(table, snapshot_id=snapshot_id, tag=tag).schema
    dataset = _StrataDataset(schema.empty_table())
    dataset.strata = (table, snapshot_id, tag)
    return dataset


class _StrataDataset(ds.InMemoryDataset):
    """Only ``scanner`` is Strata's: DuckDB's Arrow scan calls it with its pushed-down columns
    and filter (the in-memory table it wraps is empty, for the schema)."""

    strata: tuple[TableLike, int | None, str | None]

    def scanner(self, columns: list[str] | None = None, filter: pc.Expression | None = None,
                **kwargs: Any) -> ds.Scanner:
        table, snapshot_id, tag = self.strata
        tree = _expression_tree(filter) if filter is not None else None
        needed = None if columns is None or (filter is not None and tree is None) else \
            [n for n in self.schema.names if n in set(columns) | _field_refs(tree)]
        pushed, whole = _conjunction(tree, table) if tree is not None else (None, True)
        scan = ArrowScan(table, needed, pushed, snapshot_id, tag)
        # Strata's read applies its filter to every row: a filter it took whole needs no second pass
        return ds.Scanner.from_batches(scan.to_batches(), schema=scan.schema, columns=columns,
                                       filter=None if whole else filter)


# -- pyarrow expressions, read back ------------------------------------------------------------------
# A pc.Expression serializes (``__reduce__``) to an Arrow IPC file: the expression tree in prefix
# order as the schema's key-value metadata ("call"/"end", "field_ref", "literal" and "options"
# naming a column of the one-row batch that holds the value). The metadata has repeated keys, which
# pyarrow's Schema.metadata (a dict) drops, so it is read from the schema's C export.

class _CSchema(ctypes.Structure):
    _fields_ = [("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
                ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64), ("children", ctypes.c_void_p),
                ("dictionary", ctypes.c_void_p), ("release", ctypes.c_void_p), ("private_data", ctypes.c_void_p)]


def _expression_tree(expression: pc.Expression) -> Any:
    """A tree of ("call", name, args) / ("field", name) / ("value", pyarrow scalar), or None
    when the serialized form is not what this reader knows."""
    try:
        _, (buffer,) = expression.__reduce__()
        batch = pa.ipc.open_file(buffer).read_all()
        tokens = _ordered_metadata(batch.schema)
        tree, end = _parse(tokens, 0, batch)
        return tree if end == len(tokens) else None
    except (ValueError, IndexError, KeyError, pa.ArrowException):
        return None


def _ordered_metadata(schema: pa.Schema) -> list[tuple[str, str]]:
    c_schema = _CSchema()
    schema._export_to_c(ctypes.addressof(c_schema))
    try:
        pairs: list[tuple[str, str]] = []
        at = c_schema.metadata
        if not at:
            return pairs
        count = ctypes.c_int32.from_address(at).value
        at += 4
        for _ in range(count):
            parts = []
            for _ in range(2):
                size = ctypes.c_int32.from_address(at).value
                parts.append(ctypes.string_at(at + 4, size).decode())
                at += 4 + size
            pairs.append((parts[0], parts[1]))
        return pairs
    finally:
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(c_schema.release)(ctypes.addressof(c_schema))


def _parse(tokens: list[tuple[str, str]], at: int, batch: pa.Table) -> tuple[Any, int]:
    key, value = tokens[at]
    if key == "field_ref":
        return ("field", value), at + 1
    if key == "literal":
        return ("value", batch.column(int(value))[0]), at + 1
    if key != "call":
        raise ValueError(f"unexpected {key} in a serialized expression")
    args: list[Any] = []
    options = None
    at += 1
    while tokens[at][0] != "end":
        if tokens[at][0] == "options":
            options = batch.column(int(tokens[at][1]))[0]
            at += 1
            continue
        arg, at = _parse(tokens, at, batch)
        args.append(arg)
    return ("call", value, args, options), at + 1


def _field_refs(tree: Any) -> set[str]:
    if tree is None or tree[0] == "value":
        return set()
    if tree[0] == "field":
        return {tree[1]}
    return set().union(*(_field_refs(a) for a in tree[2])) if tree[2] else set()


def _conjunction(tree: Any, table: TableLike) -> tuple[Predicate | None, bool]:
    """The conjuncts of `tree` that have a Strata form, bound to the table's schema (None: none),
    and whether that is every conjunct."""
    conjuncts = _conjuncts(tree)
    parts = [p for p in (_bound(_predicate(c, table), table) for c in conjuncts) if p is not None]
    return all_of(parts), bool(parts) and len(parts) == len(conjuncts)


def _conjuncts(tree: Any) -> list[Any]:
    if tree[0] == "call" and tree[1] in ("and_kleene", "and"):
        return [c for a in tree[2] for c in _conjuncts(a)]
    return [tree]


def _bound(predicate: Predicate | None, table: TableLike) -> Predicate | None:
    try:
        return bind(predicate, table.schema)
    except (FilterError, ValueError, TypeError, pa.ArrowException):
        return None  # e.g. a constant of another type: DuckDB's filter decides


def _predicate(tree: Any, table: TableLike) -> Predicate | None:
    """The Strata predicate selecting exactly the rows `tree` selects, or None."""
    if tree[0] != "call":
        return None
    _, name, args, _options = tree
    if name in ("and_kleene", "and", "or_kleene", "or"):
        left, right = (_predicate(a, table) for a in args) if len(args) == 2 else (None, None)
        if left is None or right is None:
            return None
        return left & right if name.startswith("and") else left | right
    if name == "invert" and len(args) == 1:
        child = _predicate(args[0], table)
        return ~child if child is not None else None
    if name == "if_else" and len(args) == 3:
        return _sql_in(args, table)
    fields = [a[1] for a in args if a[0] == "field" and _exact(table, a[1])]
    if name in ("is_null", "is_valid") and len(args) == 1 and fields:
        return Leaf(fields[0], "is_null" if name == "is_null" else "is_not_null")
    if name == "is_in":
        # pyarrow's is_in is false (not unknown) for a NULL: so is this, negated too
        found = _in_list(tree, table)
        return found & Leaf(found.field, "is_not_null") if found is not None else None
    if name in _COMPARISONS and len(args) == 2 and fields and any(a[0] == "value" for a in args):
        op = _COMPARISONS[name] if args[0][0] == "field" else _FLIPPED[_COMPARISONS[name]]
        value = next(a[1] for a in args if a[0] == "value").as_py()
        return Leaf(fields[0], op, (value,)) if value is not None else None
    return None


def _sql_in(args: list[Any], table: TableLike) -> Predicate | None:
    """DuckDB's ``f IN (...)``, handed over as ``if_else(is_valid(f), is_in(f, ...), null)``:
    unknown for a NULL f, as Strata's "in" is (so ``NOT IN`` drops NULLs, as SQL does)."""
    guard, lookup, otherwise = args
    if guard[:2] != ("call", "is_valid") or otherwise[0] != "value" or otherwise[1].is_valid:
        return None
    found = _in_list(lookup, table)
    return found if found is not None and guard[2] == [("field", found.field)] else None


def _in_list(tree: Any, table: TableLike) -> Leaf | None:
    """``is_in(f, value_set)`` of an exact column and a list without NULL, as Strata's "in"."""
    if tree[0] != "call" or tree[1] != "is_in" or tree[3] is None or len(tree[2]) != 1:
        return None
    (arg,) = tree[2]
    if arg[0] != "field" or not _exact(table, arg[1]):
        return None
    values = tree[3]["value_set"].as_py()
    return Leaf(arg[1], "in", tuple(values)) if None not in values else None


def _exact(table: TableLike, name: str) -> bool:
    """A column whose comparisons Strata decides as Arrow does (not floats: NaN)."""
    return name in table.schema.field_names and not pa.types.is_floating(table.schema.field(name).type.to_arrow())
