"""The ``strata`` command line: create, inspect, read and write tables of a warehouse.

    strata --warehouse /tmp/wh create-database db
    strata --warehouse /tmp/wh create-table db.orders \\
        --schema 'id BIGINT NOT NULL, name STRING, dt STRING, price DECIMAL(10,2)' \\
        --primary-key id,dt --partition dt --option bucket=4
    strata --warehouse /tmp/wh write db.orders --input orders.parquet
    strata --warehouse /tmp/wh read db.orders --where "id >= 5 AND dt = '2024-01-01'" --format csv
    strata --warehouse /tmp/wh delete db.orders --where "price < 0"
    strata --warehouse /tmp/wh describe db.orders

The warehouse defaults to ``$STRATA_WAREHOUSE``, else ``./warehouse``. Errors print one line,
``strata: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import pyarrow as pa

from strata.catalog import load_catalog
from strata.cli.branches import add_branch_commands
from strata.cli.common import EXIT_ERROR
from strata.cli.iceberg import add_iceberg_commands
from strata.cli.lineage import add_lineage_commands
from strata.cli.maintenance import add_maintenance_commands
from strata.cli.sql import add_sql_command
from strata.cli.tables import add_table_commands
from strata.errors import StrataError


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (0 ok, 2 error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        catalog = load_catalog(_warehouse(args.warehouse))
        status = args.func(catalog, args)
        return int(status or 0)
    except (StrataError, FileNotFoundError, ValueError, pa.ArrowException) as exc:
        print(f"strata: error: {_message(exc)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. `strata read ... | head`
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="strata", description="Create, inspect, read and write Strata (Apache Paimon) tables.")
    parser.add_argument("--warehouse", default=None,
                        help="warehouse path or URI (default: $STRATA_WAREHOUSE, else ./warehouse)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add_table_commands(sub)
    add_iceberg_commands(sub)
    add_maintenance_commands(sub)
    add_lineage_commands(sub)
    add_branch_commands(sub)
    add_sql_command(sub)
    return parser


def _warehouse(value: str | None) -> str:
    path = value or os.environ.get("STRATA_WAREHOUSE") or "warehouse"
    return path if "://" in path else os.path.abspath(path)


def _message(exc: BaseException) -> str:
    if isinstance(exc, FileNotFoundError):
        name = exc.filename or (exc.args[0] if exc.args else "")
        return f"file not found: {name}"
    if isinstance(exc, KeyError) and exc.args and isinstance(exc.args[0], str):
        text = exc.args[0]  # str(KeyError) would add quotes
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())  # one line
