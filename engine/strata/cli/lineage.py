"""``strata lineage``: the job/table graph and consistent snapshot sets (strata.lineage)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from strata.catalog import Catalog
from strata.cli.common import CliError
from strata.cli.output import format_table


def add_lineage_commands(sub: Any) -> None:
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
