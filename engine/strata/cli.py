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
import base64
import datetime as dt
import io
import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, TextIO

import pyarrow as pa

from strata.catalog import Catalog, load_catalog
from strata.errors import StrataError
from strata.scan.predicate import Predicate, bind, col
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType
from strata.table.table import Table

EXIT_ERROR = 2


class CliError(ValueError):
    """A usage problem found after argument parsing (bad schema spec, bad --where...)."""


# -- entry point -------------------------------------------------------------------------------


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

    p = sub.add_parser("create-database", help="create a database")
    p.add_argument("name")
    p.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    p.set_defaults(func=cmd_create_database)

    p = sub.add_parser("list-databases", help="list the databases")
    p.set_defaults(func=cmd_list_databases)

    p = sub.add_parser("create-table", help="create a table")
    p.add_argument("table", help="database.table")
    p.add_argument("--schema", required=True,
                   help="columns, e.g. 'id BIGINT NOT NULL, name STRING, price DECIMAL(10,2)'")
    p.add_argument("--primary-key", default="", help="comma-separated primary key columns")
    p.add_argument("--partition", default="", help="comma-separated partition columns")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="table option (repeatable), e.g. bucket=4")
    p.add_argument("--comment", default=None)
    p.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    p.set_defaults(func=cmd_create_table)

    p = sub.add_parser("list-tables", help="list the tables of a database (or of every database)")
    p.add_argument("database", nargs="?")
    p.set_defaults(func=cmd_list_tables)

    p = sub.add_parser("describe", help="columns, keys, options, latest snapshot and file counts")
    p.add_argument("table")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("snapshots", help="the snapshots of a table")
    p.add_argument("table")
    p.set_defaults(func=cmd_snapshots)

    p = sub.add_parser("files", help="the live data files of a table")
    p.add_argument("table")
    p.add_argument("--snapshot", type=int, default=None, help="snapshot id (default: latest)")
    p.set_defaults(func=cmd_files)

    p = sub.add_parser("read", help="read rows")
    p.add_argument("table", help="database.table, or a system table such as 'db.t$snapshots' "
                                 "($schemas, $options, $files, $manifests, $partitions, $buckets, $tags, "
                                 "$consumers, $table_indexes, $audit_log, $ro)")
    p.add_argument("--columns", default=None, help="comma-separated columns to output")
    p.add_argument("--where", default=None,
                   help="conditions joined by AND: col = 1, col <> 'x', col BETWEEN 1 AND 9, "
                        "col IN (1, 2), col IS [NOT] NULL, col LIKE 'pre%%'")
    p.add_argument("--snapshot", type=int, default=None, help="read as of this snapshot id")
    p.add_argument("--limit", type=int, default=None, help="at most N rows")
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table")
    p.add_argument("--output", default=None, help="file to write (default: stdout)")
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("write", help="write a Parquet or CSV file into a table")
    p.add_argument("table")
    p.add_argument("--input", required=True, help="a .parquet or .csv file")
    p.add_argument("--mode", choices=["append", "overwrite", "overwrite-dynamic"], default="append")
    p.set_defaults(func=cmd_write)

    p = sub.add_parser("delete", help="delete the rows matching --where (append tables need deletion vectors: "
                                      "rows are marked, not rewritten; primary-key tables delete by key)")
    p.add_argument("table")
    p.add_argument("--where", required=True,
                   help="the rows to delete, as read's --where: col = 1 AND col2 BETWEEN 'a' AND 'c', ...")
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser("compact", help="the dedicated compaction job: a table, or every table of a database")
    p.add_argument("target", help="db.table, or db with --database")
    p.add_argument("--database", action="store_true", help="compact every table of database TARGET")
    p.add_argument("--full", action="store_true", help="merge everything into the top level")
    p.add_argument("--partition", default=None, help="k=v[,k2=v2][;k=v...]: only these partitions")
    p.add_argument("--order-strategy", choices=["none", "order", "zorder"], default="none",
                   help="sort-compact append tables (bucket -1) by --order-by: lexicographic or z-order")
    p.add_argument("--order-by", default=None, help="a,b: the columns to sort by (with --order-strategy)")
    p.set_defaults(func=cmd_compact)
    _add_maintenance_commands(sub)
    _add_lineage_commands(sub)
    _add_branch_commands(sub)
    return parser


# -- branches (strata.snapshot.branches) ---------------------------------------------------------


def _add_branch_commands(sub: Any) -> None:
    p = sub.add_parser("branch", help="create, delete, list or fast-forward the branches of a table")
    actions = p.add_subparsers(dest="branch_action", required=True, metavar="ACTION")
    c = actions.add_parser("create", help="a branch: empty with the current schema, or from a tag or snapshot")
    c.add_argument("table")
    c.add_argument("name")
    origin = c.add_mutually_exclusive_group()
    origin.add_argument("--tag", default=None, help="start at this tag")
    origin.add_argument("--snapshot", type=int, default=None, help="start at this snapshot id")
    c.set_defaults(func=cmd_branch_create)
    d = actions.add_parser("delete", help="delete a branch (its data files become orphans)")
    d.add_argument("table")
    d.add_argument("name")
    d.set_defaults(func=cmd_branch_delete)
    ls = actions.add_parser("list", help="the branches of a table")
    ls.add_argument("table")
    ls.set_defaults(func=cmd_branch_list)
    f = actions.add_parser("fast-forward", help="make main what the branch is (its snapshots, schemas, tags)")
    f.add_argument("table")
    f.add_argument("name")
    f.set_defaults(func=cmd_branch_fast_forward)


def cmd_branch_create(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    branch = table.create_branch(args.name, from_tag=args.tag, from_snapshot=args.snapshot)
    latest = branch.latest_snapshot()
    origin = f"at snapshot {latest.id}" if latest is not None else "empty"
    print(f"created branch {args.name} of table {table.identifier} ({origin}); write it as {branch.identifier}")
    return 0


def cmd_branch_delete(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    table.delete_branch(args.name)
    print(f"deleted branch {args.name} of table {table.identifier}")
    return 0


def cmd_branch_list(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    infos = table.branches.infos()
    if not infos:
        print(f"table {table.identifier} has no branches")
        return 0
    rows = []
    for info in infos:
        latest = table.on_branch(info.name).latest_snapshot()
        rows.append([info.name, latest.id if latest else None, latest.total_record_count if latest else None,
                     info.create_time.isoformat(sep=" ", timespec="seconds")])
    print(format_table(["name", "latest_snapshot", "records", "created"], rows, numeric={1, 2}))
    return 0


def cmd_branch_fast_forward(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    latest = table.fast_forward(args.name)
    print(f"fast-forwarded main of table {table.identifier} to branch {args.name} (latest snapshot {latest})")
    return 0


# -- lineage: the job/table graph and consistent snapshot sets (strata.lineage) -------------------


def _add_lineage_commands(sub: Any) -> None:
    p = sub.add_parser("lineage", help="pipeline lineage: the job/table graph, lag, consistent snapshot sets")
    lineage_sub = p.add_subparsers(dest="lineage_command", required=True, metavar="WHAT")
    g = lineage_sub.add_parser("graph", help="jobs, tables, and how far each table is behind its upstream")
    g.add_argument("tables", nargs="*", help="db.table ... (default: every table)")
    g.add_argument("--json", action="store_true", help="print JSON")
    g.set_defaults(func=cmd_lineage_graph)
    c = lineage_sub.add_parser("consistent", help="the newest snapshots of the tables that derive from one point")
    c.add_argument("tables", nargs="+", help="db.table ... of one pipeline")
    c.add_argument("--tag", action="store_true", help="tag each table's snapshot with the point's tag name")
    c.add_argument("--prefix", default="lineage", help="tag name prefix (default lineage)")
    c.add_argument("--json", action="store_true", help="print JSON")
    c.set_defaults(func=cmd_lineage_consistent)


def cmd_lineage_graph(catalog: Catalog, args: argparse.Namespace) -> int:
    from strata.lineage import lineage_graph

    graph = lineage_graph(catalog, args.tables or None)
    if args.json:
        print(json.dumps(graph.to_dict(), indent=2))
        return 0
    if not graph.edges:
        print("no table records lineage")
        return 0
    rows = [[e.source, e.job, e.target, e.target_snapshot, e.consumed, e.upstream_latest, e.behind_snapshots,
             f"{e.behind_millis / 1000:.1f} s" if e.behind_millis is not None else None] for e in graph.edges]
    print(format_table(["source", "job", "table", "snapshot", "consumed", "upstream_latest", "behind",
                        "lag"], rows, numeric={3, 5, 6, 7}))
    return 0


def cmd_lineage_consistent(catalog: Catalog, args: argparse.Namespace) -> int:
    from strata.lineage import consistent_set, tag_consistent_set

    tables = [catalog.get_table(name) for name in args.tables]
    cset = consistent_set(tables)
    if cset is None:
        raise CliError(f"tables {', '.join(args.tables)} have no consistent snapshot set yet")
    tag = tag_consistent_set(tables, cset, args.prefix) if args.tag else None
    if args.json:
        print(json.dumps({**cset.to_dict(), "tag": tag or cset.tag_name(args.prefix), "tagged": bool(tag)}))
        return 0
    print("point: " + ", ".join(f"{root}={pos}" for root, pos in sorted(cset.point.items())))
    print(format_table(["table", "snapshot"], sorted(cset.snapshots.items()), numeric={1}))
    if tag:
        print(f"tagged {tag}")
    return 0


# -- table maintenance: snapshots, tags, rollback, orphans, partitions, consumers -----------------


def _add_maintenance_commands(sub: Any) -> None:
    p = sub.add_parser("iceberg", help="the table's Iceberg-compatible metadata (metadata.iceberg.storage)")
    iceberg_sub = p.add_subparsers(dest="iceberg_command", required=True, metavar="WHAT")
    s = iceberg_sub.add_parser("sync", help="publish the metadata of the latest snapshot (catches up a failed sync)")
    s.add_argument("table")
    s.set_defaults(func=cmd_iceberg_sync)
    s = iceberg_sub.add_parser("status", help="how far the Iceberg metadata is behind the table, and why")
    s.add_argument("table")
    s.set_defaults(func=cmd_iceberg_status)
    s = iceberg_sub.add_parser("stats", help="compute NDV statistics (Puffin theta sketches) of the published "
                                              "snapshot, for Trino's cost-based optimizer")
    s.add_argument("table")
    s.set_defaults(func=cmd_iceberg_stats)

    p = sub.add_parser("expire-snapshots", help="expire snapshots (by the table's retention options or these)")
    p.add_argument("table")
    p.add_argument("--retain-min", type=int, default=None, help="snapshot.num-retained.min")
    p.add_argument("--retain-max", type=int, default=None, help="snapshot.num-retained.max")
    p.add_argument("--older-than", default=None, metavar="DURATION",
                   help="snapshot.time-retained, e.g. '1 h', '30 min', '0 s'")
    p.add_argument("--max-deletes", type=int, default=None, help="snapshot.expire.limit")
    p.set_defaults(func=cmd_expire_snapshots)

    p = sub.add_parser("expire-partitions", help="drop partitions older than the expiration time")
    p.add_argument("table")
    p.add_argument("--expiration-time", default=None, metavar="DURATION",
                   help="default: the table's partition.expiration-time")
    p.add_argument("--strategy", choices=["values-time", "update-time"], default=None)
    p.add_argument("--dry-run", action="store_true", help="only list what would be dropped")
    p.set_defaults(func=cmd_expire_partitions)

    p = sub.add_parser("remove-orphan-files", help="delete files no snapshot or tag references")
    p.add_argument("table")
    p.add_argument("--older-than", default=None, metavar="AGE_OR_TIME",
                   help="only files older than this: a duration ('2 d') or a timestamp "
                        "('2024-05-01 12:00:00'); default 1 day")
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.set_defaults(func=cmd_remove_orphan_files)

    p = sub.add_parser("create-tag", help="tag a snapshot (default: the latest)")
    p.add_argument("table")
    p.add_argument("name")
    p.add_argument("--snapshot", type=int, default=None, help="snapshot id")
    p.add_argument("--time-retained", default=None, metavar="DURATION", help="e.g. '7 d'")
    p.set_defaults(func=cmd_create_tag)

    p = sub.add_parser("delete-tag", help="delete a tag (and the files only it kept)")
    p.add_argument("table")
    p.add_argument("name")
    p.set_defaults(func=cmd_delete_tag)

    p = sub.add_parser("tags", help="the tags of a table")
    p.add_argument("table")
    p.set_defaults(func=cmd_tags)

    p = sub.add_parser("rollback", help="roll a table back to a snapshot id or a tag (stop its writers first)")
    p.add_argument("table")
    p.add_argument("target", help="snapshot id or tag name")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("consumers", help="list, reset, delete or clear the consumers of a table")
    p.add_argument("table")
    p.add_argument("--reset", default=None, metavar="ID=NEXT_SNAPSHOT", help="create or move a consumer")
    p.add_argument("--delete", default=None, metavar="ID", help="delete a consumer")
    p.add_argument("--clear", action="store_true", help="delete the consumers matching --including")
    p.add_argument("--including", default=".*", help="regular expression of ids to clear (default all)")
    p.add_argument("--excluding", default=None, help="regular expression of ids to keep")
    p.set_defaults(func=cmd_consumers)


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


def cmd_expire_snapshots(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    result = table.expire_snapshots(args.retain_min, args.retain_max, args.older_than, args.max_deletes)
    if not result.expired:
        print(f"table {table.identifier}: no snapshot to expire")
    else:
        print(f"table {table.identifier}: expired snapshots {result.expired[0]}..{result.expired[-1]} "
              f"({len(result.expired)}); {result.data_files_deleted} data files and "
              f"{result.metadata_files_deleted} metadata files deleted")
    return 0


def cmd_expire_partitions(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    dropped = table.expire_partitions(args.expiration_time, strategy=args.strategy, dry_run=args.dry_run)
    verb = "would drop" if args.dry_run else "dropped"
    print(f"table {table.identifier}: {verb} {len(dropped)} partitions")
    for partition in dropped:
        print("  " + ", ".join(f"{k}={v}" for k, v in partition.items()))
    return 0


def cmd_remove_orphan_files(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    result = table.remove_orphan_files(args.older_than, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"table {table.identifier}: {verb} {len(result.deleted)} orphan files ({_size(result.deleted_bytes)}); "
          f"{result.kept_young} unreferenced files younger than the guard kept")
    for path in result.deleted:
        print(f"  {path}")
    return 0


def cmd_create_tag(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    snapshot = table.create_tag(args.name, args.snapshot, args.time_retained)
    print(f"created tag {args.name} of table {table.identifier} at snapshot {snapshot.id}")
    return 0


def cmd_delete_tag(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    if not table.delete_tag(args.name):
        raise CliError(f"table {table.identifier} has no tag {args.name!r}")
    print(f"deleted tag {args.name} of table {table.identifier}")
    return 0


def cmd_tags(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    tags = table.list_tags()
    if not tags:
        print(f"table {table.identifier} has no tags")
        return 0
    rows = [[t.name, t.snapshot.id, _time(t.snapshot.time_millis), t.snapshot.total_record_count,
             t.create_time.isoformat(sep=" ", timespec="seconds") if t.create_time else None,
             f"{t.time_retained_ms / 1000:g} s" if t.time_retained_ms is not None else None] for t in tags]
    print(format_table(["name", "snapshot", "commit_time", "records", "created", "retained"], rows,
                       numeric={1, 3}))
    return 0


def cmd_rollback(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    target: int | str = int(args.target) if args.target.isdigit() else args.target
    result = table.rollback_to(target)
    print(f"rolled table {table.identifier} back to snapshot {result.snapshot_id}: "
          f"{len(result.deleted_snapshots)} snapshots and {len(result.deleted_tags)} tags deleted, "
          f"{result.data_files_deleted} data files removed")
    return 0


def cmd_consumers(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    if args.reset:
        consumer_id, sep, value = args.reset.rpartition("=")
        if not sep or not consumer_id or not value.isdigit():
            raise CliError(f"--reset takes ID=NEXT_SNAPSHOT, got {args.reset!r}")
        table.reset_consumer(consumer_id, int(value))
        print(f"consumer {consumer_id} of table {table.identifier} now reads from snapshot {value}")
    elif args.delete:
        table.reset_consumer(args.delete, None)
        print(f"deleted consumer {args.delete} of table {table.identifier}")
    elif args.clear:
        cleared = table.clear_consumers(args.including, args.excluding)
        print(f"cleared {len(cleared)} consumers of table {table.identifier}: {', '.join(cleared)}")
    else:
        consumers = table.consumers.list_all()
        if not consumers:
            print(f"table {table.identifier} has no consumers")
            return 0
        print(format_table(["consumer", "next_snapshot", "updated"],
                           [[c.consumer_id, c.next_snapshot, _time(c.modified_millis)] for c in consumers],
                           numeric={1}))
    return 0


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


# -- commands --------------------------------------------------------------------------------------


def cmd_create_database(catalog: Catalog, args: argparse.Namespace) -> int:
    catalog.create_database(args.name, ignore_if_exists=args.if_not_exists)
    print(f"created database {args.name}")
    return 0


def cmd_list_databases(catalog: Catalog, args: argparse.Namespace) -> int:
    for name in catalog.list_databases():
        print(name)
    return 0


def cmd_create_table(catalog: Catalog, args: argparse.Namespace) -> int:
    options = parse_options(args.option)
    primary_keys = _names(args.primary_key) or _names(options.pop("primary-key", ""))
    partition_keys = _names(args.partition) or _names(options.pop("partition", ""))
    schema = build_table_schema(args.schema, partition_keys, primary_keys, options, args.comment)
    table = catalog.create_table(args.table, schema, ignore_if_exists=args.if_not_exists)
    print(f"created table {table.identifier} at {table.path}")
    return 0


def cmd_list_tables(catalog: Catalog, args: argparse.Namespace) -> int:
    if args.database:
        for name in catalog.list_tables(args.database):
            print(name)
        return 0
    for db in catalog.list_databases():
        for name in catalog.list_tables(db):
            print(f"{db}.{name}")
    return 0


def cmd_describe(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    schema = table.schema
    out = [f"Table:          {table.identifier}", f"Path:           {table.path}",
           f"Schema id:      {schema.id}"]
    if schema.comment:
        out.append(f"Comment:        {schema.comment}")
    out.append(f"Primary key:    {', '.join(schema.primary_keys) or '-'}")
    out.append(f"Partition keys: {', '.join(schema.partition_keys) or '-'}")
    out.append("")
    rows = []
    for f in schema.fields:
        roles = [r for r, keys in (("PK", schema.primary_keys), ("PARTITION", schema.partition_keys))
                 if f.name in keys]
        rows.append([f.id, f.name, str(f.type), " ".join(roles), f.description or ""])
    out.append(format_table(["id", "column", "type", "key", "comment"], rows))
    out.append("")
    out.append("Options:")
    for key in sorted(schema.options):
        out.append(f"  {key} = {schema.options[key]}")
    if not schema.options:
        out.append("  (none)")
    out.append("")
    snapshot = table.latest_snapshot()
    if snapshot is None:
        out.append("Latest snapshot: none (the table is empty)")
    else:
        plan = table.new_scan(snapshot_id=snapshot.id).plan()
        files = [f for s in plan.splits for f in s.files]
        partitions = {s.partition for s in plan.splits}
        out.append(f"Latest snapshot: {snapshot.id} ({snapshot.commit_kind}, {_time(snapshot.time_millis)}, "
                   f"{len(table.snapshots())} snapshot(s) retained)")
        out.append(f"Total records:   {snapshot.total_record_count} (as committed, before merging)")
        out.append(f"Data files:      {len(files)} in {len(partitions)} partition(s), "
                   f"{len(plan.splits)} bucket(s) in all; {sum(f.row_count for f in files)} rows, "
                   f"{_size(sum(f.file_size for f in files))}")
    print("\n".join(out))
    return 0


def cmd_snapshots(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    rows = [[s.id, s.commit_kind, s.commit_user, s.commit_identifier, _time(s.time_millis),
             s.total_record_count, s.delta_record_count] for s in table.snapshots()]
    if not rows:
        print(f"table {table.identifier} has no snapshots")
        return 0
    print(format_table(["id", "kind", "commit_user", "identifier", "time", "total_records",
                        "delta_records"], rows, numeric={0, 3, 5, 6}))
    return 0


def cmd_files(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    plan = table.new_scan(snapshot_id=args.snapshot).plan()
    if plan.snapshot is None:
        print(f"table {table.identifier} has no snapshots")
        return 0
    rows = []
    for split in plan.splits:
        partition = _partition_text(table, split.partition_values)
        for f in split.files:
            rows.append([partition, split.bucket, f.level, f.file_name, f.row_count, f.file_size,
                         f.min_sequence_number, f.max_sequence_number])
    print(f"snapshot {plan.snapshot.id}: {len(rows)} file(s)")
    if rows:
        print(format_table(["partition", "bucket", "level", "file", "rows", "size", "min_seq", "max_seq"],
                           rows, numeric={1, 2, 4, 5, 6, 7}))
    return 0


def cmd_read(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    if args.format == "parquet" and not args.output:
        raise CliError("--format parquet needs --output FILE")
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be >= 0, got {args.limit}")
    columns = _names(args.columns) or None
    if columns:
        for name in columns:
            table.schema.field(name)  # clear error naming the column
    where = parse_where(args.where, table.schema) if args.where else None
    data = read_table(table, columns, where, args.snapshot, args.limit)
    if args.format == "parquet":
        import pyarrow.parquet as pq

        pq.write_table(data, args.output)
        print(f"wrote {data.num_rows} rows to {args.output}", file=sys.stderr)
        return 0
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="") as f:
            _emit(data, args.format, f)
        print(f"wrote {data.num_rows} rows to {args.output}", file=sys.stderr)
    else:
        _emit(data, args.format, sys.stdout)
    return 0


def cmd_write(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    data = load_input(args.input, table.schema)
    result = table.write(data, mode=args.mode)
    ids = ", ".join(str(i) for i in result.snapshot_ids) or "none"
    print(f"wrote {data.num_rows} rows to {table.identifier} ({args.mode}); snapshot {ids}")
    return 0


def cmd_delete(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    result = table.delete_where(parse_where(args.where, table.schema))
    where = f" in {result.files} file{'s' if result.files != 1 else ''}" if result.files else ""
    snapshot = f"snapshot {result.snapshot_id}" if result.snapshot_id is not None else "nothing committed"
    print(f"deleted {result.deleted_rows} row{'s' if result.deleted_rows != 1 else ''} from "
          f"{table.identifier}{where}; {snapshot}")
    return 0


def cmd_compact(catalog: Catalog, args: argparse.Namespace) -> int:
    names = [f"{args.target}.{t}" for t in catalog.list_tables(args.target)] if args.database else [args.target]
    sort_by, strategy = _sort_args(args)
    for name in names:
        table = catalog.get_table(name)
        partitions = [_partition_spec(table, spec) for spec in args.partition.split(";")] if args.partition else None
        result = table.compact(full=args.full, partition=partitions, sort_by=sort_by, sort_strategy=strategy)
        print(f"{table.identifier}: {_compaction_summary(table, result.snapshot_ids)}")
    return 0


def _compaction_summary(table: Table, snapshot_ids: list[int]) -> str:
    """What a compaction did, from its snapshots' delta manifests: 'compacted 12 data files into 3
    (snapshot 4)', or that there was nothing to compact."""
    if not snapshot_ids:
        return "nothing to compact, no snapshot"
    store = table.manifest_store
    metas = [m for sid in snapshot_ids
             for m in store.read_manifest_list(table.snapshot_manager.snapshot(sid).delta_manifest_list)]
    rewritten, written = sum(m.num_deleted_files for m in metas), sum(m.num_added_files for m in metas)
    label = "snapshot" if len(snapshot_ids) == 1 else "snapshots"
    return (f"compacted {rewritten} data file{'s' if rewritten != 1 else ''} into {written} "
            f"({label} {', '.join(str(i) for i in snapshot_ids)})")


def _partition_spec(table: Table, spec: str) -> dict[str, object]:
    """'k=v,k2=v2' as a full partition of `table`, values in the partition columns' types."""
    items = [item.split("=", 1) for item in spec.split(",") if item]
    pairs = {item[0]: item[1] for item in items if len(item) == 2}
    fields = table.schema.partition_fields()
    if len(pairs) != len(items) or sorted(pairs) != sorted(f.name for f in fields):
        raise CliError(f"--partition {spec!r} must give k=v for exactly the partition keys "
                       f"{[f.name for f in fields]} of table {table.identifier}")
    return {f.name: _partition_literal(pairs[f.name], f.type.to_arrow()) for f in fields}


def _sort_args(args: argparse.Namespace) -> tuple[list[str] | None, str | None]:
    """Paimon's order_strategy / order_by pair: both or neither."""
    if args.order_strategy == "none":
        if args.order_by:
            raise CliError("--order-by needs --order-strategy order or zorder")
        return None, None
    if not args.order_by:
        raise CliError(f"--order-strategy {args.order_strategy} needs --order-by columns")
    return args.order_by.split(","), args.order_strategy


def _partition_literal(text: str, arrow_type: object) -> object:
    import pyarrow as pa

    return pa.scalar(text).cast(arrow_type).as_py()


# -- schema spec -----------------------------------------------------------------------------------


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside parentheses and quotes."""
    parts: list[str] = []
    current: list[str] = []
    depth, quote = 0, ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def parse_schema_spec(spec: str) -> list[DataField]:
    """'id BIGINT NOT NULL, name STRING, price DECIMAL(10,2)' -> fields with ids 0..n-1."""
    fields = []
    for i, column in enumerate(split_top_level(spec)):
        if not column:
            raise CliError(f"empty column in schema {spec!r}")
        pieces = column.split(None, 1)
        if len(pieces) != 2:
            raise CliError(f"column {column!r} needs a name and a type, e.g. 'id BIGINT'")
        name, type_text = pieces[0].strip("`\""), pieces[1]
        comment = None
        m = re.search(r"\s+COMMENT\s+'((?:[^']|'')*)'\s*$", type_text, flags=re.IGNORECASE)
        if m:
            comment, type_text = m.group(1).replace("''", "'"), type_text[: m.start()]
        try:
            dtype = DataType.parse(type_text)
        except ValueError as exc:
            raise CliError(f"column {name!r}: {exc}") from None
        fields.append(DataField(i, name, dtype, comment))
    return fields


def build_table_schema(spec: str, partition_keys: list[str], primary_keys: list[str],
                       options: dict[str, str], comment: str | None = None) -> TableSchema:
    """A schema-0 from a column spec; primary-key columns become NOT NULL."""
    fields = parse_schema_spec(spec)
    names = [f.name for f in fields]
    for key in primary_keys + partition_keys:
        if key not in names:
            raise CliError(f"key column {key!r} is not in the schema; columns are {names}")
    fields = [DataField(f.id, f.name, f.type.not_null(), f.description) if f.name in primary_keys else f
              for f in fields]
    return TableSchema(0, fields, partition_keys, primary_keys, options, comment)


def parse_options(pairs: Sequence[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"option {pair!r} must be KEY=VALUE")
        options[key.strip()] = value.strip()
    return options


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()] if text else []


# -- --where -----------------------------------------------------------------------------------------

_TOKEN = re.compile(r"""\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op><=|>=|<>|!=|==|=|<|>)|(?P<punct>[(),])
                        |(?P<word>[A-Za-z_][A-Za-z0-9_.]*|"[^"]+"|`[^`]+`)
                        |(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))""", re.VERBOSE)
_COMPARE = {"=": "__eq__", "==": "__eq__", "<>": "__ne__", "!=": "__ne__", "<": "__lt__",
            "<=": "__le__", ">": "__gt__", ">=": "__ge__"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise CliError(f"cannot parse --where at {text[pos:].strip()!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


def parse_where(text: str, schema: TableSchema) -> Predicate:
    """A conjunction of simple conditions -> a Predicate bound to `schema` (strata.scan.predicate.bind:
    literals convert to the column types as with the Python API; FilterError names a bad one)."""
    tokens = _tokens(text)
    pos = 0

    def peek(offset: int = 0) -> tuple[str, str]:
        return tokens[pos + offset] if pos + offset < len(tokens) else ("end", "")

    def take() -> tuple[str, str]:
        nonlocal pos
        token = peek()
        if token[0] == "end":
            raise CliError(f"incomplete --where {text!r}")
        pos += 1
        return token

    def keyword(word: str) -> bool:
        kind, value = peek()
        return kind == "word" and value.upper() == word

    def expect(word: str) -> None:
        kind, value = take()
        if kind != "word" or value.upper() != word:
            raise CliError(f"expected {word} in --where {text!r}, got {value!r}")

    def literal(name: str) -> Any:
        """SQL's literal types: TRUE/FALSE, 'text', an integer, or an exact decimal."""
        kind, value = take()
        if kind == "word" and value.upper() in ("TRUE", "FALSE"):
            return value.upper() == "TRUE"
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            number = Decimal(value)
            return int(number) if number == number.to_integral_value() and "." not in value else number
        raise CliError(f"expected a literal for column {name!r} in --where, got {value!r}")

    predicates: list[Predicate] = []
    while True:
        kind, name = take()
        if kind != "word":
            raise CliError(f"expected a column name in --where {text!r}, got {name!r}")
        name = name.strip('`"')
        column = col(name)
        negate = False
        if keyword("NOT"):
            take()
            negate = True
        kind, value = peek()
        if kind == "op":
            if negate:
                raise CliError(f"unexpected NOT in --where {text!r}")
            take()
            pred = getattr(column, _COMPARE[value])(literal(name))
        elif keyword("BETWEEN"):
            take()
            low = literal(name)
            expect("AND")
            pred = column.between(low, literal(name))
        elif keyword("IN"):
            take()
            if take() != ("punct", "("):
                raise CliError(f"expected ( after IN in --where {text!r}")
            values = [literal(name)]
            while peek() == ("punct", ","):
                take()
                values.append(literal(name))
            if take() != ("punct", ")"):
                raise CliError(f"expected ) to close IN (...) in --where {text!r}")
            pred = column.isin(values)
        elif keyword("IS"):
            take()
            if keyword("NOT"):
                take()
                expect("NULL")
                pred = column.is_not_null()
            else:
                expect("NULL")
                pred = column.is_null()
        elif keyword("LIKE"):
            take()
            kind, pattern = take()
            body = pattern[1:-1].replace("''", "'") if kind == "str" else ""
            if kind != "str" or not body.endswith("%") or any(c in body[:-1] for c in "%_"):
                raise CliError(f"only prefix patterns like 'abc%' are supported by LIKE, got {pattern!r}")
            pred = column.startswith(body[:-1])
        else:
            raise CliError(f"expected an operator after {name!r} in --where {text!r}, got {value!r}")
        predicates.append(~pred if negate else pred)
        if peek()[0] == "end":
            break
        expect("AND")
    result = predicates[0]
    for p in predicates[1:]:
        result = result & p
    bound = bind(result, schema)
    assert bound is not None
    return bound


# -- reading and writing data --------------------------------------------------------------------


def read_table(table: Table, columns: list[str] | None, where: Predicate | None, snapshot_id: int | None,
               limit: int | None) -> pa.Table:
    from strata.table.system_tables import SystemTable

    if isinstance(table, SystemTable):  # db.t$snapshots, db.t$files, ...: metadata rows, read whole
        data = table.to_arrow(columns, where, snapshot_id)
        return data if limit is None else data.slice(0, limit)
    if limit is None:
        return table.to_arrow(columns, where, snapshot_id)
    read = table.new_read(columns, where)
    batches: list[pa.RecordBatch] = []
    remaining = limit
    if remaining > 0:
        for batch in read.to_batches(table.scan(where, snapshot_id)):
            batches.append(batch.slice(0, remaining))
            remaining -= min(remaining, batch.num_rows)
            if remaining == 0:
                break
    return pa.Table.from_batches(batches, schema=read.output_schema)


def load_input(path: str, schema: TableSchema) -> pa.Table:
    if not os.path.exists(path):
        raise FileNotFoundError(2, "No such file", path)
    lower = path.lower()
    if lower.endswith((".parquet", ".parq", ".pq")):
        import pyarrow.parquet as pq

        return pq.read_table(path)
    if lower.endswith((".csv", ".csv.gz", ".tsv")):
        import pyarrow.csv as pcsv

        types = {f.name: f.type.to_arrow() for f in schema.fields}
        parse = pcsv.ParseOptions(delimiter="\t" if lower.endswith(".tsv") else ",")
        convert = pcsv.ConvertOptions(column_types=types, strings_can_be_null=True)
        try:
            return pcsv.read_csv(path, parse_options=parse, convert_options=convert)
        except pa.ArrowInvalid as exc:
            raise CliError(f"cannot read {path}: {exc}") from None
    raise CliError(f"input {path!r}: unsupported file type; use .parquet or .csv")


def _emit(data: pa.Table, fmt: str, out: TextIO) -> None:
    if fmt == "csv":
        import pyarrow.csv as pcsv

        buffer = io.BytesIO()
        pcsv.write_csv(data, buffer, pcsv.WriteOptions(quoting_style="needed"))
        out.write(buffer.getvalue().decode("utf-8"))
    elif fmt == "json":
        write_json(data, out)
    else:
        out.write(format_arrow(data) + "\n")


def write_json(data: pa.Table, out: TextIO) -> None:
    """A JSON array, one row object per line (decimals as strings, times in ISO 8601)."""
    out.write("[")
    first = True
    for row in _rows(data):
        out.write("\n" if first else ",\n")
        out.write(json.dumps(row, default=_json_value, ensure_ascii=False))
        first = False
    out.write("\n]\n" if not first else "]\n")


def _rows(data: pa.Table) -> Iterator[dict[str, Any]]:
    for batch in data.to_batches(max_chunksize=10_000):
        yield from batch.to_pylist()


def _json_value(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


# -- text output -------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                 numeric: set[int] | None = None) -> str:
    """An aligned text table; columns in `numeric` are right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, text in enumerate(row):
            widths[i] = max(widths[i], len(text))
    right = numeric or set()

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(widths[i]) if i in right else v.ljust(widths[i]) for i, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out.extend(line(row) for row in cells)
    return "\n".join(out)


def format_arrow(data: pa.Table) -> str:
    numeric = {i for i, f in enumerate(data.schema)
               if pa.types.is_integer(f.type) or pa.types.is_floating(f.type) or pa.types.is_decimal(f.type)}
    rows = [[row[name] for name in data.column_names] for row in _rows(data)]
    text = format_table(data.column_names, rows, numeric)
    return f"{text}\n({data.num_rows} row{'s' if data.num_rows != 1 else ''})"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bytes):
        return value.hex()
    return str(value).replace("\n", "\\n")


def _time(millis: int) -> str:
    return dt.datetime.fromtimestamp(millis / 1000).isoformat(sep=" ", timespec="milliseconds")


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _partition_text(table: Table, values: Sequence[Any]) -> str:
    if not table.schema.partition_keys:
        return "-"
    from strata.table.paths import partition_value_string

    return ",".join(f"{k}={partition_value_string(v)}" for k, v in zip(table.schema.partition_keys, values,
                                                                        strict=False))


if __name__ == "__main__":
    sys.exit(main())
