"""``strata iceberg``: publish, inspect and add statistics to a table's Iceberg metadata
(``metadata.iceberg.storage``)."""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

from strata.catalog import Catalog
from strata.cli.common import CliError


def add_iceberg_commands(sub: Any) -> None:
    p = sub.add_parser("iceberg", help="the table's Iceberg-compatible metadata (metadata.iceberg.storage)")
    iceberg_sub = p.add_subparsers(dest="iceberg_command", required=True, metavar="WHAT")
    s = iceberg_sub.add_parser("sync", help="publish the metadata of the latest snapshot (catches up a failed sync)")
    s.add_argument("table", help="the table, DB.TABLE")
    s.set_defaults(func=cmd_iceberg_sync)
    s = iceberg_sub.add_parser("status", help="how far the Iceberg metadata is behind the table, and why")
    s.add_argument("table", help="the table, DB.TABLE")
    s.set_defaults(func=cmd_iceberg_status)
    s = iceberg_sub.add_parser("stats", help="compute NDV statistics (Puffin theta sketches) of the published "
                                              "snapshot, for Trino's cost-based optimizer")
    s.add_argument("table", help="the table, DB.TABLE")
    s.set_defaults(func=cmd_iceberg_stats)



def cmd_iceberg_sync(catalog: Catalog, args: argparse.Namespace) -> int:
    from strata.iceberg import IcebergSync, enabled
    from strata.iceberg.status import report_failure, report_success

    table = catalog.get_table(args.table)
    if not enabled(table):
        raise CliError(f"table {table.identifier} has metadata.iceberg.storage=disabled: set it to "
                       f"table-location, hadoop-catalog or rest-catalog first")
    sync = IcebergSync(table)
    try:
        result = sync.sync()
    except Exception as exc:
        report_failure(table, exc)
        raise
    report_success(table, clear_error=True)
    if result.snapshot_id is None:
        print(f"table {table.identifier}: no snapshot yet, nothing to publish")
    elif result.up_to_date:
        print(f"table {table.identifier}: Iceberg metadata of snapshot {result.snapshot_id} is up to date "
              f"({result.metadata_location})")
    else:
        print(f"table {table.identifier}: Iceberg metadata of snapshot {result.snapshot_id} at "
              f"{result.metadata_location} ({result.data_files} data files, {result.delete_files} delete files)")
    return 0


def cmd_iceberg_status(catalog: Catalog, args: argparse.Namespace) -> int:
    """Exit 0 when the mirror shows the latest snapshot (or is off), 1 when it is behind."""
    from strata.iceberg.status import sync_status

    table = catalog.get_table(args.table)
    status = sync_status(table)
    name = table.identifier
    if not status.enabled:
        print(f"table {name}: metadata.iceberg.storage=disabled (no Iceberg mirror)")
        return 0
    shown = {None: "no Iceberg metadata", 0: "the schema only (no snapshot)"}.get(
        status.published, f"snapshot {status.published}")
    latest = "no snapshot" if status.latest_snapshot is None else f"snapshot {status.latest_snapshot}"
    print(f"table {name}: latest {latest}; Iceberg metadata shows {shown}; "
          + ("up to date" if not status.behind else f"{status.behind} snapshot(s) behind"))
    error = status.last_error
    if error is not None:
        when = dt.datetime.fromtimestamp(error["time-ms"] / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        past = (status.published or 0) >= (error.get("snapshot-id") or 0) and not status.behind
        print(f"{'earlier failure (since caught up)' if past else 'last failure'} at {when}, "
              f"snapshot {error.get('snapshot-id')}: {error['error']}")
    if status.behind:
        print(f"catch up: strata iceberg sync {name}")
    return 1 if status.behind else 0


def cmd_iceberg_stats(catalog: Catalog, args: argparse.Namespace) -> int:
    from strata.iceberg import enabled, latest_metadata_location
    from strata.iceberg.statistics import refresh

    table = catalog.get_table(args.table)
    location = latest_metadata_location(table) if enabled(table) else None
    if location is None:
        raise CliError(f"table {table.identifier} has no Iceberg metadata: set metadata.iceberg.storage and "
                       f"commit (or run `strata iceberg sync {args.table}`) first")
    try:
        result = refresh(table, location.rsplit("/", 1)[0])
    except ImportError as exc:
        raise CliError(f"Iceberg statistics need the datasketches package (pip install 'strata[stats]'): {exc}") \
            from None
    if result.path is None:
        print(f"table {table.identifier}: no statistics written ({result.reason})")
        return 0
    ndv = ", ".join(f"{name}={n}" for name, n in (result.ndv or {}).items())
    print(f"table {table.identifier}: statistics of snapshot {result.snapshot_id} at {result.path} "
          f"(distinct values: {ndv})")
    return 0
