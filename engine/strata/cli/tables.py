"""``strata`` commands on databases, tables and their rows: create, list, describe, snapshots, files,
read, write, delete, compact."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import pyarrow as pa

from strata.catalog import Catalog
from strata.cli.common import CliError
from strata.cli.output import emit, format_size, format_table, format_time, partition_text
from strata.cli.spec import build_table_schema, parse_options, parse_where, split_names
from strata.expressions import Predicate
from strata.schema.table_schema import TableSchema
from strata.table.table import Table


def add_table_commands(sub: Any) -> None:
    p = sub.add_parser("create-database", help="create a database")
    p.add_argument("name", help="the database's name")
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
    p.add_argument("--comment", default=None, help="the table's comment")
    p.add_argument("--if-not-exists", action="store_true", help="no error if it exists")
    p.set_defaults(func=cmd_create_table)

    p = sub.add_parser("list-tables", help="list the tables of a database (or of every database)")
    p.add_argument("database", nargs="?", help="the database (default: every database)")
    p.set_defaults(func=cmd_list_tables)

    p = sub.add_parser("describe", help="columns, keys, options, latest snapshot and file counts")
    p.add_argument("table", help="the table, DB.TABLE")
    p.set_defaults(func=cmd_describe)

    p = sub.add_parser("snapshots", help="the snapshots of a table")
    p.add_argument("table", help="the table, DB.TABLE")
    p.set_defaults(func=cmd_snapshots)

    p = sub.add_parser("files", help="the live data files of a table")
    p.add_argument("table", help="the table, DB.TABLE")
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
    p.add_argument("--format", choices=["table", "csv", "json", "parquet"], default="table",
                   help="output format (parquet needs --output)")
    p.add_argument("--output", default=None, help="file to write (default: stdout)")
    p.set_defaults(func=cmd_read)

    p = sub.add_parser("write", help="write a Parquet or CSV file into a table")
    p.add_argument("table", help="the table, DB.TABLE")
    p.add_argument("--input", required=True, help="a .parquet or .csv file")
    p.add_argument("--mode", choices=["append", "overwrite", "overwrite-dynamic"], default="append",
                   help="append rows, overwrite the table, or overwrite only the partitions the input has")
    p.set_defaults(func=cmd_write)

    p = sub.add_parser("delete", help="delete the rows matching --where (append tables need deletion vectors: "
                                      "rows are marked, not rewritten; primary-key tables delete by key)")
    p.add_argument("table", help="the table, DB.TABLE")
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
    primary_keys = split_names(args.primary_key) or split_names(options.pop("primary-key", ""))
    partition_keys = split_names(args.partition) or split_names(options.pop("partition", ""))
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
        earliest = table.snapshot_manager.earliest_id() or snapshot.id
        out.append(f"Latest snapshot: {snapshot.id} ({snapshot.commit_kind}, {format_time(snapshot.time_millis)}, "
                   f"{snapshot.id - earliest + 1} snapshot(s) retained)")  # ids are contiguous: no walk
        out.append(f"Total records:   {snapshot.total_record_count} (as committed, before merging)")
        out.append(f"Data files:      {len(files)} in {len(partitions)} partition(s), "
                   f"{len(plan.splits)} bucket(s) in all; {sum(f.row_count for f in files)} rows, "
                   f"{format_size(sum(f.file_size for f in files))}")
    print("\n".join(out))
    return 0


def cmd_snapshots(catalog: Catalog, args: argparse.Namespace) -> int:
    table = catalog.get_table(args.table)
    rows = [[s.id, s.commit_kind, s.commit_user, s.commit_identifier, format_time(s.time_millis),
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
        partition = partition_text(table, split.partition_values)
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
    columns = split_names(args.columns) or None
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
            emit(data, args.format, f)
        print(f"wrote {data.num_rows} rows to {args.output}", file=sys.stderr)
    else:
        emit(data, args.format, sys.stdout)
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


def read_table(table: Table, columns: list[str] | None, where: Predicate | None, snapshot_id: int | None,
               limit: int | None) -> pa.Table:
    from strata.table.system_table import SystemTable

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
