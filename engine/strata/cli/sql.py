"""``strata sql "SELECT ..."``: DuckDB over the catalog's tables.

A name ``db.table`` in the query reads the table (streamed, with pushdown: strata.duckdb);
``db.table$snapshot=N`` and ``db.table$tag=NAME`` travel in time, and ``db.table$snapshots``
(any system table name) reads a system table. Quote such names in the query as written above
with double quotes, or leave them bare. The result prints as a table, or goes to ``--output``
(.csv, .parquet or .json, by the file's extension).
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa

from strata.errors import TableNotFoundError

_TABLE_NAME = re.compile(r'"?\b([A-Za-z_]\w*)\.([A-Za-z_]\w*)(\$[A-Za-z_]+(?:=[\w.-]+)?)?"?')
_WRITERS = (".csv", ".parquet", ".json")


def add_sql_command(sub: Any) -> None:
    p = sub.add_parser("sql", help="run a DuckDB SQL query over the catalog's tables")
    p.add_argument("query", help="SQL naming tables as db.table, db.table$snapshot=N, db.table$snapshots")
    p.add_argument("--output", default=None, help="write the result to a .csv, .parquet or .json file")
    p.set_defaults(func=cmd_sql)


def cmd_sql(catalog: Any, args: Any) -> int:
    import duckdb

    if args.output is not None and not args.output.endswith(_WRITERS):
        raise ValueError(f"--output {args.output!r}: the file must end in .csv, .parquet or .json")
    con = duckdb.connect()
    query = _TABLE_NAME.sub(lambda m: _registered(con, catalog, m), args.query)
    result = con.sql(query)
    if args.output is None:
        result.show(max_rows=10_000, max_width=10_000)
        return 0
    data = result.to_arrow_table()
    _write(con, data, args.output)
    return 0


def _registered(con: Any, catalog: Any, match: re.Match[str]) -> str:
    """The view name a table reference of the query is registered as (text that names no table
    of the catalog, e.g. ``alias.column``, is left as it is)."""
    database, name, suffix = match.group(1), match.group(2), match.group(3) or ""
    try:
        table = catalog.get_table(f"{database}.{name}")
    except TableNotFoundError:
        return match.group(0)
    view = re.sub(r"\W", "_", f"{database}__{name}{suffix}")
    key, _, value = suffix[1:].partition("=")
    if not suffix:
        table.to_duckdb(con, view)
    elif key == "snapshot" and value:
        table.to_duckdb(con, view, snapshot_id=int(value))
    elif key == "tag" and value:
        table.to_duckdb(con, view, tag=value)
    else:
        con.register(view, table.system_table(key))
    return f'"{view}"'


def _write(con: Any, data: pa.Table, path: str) -> None:
    con.register("strata_result", data)
    kind = {".csv": "CSV, HEADER", ".parquet": "PARQUET", ".json": "JSON"}[path[path.rfind("."):]]
    con.execute(f"COPY strata_result TO '{path.replace(chr(39), chr(39) * 2)}' (FORMAT {kind})")
