"""``strata branch``: create, delete, list and fast-forward a table's branches (strata.snapshot.branches)."""

from __future__ import annotations

import argparse
from typing import Any

from strata.catalog import Catalog
from strata.cli.output import format_table


def add_branch_commands(sub: Any) -> None:
    p = sub.add_parser("branch", help="create, delete, list or fast-forward the branches of a table")
    actions = p.add_subparsers(dest="branch_action", required=True, metavar="ACTION")
    c = actions.add_parser("create", help="a branch: empty with the current schema, or from a tag or snapshot")
    c.add_argument("table", help="the table, DB.TABLE")
    c.add_argument("name", help="the new branch's name")
    origin = c.add_mutually_exclusive_group()
    origin.add_argument("--tag", default=None, help="start at this tag")
    origin.add_argument("--snapshot", type=int, default=None, help="start at this snapshot id")
    c.set_defaults(func=cmd_branch_create)
    d = actions.add_parser("delete", help="delete a branch (its data files become orphans)")
    d.add_argument("table", help="the table, DB.TABLE")
    d.add_argument("name", help="the branch to delete")
    d.set_defaults(func=cmd_branch_delete)
    ls = actions.add_parser("list", help="the branches of a table")
    ls.add_argument("table", help="the table, DB.TABLE")
    ls.set_defaults(func=cmd_branch_list)
    f = actions.add_parser("fast-forward", help="make main what the branch is (its snapshots, schemas, tags)")
    f.add_argument("table", help="the table, DB.TABLE")
    f.add_argument("name", help="the branch main takes")
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
