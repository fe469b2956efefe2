"""``strata`` maintenance commands: snapshot and partition expiry, orphan files, tags, rollback and
consumers."""

from __future__ import annotations

import argparse
from typing import Any

from strata.catalog import Catalog
from strata.cli.common import CliError
from strata.cli.output import format_size, format_table, format_time


def add_maintenance_commands(sub: Any) -> None:
    p = sub.add_parser("expire-snapshots", help="expire snapshots (by the table's retention options or these)")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("--retain-min", type=int, default=None, help="snapshot.num-retained.min")
    p.add_argument("--retain-max", type=int, default=None, help="snapshot.num-retained.max")
    p.add_argument("--older-than", default=None, metavar="DURATION",
                   help="snapshot.time-retained, e.g. '1 h', '30 min', '0 s'")
    p.add_argument("--max-deletes", type=int, default=None, help="snapshot.expire.limit")
    p.set_defaults(func=cmd_expire_snapshots)

    p = sub.add_parser("expire-partitions", help="drop partitions older than the expiration time")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("--expiration-time", default=None, metavar="DURATION",
                   help="default: the table's partition.expiration-time")
    p.add_argument("--strategy", choices=["values-time", "update-time"], default=None,
                   help="partition time from its values or from its files' creation time "
                        "(default: the table's partition.expiration-strategy)")
    p.add_argument("--dry-run", action="store_true", help="only list what would be dropped")
    p.set_defaults(func=cmd_expire_partitions)

    p = sub.add_parser("remove-orphan-files", help="delete files no snapshot or tag references")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("--older-than", default=None, metavar="AGE_OR_TIME",
                   help="only files older than this: a duration ('2 d') or a timestamp "
                        "('2024-05-01 12:00:00'); default 1 day")
    p.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    p.set_defaults(func=cmd_remove_orphan_files)

    p = sub.add_parser("create-tag", help="tag a snapshot (default: the latest)")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("name", help="the tag's name")
    p.add_argument("--snapshot", type=int, default=None, help="snapshot id")
    p.add_argument("--time-retained", default=None, metavar="DURATION", help="e.g. '7 d'")
    p.set_defaults(func=cmd_create_tag)

    p = sub.add_parser("delete-tag", help="delete a tag (and the files only it kept)")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("name", help="the tag to delete")
    p.set_defaults(func=cmd_delete_tag)

    p = sub.add_parser("tags", help="the tags of a table")
    p.add_argument("table", help="the table, DB.TABLE")
    p.set_defaults(func=cmd_tags)

    p = sub.add_parser("rollback", help="roll a table back to a snapshot id or a tag (stop its writers first)")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("target", help="snapshot id or tag name")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("consumers", help="list, reset, delete or clear the consumers of a table")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("--reset", default=None, metavar="ID=NEXT_SNAPSHOT", help="create or move a consumer")
    p.add_argument("--delete", default=None, metavar="ID", help="delete a consumer")
    p.add_argument("--clear", action="store_true", help="delete the consumers matching --including")
    p.add_argument("--including", default=".*", help="regular expression of ids to clear (default all)")
    p.add_argument("--excluding", default=None, help="regular expression of ids to keep")
    p.set_defaults(func=cmd_consumers)


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
    print(f"table {table.identifier}: {verb} {len(result.deleted)} orphan files ({format_size(result.deleted_bytes)}); "
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
    rows = [[t.name, t.snapshot.id, format_time(t.snapshot.time_millis), t.snapshot.total_record_count,
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
                           [[c.consumer_id, c.next_snapshot, format_time(c.modified_millis)] for c in consumers],
                           numeric={1}))
    return 0
