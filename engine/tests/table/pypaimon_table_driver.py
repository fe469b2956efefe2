"""Runs under pypaimon's own interpreter (see pypaimon_oracle.run_pypaimon), never imported by pytest.

argv[1] is a JSON list of jobs, run in order; data travels as Arrow IPC files:
  {"op": "create", "table": "db.t", "schema": ipc, "partition_keys": [...], "primary_keys": [...],
   "options": {...}}
  {"op": "write", "table": "db.t", "data": ipc, "overwrite": null | {} | {"dt": "a"}}
  {"op": "read", "table": "db.t", "out": ipc, "options": {...}, "filter": [[column, op, value], ...]}
Prints a JSON list with one result per job ({"error": traceback} when it failed).
"""

import datetime
import json
import sys
import traceback
from decimal import Decimal

import pyarrow as pa
from pypaimon import CatalogFactory, Schema


def load(path):
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


def save(table, path):
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def literal(value):
    """Decode the tagged literals of the test side (decimal, bytes, date, datetime, time)."""
    if not isinstance(value, dict):
        return value
    (tag, text), = value.items()
    return {"decimal": Decimal, "bytes": bytes.fromhex, "date": datetime.date.fromisoformat,
            "datetime": datetime.datetime.fromisoformat, "time": datetime.time.fromisoformat}[tag](text)


def create(catalog, job):
    catalog.create_database(job["table"].split(".")[0], True)
    schema = Schema.from_pyarrow_schema(load(job["schema"]).schema, partition_keys=job.get("partition_keys"),
                                        primary_keys=job.get("primary_keys"), options=job.get("options"))
    catalog.create_table(job["table"], schema, False)
    return {}


def write(catalog, job):
    table = catalog.get_table(job["table"])
    builder = table.new_batch_write_builder()
    if job.get("overwrite") is not None:
        builder = builder.overwrite(job["overwrite"] or None)
    writer = builder.new_write()
    writer.write_arrow(load(job["data"]))
    commit = builder.new_commit()
    commit.commit(writer.prepare_commit())
    writer.close()
    commit.close()
    return {}


def read(catalog, job):
    table = catalog.get_table(job["table"])
    if job.get("options"):
        table = table.copy(job["options"])
    builder = table.new_read_builder()
    if job.get("filter"):
        predicates = builder.new_predicate_builder()
        parts = [getattr(predicates, op)(column, literal(value)) for column, op, value in job["filter"]]
        builder = builder.with_filter(parts[0] if len(parts) == 1 else predicates.and_predicates(parts))
    splits = builder.new_scan().plan().splits()
    result = builder.new_read().to_arrow(splits)
    save(result, job["out"])
    return {"rows": result.num_rows, "splits": len(splits)}


def main():
    catalog = CatalogFactory.create({"warehouse": sys.argv[2]})
    ops = {"create": create, "write": write, "read": read}
    results = []
    for job in json.loads(sys.argv[1]):
        try:
            results.append(ops[job["op"]](catalog, job))
        except Exception:  # reported per job, so one failure does not hide the others
            results.append({"error": traceback.format_exc()})
    print(json.dumps(results))


main()
