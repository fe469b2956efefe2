"""pypaimon 2.1 as an independent oracle: it reads the tables Strata writes and Strata reads the
tables it writes, row for row; the two also take turns writing one table."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from table_helpers import ALL_TYPES, all_types_table, rows, sample_values

import strata

pytestmark = pytest.mark.pypaimon

DRIVER = Path(__file__).with_name("pypaimon_table_driver.py")


def pypaimon(warehouse: str, jobs: list[dict]) -> list[dict]:
    from pypaimon_oracle import run_pypaimon

    return json.loads(run_pypaimon(DRIVER.read_text(), json.dumps(jobs), warehouse).strip().splitlines()[-1])


def save(table: pa.Table, path: Path) -> str:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return str(path)


def load(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


def assert_same(strata_side: pa.Table, pypaimon_side: pa.Table) -> None:
    assert strata_side.column_names == pypaimon_side.column_names
    for name in strata_side.column_names:
        assert strata_side.schema.field(name).type == pypaimon_side.schema.field(name).type, name
    assert rows(strata_side) == rows(pypaimon_side)


# -- tables Strata writes ---------------------------------------------------------------------------

def _with_dt(data: pa.Table, values: list[str]) -> pa.Table:
    return data.append_column("dt", pa.array([values[i % len(values)] for i in range(data.num_rows)]))


def _pk_plain(catalog):
    data = all_types_table(40)
    table = catalog.create_table("db.pk_plain", data.schema, primary_keys=["id"], options={"bucket": "1"})
    table.write(data.slice(0, 30))
    table.write(all_types_table(15, id_offset=25))
    table.delete(data.slice(0, 5))
    return table


def _pk_part(catalog):
    data = _with_dt(all_types_table(60), ["2024-01-01", "2024-01-02", "x y/z=1"])
    table = catalog.create_table("db.pk_part", data.schema, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "3"})
    table.write(data)
    update = _with_dt(all_types_table(20, id_offset=10, with_nulls=False), ["2024-01-01", "2024-01-02", "x y/z=1"])
    table.write(pa.concat_tables([data.slice(10, 20), update]), row_kind=["-U"] * 20 + ["+U"] * 20)
    table.delete(data.slice(40, 6))
    return table


def _pk_multi_part(catalog):
    n = 30
    schema = pa.schema([("id", pa.int64()), ("p_int", pa.int32()), ("p_date", pa.date32()), ("p_bool", pa.bool_()),
                        ("v", pa.string())])
    data = pa.table({"id": pa.array(range(n), pa.int64()), "p_int": pa.array([i % 3 - 1 for i in range(n)], pa.int32()),
                     "p_date": pa.array([dt.date(2024, 2, 28) + dt.timedelta(days=i % 2) for i in range(n)]),
                     "p_bool": pa.array([i % 4 == 0 for i in range(n)]),
                     "v": pa.array([f"v{i}" for i in range(n)])}, schema=schema)
    table = catalog.create_table("db.pk_multi_part", schema, partition_keys=["p_int", "p_date", "p_bool"],
                                 primary_keys=["id", "p_int", "p_date", "p_bool"], options={"bucket": "2"})
    table.write(data)
    table.write(data.slice(0, 10).set_column(4, "v", pa.array([f"w{i}" for i in range(10)])))
    return table


def _pk_small_buffer(catalog):
    schema = pa.schema([("id", pa.int32()), ("v", pa.string())])
    table = catalog.create_table("db.pk_small_buffer", schema, primary_keys=["id"],
                                 options={"bucket": "2", "write-buffer-size": "1 kb"})
    for round_ in range(3):
        writer = table.new_write()
        for chunk in range(5):
            ids = list(range(chunk * 20 + round_ * 7, chunk * 20 + round_ * 7 + 40))
            writer.write_arrow(pa.table({"id": pa.array(ids, pa.int32()), "v": [f"r{round_}c{chunk}"] * len(ids)}))
        table.new_commit().commit(writer.prepare_commit())
        writer.close()
    return table


def _pk_compound_key(catalog):
    schema = pa.schema([("s", pa.string()), ("d", pa.decimal128(12, 3)), ("ts", pa.timestamp("us")),
                        ("v", pa.int64())])
    n = 50
    data = pa.table({"s": [f"key-{i % 7}" for i in range(n)],
                     "d": pa.array([Decimal(i).scaleb(-3) for i in range(n)], pa.decimal128(12, 3)),
                     "ts": pa.array([dt.datetime(2020, 1, 1) + dt.timedelta(microseconds=i) for i in range(n)],
                                    pa.timestamp("us")),
                     "v": pa.array(range(n), pa.int64())}, schema=schema)
    table = catalog.create_table("db.pk_compound_key", schema, primary_keys=["s", "d", "ts"], options={"bucket": "4"})
    table.write(data)
    table.write(data.slice(0, 20).set_column(3, "v", pa.array(range(100, 120), pa.int64())))
    table.delete(data.slice(45))
    return table


def _append_plain(catalog):
    data = all_types_table(30)
    table = catalog.create_table("db.append_plain", data.schema)
    table.write(data.slice(0, 12))
    table.write(data.slice(12))
    table.write(data.slice(0, 3))  # duplicates are rows too
    return table


def _append_part(catalog):
    data = all_types_table(30).append_column(
        "dt", pa.array([["a", "b/c", "x=y", "sp ace", None, "%#"][i % 6] for i in range(30)]))
    table = catalog.create_table("db.append_part", data.schema, partition_keys=["dt"])
    table.write(data.slice(0, 20))
    table.write(data.slice(20))
    return table


def _append_bucketed(catalog):
    data = _with_dt(all_types_table(40), ["a", "b"])
    table = catalog.create_table("db.append_bucketed", data.schema, partition_keys=["dt"],
                                 options={"bucket": "3", "bucket-key": "id"})
    table.write(data.slice(0, 25))
    table.write(data.slice(25))
    return table


def _pk_overwrite(catalog):
    schema = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string())])
    table = catalog.create_table("db.pk_overwrite", schema, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "2"})

    def data(ids, part, tag):
        return pa.table({"id": pa.array(ids, pa.int64()), "dt": [part] * len(ids), "v": [f"{tag}{i}" for i in ids]})

    table.write(pa.concat_tables([data(range(10), p, "v") for p in "abc"]))
    table.write(data([1, 2], "a", "o"), mode="overwrite", partition={"dt": "a"})
    table.write(data([5], "c", "d"), mode="overwrite-dynamic")
    return table


def _pk_compacted(catalog):
    """Levels above 0 (a full compaction), then new level-0 files on top."""
    data = _with_dt(all_types_table(40), ["a", "b"])
    table = catalog.create_table("db.pk_compacted", data.schema, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "2", "write-only": "true"})
    table.write(data.slice(0, 30))
    table.write(data.slice(20))
    table.delete(data.slice(0, 4))
    table.compact(full=True)
    table.write(_with_dt(all_types_table(10, id_offset=5, with_nulls=False), ["a", "b"]))
    table.delete(data.slice(30, 2))
    return table


def typed_partitions() -> pa.Table:
    """Partition columns of every type whose directory name depends on Java's toString."""
    n = 8
    utc = dt.UTC
    stamps = [dt.datetime(2024, 1, 1, 12, 0), dt.datetime(2024, 1, 1, 12, 0, 5),
              dt.datetime(2024, 1, 1, 12, 0, 5, 123000), dt.datetime(2024, 1, 1, 12, 0, 5, 123456)]
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "p_ts": pa.array([stamps[i % 4] for i in range(n)], pa.timestamp("us")),
        "p_ltz": pa.array([stamps[i % 4].replace(tzinfo=utc) for i in range(n)], pa.timestamp("us", tz="UTC")),
        "p_float": pa.array([[1.5, 1e-5, 1e7, 0.1][i % 4] for i in range(n)], pa.float32()),
        "p_double": pa.array([[2.5, 1e-7, 123456789.0, -0.0][i % 4] for i in range(n)], pa.float64()),
        "p_dec": pa.array([Decimal("1.50"), Decimal("-0.01")] * (n // 2), pa.decimal128(5, 2)),
        "p_str": pa.array([" ", "{a}", "tab\tx", "é"] * (n // 4)),
        "p_date": pa.array([dt.date(1969, 12, 31), dt.date(2024, 2, 29)] * (n // 2)),
    })


TYPED_PARTITIONS = ["p_ts", "p_ltz", "p_float", "p_double", "p_dec", "p_str", "p_date"]


def _append_typed_parts(catalog):
    data = typed_partitions()
    table = catalog.create_table("db.append_typed_parts", data.schema, partition_keys=TYPED_PARTITIONS)
    table.write(data)
    return table


STRATA_TABLES = {f.__name__[1:]: f for f in (_pk_plain, _pk_part, _pk_multi_part, _pk_small_buffer,
                                               _pk_compound_key, _append_plain, _append_part,
                                               _append_bucketed, _pk_overwrite, _append_typed_parts,
                                               _pk_compacted)}


@pytest.fixture(scope="module")
def strata_written(tmp_path_factory):
    """Every shape written by Strata, read back by pypaimon in one subprocess."""
    root = tmp_path_factory.mktemp("strata-written")
    warehouse = str(root / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    tables = {name: make(catalog) for name, make in STRATA_TABLES.items()}
    jobs, keys = [], []
    for name in tables:
        jobs.append({"op": "read", "table": f"db.{name}", "out": str(root / f"{name}.arrow")})
        keys.append((name, "latest"))
        jobs.append({"op": "read", "table": f"db.{name}", "out": str(root / f"{name}-1.arrow"),
                     "options": {"scan.snapshot-id": "1"}})
        keys.append((name, "snapshot-1"))
    filters = {"pk_part": [["id", "equal", 47], ["dt", "equal", "x y/z=1"]],
               "pk_plain": [["id", "equal", 33]],
               "pk_compound_key": [["s", "equal", "key-3"]],
               "append_bucketed": [["id", "equal", 7]]}
    for name, predicate in filters.items():
        jobs.append({"op": "read", "table": f"db.{name}", "out": str(root / f"{name}-f.arrow"), "filter": predicate})
        keys.append((name, "filtered"))
    for name, arrow_type in ALL_TYPES:  # one key lookup per key type: pypaimon picks the bucket
        table = _keyed_by(catalog, name, arrow_type)
        tables[f"key_{name}"] = table
        for i, probe in enumerate(_probes(arrow_type)):
            filters[f"key_{name}", i] = [["x", "equal", _json_literal(probe)]]
            jobs.append({"op": "read", "table": f"db.key_{name}", "out": str(root / f"key_{name}-{i}.arrow"),
                         "filter": filters[f"key_{name}", i]})
            keys.append((f"key_{name}", f"probe-{i}"))
    results = pypaimon(warehouse, jobs)
    return tables, dict(zip(keys, zip(jobs, results, strict=True), strict=True)), filters


def _probes(arrow_type: pa.DataType) -> list:
    values = sample_values(arrow_type, 12) if not pa.types.is_boolean(arrow_type) else [False, True]
    return [values[1], values[-2]] if len(values) > 2 else values


def _json_literal(value):
    """A predicate literal for the driver (JSON with a tag for non-JSON types)."""
    if isinstance(value, Decimal):
        return {"decimal": str(value)}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, dt.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, dt.date):
        return {"date": value.isoformat()}
    if isinstance(value, dt.time):
        return {"time": value.isoformat()}
    return value


def _keyed_by(catalog, name: str, arrow_type: pa.DataType):
    values = sample_values(arrow_type, 12) if not pa.types.is_boolean(arrow_type) else [False, True]
    table = catalog.create_table(f"db.key_{name}", pa.schema([("x", arrow_type), ("v", pa.int32())]),
                                 primary_keys=["x"], options={"bucket": "5"})
    table.write(pa.table({"x": pa.array(values, arrow_type), "v": pa.array(range(len(values)), pa.int32())}))
    return table


@pytest.mark.parametrize("name", sorted(STRATA_TABLES))
def test_pypaimon_reads_strata_tables(strata_written, name):
    tables, results, _ = strata_written
    job, result = results[(name, "latest")]
    assert "error" not in result, result.get("error")
    table = tables[name]
    assert_same(table.to_arrow(), load(job["out"]))
    assert result["rows"] == table.to_arrow().num_rows > 0


@pytest.mark.parametrize("name", sorted(STRATA_TABLES))
def test_pypaimon_time_travels_strata_tables(strata_written, name):
    tables, results, _ = strata_written
    job, result = results[(name, "snapshot-1")]
    assert "error" not in result, result.get("error")
    assert_same(tables[name].to_arrow(snapshot_id=1), load(job["out"]))


@pytest.mark.parametrize("name", ["pk_part", "pk_plain", "pk_compound_key", "append_bucketed"])
def test_pypaimon_filtered_reads_find_strata_rows(strata_written, name):
    """pypaimon prunes buckets by the key hash: rows must sit in the bucket pypaimon computes."""
    tables, results, filters = strata_written
    job, result = results[(name, "filtered")]
    assert "error" not in result, result.get("error")
    predicate = None
    for column, _, value in filters[name]:
        leaf = strata.col(column) == value
        predicate = leaf if predicate is None else predicate & leaf
    expected = tables[name].to_arrow(filter=predicate)
    got = load(job["out"])
    assert expected.num_rows > 0
    # pypaimon may return whole files (filters prune, they need not be exact): keep matching rows
    got = got.filter(predicate.to_arrow())
    assert_same(expected, got)


@pytest.mark.parametrize("name,arrow_type", ALL_TYPES, ids=[n for n, _ in ALL_TYPES])
def test_pypaimon_finds_every_key_type_in_its_bucket(strata_written, name, arrow_type):
    tables, results, _ = strata_written
    for i, probe in enumerate(_probes(arrow_type)):
        job, result = results[(f"key_{name}", f"probe-{i}")]
        assert "error" not in result, result.get("error")
        got = load(job["out"]).filter(pa.compute.equal(pa.compute.field("x"), pa.scalar(probe, arrow_type)))
        assert_same(tables[f"key_{name}"].to_arrow(filter=strata.col("x") == probe), got)
        assert got.num_rows == 1, (probe, load(job["out"]).to_pylist())


def test_every_type_is_declared_like_pypaimon(strata_written):
    """The schema file Strata writes maps to the same Arrow types in pypaimon."""
    _, results, _ = strata_written
    job, _ = results[("append_plain", "latest")]
    got = load(job["out"]).schema
    for name, arrow_type in ALL_TYPES:
        assert got.field(name).type == arrow_type, name


# -- tables pypaimon writes -----------------------------------------------------------------------------

def _pypaimon_batches(tmp: Path):
    """Inputs of the pypaimon-written tables, with the model of what each must contain."""
    base = _with_dt(all_types_table(30), ["2024-01-01", "2024-01-02"])
    ops = pa.array(["+I"] * 30)
    first = base.append_column("op", ops)
    update = _with_dt(all_types_table(10, id_offset=5, with_nulls=False), ["2024-01-01", "2024-01-02"])
    second = update.append_column("op", pa.array(["+U"] * 10))
    third = base.slice(20, 4).append_column("op", pa.array(["-D"] * 4))
    model = {}
    for batch in (first, second, third):
        for r in batch.to_pylist():
            key = (r["id"], r["dt"])
            if r["op"] in ("+I", "+U"):
                model[key] = r
            else:
                model.pop(key, None)
    return [save(b, tmp / f"in-{i}.arrow") for i, b in enumerate((first, second, third))], list(model.values())


def test_strata_reads_pypaimon_tables(tmp_path):
    warehouse = str(tmp_path / "warehouse")
    inputs, pk_model = _pypaimon_batches(tmp_path)
    append_data = _with_dt(all_types_table(25), ["a", "b", "c"])
    append_inputs = [save(append_data.slice(0, 15), tmp_path / "a0.arrow"),
                     save(append_data.slice(15), tmp_path / "a1.arrow")]
    typed_input = save(typed_partitions(), tmp_path / "typed.arrow")
    jobs = [
        {"op": "create", "table": "db.pk", "schema": inputs[0], "partition_keys": ["dt"],
         "primary_keys": ["id", "dt"], "options": {"bucket": "2", "rowkind.field": "op"}},
        *({"op": "write", "table": "db.pk", "data": path} for path in inputs),
        {"op": "create", "table": "db.log", "schema": append_inputs[0], "partition_keys": ["dt"]},
        *({"op": "write", "table": "db.log", "data": path} for path in append_inputs),
        {"op": "create", "table": "db.queue", "schema": append_inputs[0], "partition_keys": ["dt"],
         "options": {"bucket": "3", "bucket-key": "id"}},
        *({"op": "write", "table": "db.queue", "data": path} for path in append_inputs),
        {"op": "create", "table": "db.dynamic", "schema": inputs[0], "partition_keys": ["dt"],
         "primary_keys": ["id", "dt"], "options": {"rowkind.field": "op"}},  # bucket -1: dynamic
        *({"op": "write", "table": "db.dynamic", "data": path} for path in inputs),
        {"op": "read", "table": "db.dynamic", "out": str(tmp_path / "dynamic.arrow")},
        {"op": "create", "table": "db.typed", "schema": typed_input, "partition_keys": TYPED_PARTITIONS},
        {"op": "write", "table": "db.typed", "data": typed_input},
        {"op": "read", "table": "db.typed", "out": str(tmp_path / "typed.arrow")},
        {"op": "read", "table": "db.pk", "out": str(tmp_path / "pk.arrow")},
        {"op": "read", "table": "db.log", "out": str(tmp_path / "log.arrow")},
        {"op": "read", "table": "db.queue", "out": str(tmp_path / "queue.arrow")},
    ]
    results = pypaimon(warehouse, jobs)
    errors = [r["error"] for r in results if "error" in r]
    assert not errors, errors[0]
    catalog = strata.load_catalog(warehouse)
    pk = catalog.get_table("db.pk")
    assert rows(pk.to_arrow(), ["id", "dt"]) == sorted(pk_model, key=lambda r: (r["id"], r["dt"]))
    assert_same(pk.to_arrow(), load(str(tmp_path / "pk.arrow")))
    assert [s.id for s in pk.snapshots()] == [1, 2, 3]
    for name in ("log", "queue"):
        table = catalog.get_table(f"db.{name}")
        assert rows(table) == rows(append_data)
        assert_same(table.to_arrow(), load(str(tmp_path / f"{name}.arrow")))
    # a dynamic-bucket table reads like any other, and Strata upserts into it through its hash index
    dynamic = catalog.get_table("db.dynamic")
    assert rows(dynamic.to_arrow(), ["id", "dt"]) == sorted(pk_model, key=lambda r: (r["id"], r["dt"]))
    assert_same(dynamic.to_arrow(), load(str(tmp_path / "dynamic.arrow")))
    before = dynamic.to_arrow().num_rows
    dynamic.write(dynamic.to_arrow().slice(0, 1))  # rewrite one live row: same key, no new row
    assert dynamic.to_arrow().num_rows == before
    typed = catalog.get_table("db.typed")
    assert_same(typed.to_arrow(), load(str(tmp_path / "typed.arrow")))
    assert rows(typed, ["id"]) == rows(typed_partitions(), ["id"])
    # Strata's filters and time travel work on pypaimon's metadata too
    got = pk.to_arrow(filter=(strata.col("id") == 7) & (strata.col("dt") == "2024-01-02"))
    assert rows(got) == [r for r in pk_model if r["id"] == 7 and r["dt"] == "2024-01-02"]
    assert pk.to_arrow(snapshot_id=1).num_rows == 30


def test_writers_take_turns_on_one_table(tmp_path):
    """Strata and pypaimon upsert the same keys in turn: both must agree on buckets and sequence
    numbers, or stale rows resurface as duplicates."""
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    schema = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string()), ("op", pa.string())])

    def batch(ids, tag, op="+I"):
        ids = list(ids)
        return pa.table({"id": pa.array(ids, pa.int64()), "dt": ["p1" if i % 2 else "p2" for i in ids],
                         "v": [f"{tag}{i}" for i in ids], "op": [op] * len(ids)}, schema=schema)

    for name, options in [("pk", {"bucket": "3", "rowkind.field": "op"}), ("log", None)]:
        table = catalog.create_table(f"db.{name}", schema, partition_keys=["dt"],
                                     primary_keys=["id", "dt"] if name == "pk" else None, options=options)
        table.write(batch(range(40), "s"))
    jobs = [{"op": "write", "table": "db.pk", "data": save(batch(range(20, 60), "p"), tmp_path / "p.arrow")},
            {"op": "write", "table": "db.pk", "data": save(batch(range(0, 6), "x", "-D"), tmp_path / "d.arrow")},
            {"op": "write", "table": "db.log", "data": save(batch(range(3), "p"), tmp_path / "l.arrow")}]
    results = pypaimon(warehouse, jobs)
    assert not [r for r in results if "error" in r], results
    pk = catalog.get_table("db.pk")
    pk.write(batch(range(50, 70), "t"))
    expected = {i: ("t" if i >= 50 else "p" if i >= 20 else "s") + str(i) for i in range(6, 70)}
    assert {r["id"]: r["v"] for r in rows(pk)} == expected
    assert pk.to_arrow().num_rows == len(expected)
    log = catalog.get_table("db.log")
    log.write(batch([99], "t"))
    results = pypaimon(warehouse, [{"op": "read", "table": "db.pk", "out": str(tmp_path / "pk.arrow")},
                                   {"op": "read", "table": "db.log", "out": str(tmp_path / "log.arrow")}])
    assert not [r for r in results if "error" in r], results
    assert_same(pk.to_arrow(), load(str(tmp_path / "pk.arrow")))
    assert_same(log.to_arrow(), load(str(tmp_path / "log.arrow")))
    assert log.to_arrow().num_rows == 44
