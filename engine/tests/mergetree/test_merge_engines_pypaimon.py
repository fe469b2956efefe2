"""pypaimon 2.1 as an oracle for the merge engines: it reads the tables Strata writes (several
commits, several level-0 runs each), and Strata reads the tables pypaimon writes; both must see
the same rows."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import strata

pytestmark = pytest.mark.pypaimon

TESTS = Path(__file__).resolve().parents[1]
DRIVER = TESTS / "table" / "pypaimon_table_driver.py"

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("d", pa.float64()), ("s", pa.string()),
                    ("g", pa.int64()), ("op", pa.string())])

# pypaimon 2.1 merges only a subset: no sequence groups, per-field aggregators with partial-update,
# ignore-delete, ignore-retract or remove-record-on-* flags (Strata's own tests cover those)
ENGINES = {
    "agg": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
            "fields.d.aggregate-function": "max", "fields.s.aggregate-function": "listagg",
            "fields.g.aggregate-function": "first_non_null_value"},
    "agg_retract": {"merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
                    "fields.g.aggregate-function": "last_value"},
    "agg_default": {"merge-engine": "aggregation", "fields.default-aggregate-function": "min",
                    "fields.v.aggregate-function": "product", "fields.s.aggregate-function": "first_value"},
    "partial": {"merge-engine": "partial-update"},
    "first_row": {"merge-engine": "first-row"},
    "dedup_seq": {"sequence.field": "g"},
    "dedup_seq_desc": {"sequence.field": "g", "sequence.field.sort-order": "descending"},
}
RETRACTING = {"agg_retract": "-U", "dedup_seq": "-D", "dedup_seq_desc": "-D"}


def pypaimon(warehouse: str, jobs: list[dict]) -> list[dict]:
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    from pypaimon_oracle import run_pypaimon

    results = json.loads(run_pypaimon(DRIVER.read_text(), json.dumps(jobs), warehouse).strip().splitlines()[-1])
    errors = [r["error"] for r in results if "error" in r]
    assert not errors, errors[0]
    return results


def save(table: pa.Table, path: Path) -> str:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(path)


def load(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


def batches(engine: str) -> list[pa.Table]:
    """Overlapping upserts with nulls, and retractions (op column) where the engine takes them."""
    out = []
    for r in range(4):
        ids = list(range(r * 3, r * 3 + 12))
        n = len(ids)
        op = [RETRACTING[engine] if engine in RETRACTING and r == 3 and i % 4 == 0 else "+I" for i in ids]
        out.append(pa.table({
            "id": ids,
            "v": [None if (i + r) % 5 == 0 else i + r + 1 for i in ids],
            "d": [None if (i * r) % 7 == 3 else float(i * (r + 1) % 11) for i in ids],
            "s": [None if (i + r) % 6 == 0 else f"{chr(97 + r)}{i % 3}" for i in ids],
            "g": [None if (i + 2 * r) % 9 == 0 else (i * 7 + r * 5) % 6 for i in ids],
            "op": op,
        }, schema=SCHEMA))
        assert len(op) == n
    return out


def sorted_rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_pypaimon_reads_strata_merge_engine_tables(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    expected, jobs = {}, []
    for engine, engine_options in ENGINES.items():
        options = {"bucket": "2", "rowkind.field": "op", "write-buffer-size": "1 kb", "write-only": "true",
                   **engine_options}
        table = catalog.create_table(f"db.{engine}", SCHEMA, primary_keys=["id"], options=options)
        data = batches(engine)
        writer = table.new_write()  # several level-0 runs in one commit
        writer.write_arrow(data[0])
        writer.write_arrow(data[1])
        table.new_commit().commit(writer.prepare_commit())
        writer.close()
        table.write(data[2])
        table.write(data[3])
        if engine == "first_row":
            # Strata, as Paimon, hides level 0 of first-row tables (writers compact at every commit;
            # these are write-only): nothing is visible until the compaction job runs
            assert table.to_arrow().num_rows == 0
            table.compact(full=True)
        expected[engine] = sorted_rows(table.to_arrow())
        jobs.append({"op": "read", "table": f"db.{engine}", "out": str(tmp_path / f"{engine}.arrow")})
    pypaimon(warehouse, jobs)
    for engine in ENGINES:
        assert sorted_rows(load(str(tmp_path / f"{engine}.arrow"))) == expected[engine], engine


# pypaimon cannot write retractions into aggregation tables, and hides (uncompacted) level 0 of
# first-row tables
PYPAIMON_WRITES = sorted(set(ENGINES) - {"agg_retract", "first_row"})


def test_strata_reads_pypaimon_merge_engine_tables(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    jobs: list[dict] = []
    for engine in PYPAIMON_WRITES:
        inputs = [save(b, tmp_path / f"{engine}-{i}.arrow") for i, b in enumerate(batches(engine))]
        options = {"bucket": "2", "rowkind.field": "op", **ENGINES[engine]}
        jobs += [{"op": "create", "table": f"db.{engine}", "schema": inputs[0], "primary_keys": ["id"],
                  "options": options},
                 *({"op": "write", "table": f"db.{engine}", "data": path} for path in inputs),
                 {"op": "read", "table": f"db.{engine}", "out": str(tmp_path / f"{engine}.arrow")}]
    pypaimon(warehouse, jobs)
    catalog = strata.load_catalog(warehouse)
    for engine in PYPAIMON_WRITES:
        table = catalog.get_table(f"db.{engine}")
        assert sorted_rows(table.to_arrow()) == sorted_rows(load(str(tmp_path / f"{engine}.arrow"))), engine
