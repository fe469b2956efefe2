"""What the Iceberg mirror carries beyond flat tables, read by Trino 476 (its ``strata`` catalog on
Strata's REST catalog, data on MinIO) and by pyiceberg, each compared with Strata's own reader:

* ARRAY and MAP columns, nested, with nulls at every level (a null collection, a null element, an
  empty one), with Paimon's nested field ids, stable across schema changes; Trino's collection
  functions work on them;
* a table from ``create_table`` on (schema-only metadata, no snapshot), across a schema change before
  the first write, gone once dropped;
* TIMESTAMP(3) and TIMESTAMP_LTZ(3) columns;
* snapshot expiry on MinIO (``snapshot.num-retained.max=2`` over 50 commits): no failed sync, and no
  Iceberg metadata file left that no kept snapshot reaches;
* a rollback to a tag, with a statistics version on the rolled-back head, then writes: Trino reads
  the table's rows at each step.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.iceberg import latest_metadata_location
from strata.iceberg.location import metadata_dir
from strata.iceberg.manifests import decode_entries, decode_manifest_list
from strata.iceberg.statistics import refresh
from strata_platform.services.base import Service

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "tests"))
from pyiceberg_oracle import read_iceberg

pytestmark = [pytest.mark.trino, pytest.mark.minio, pytest.mark.e2e]
ICEBERG_REST = {"metadata.iceberg.storage": "rest-catalog"}
UTC = dt.UTC


def query(trino: Service, sql: str) -> list[list[Any]]:
    rows: list[list[Any]] = trino.query(sql)  # type: ignore[attr-defined]
    return rows


def plain(value: Any) -> Any:
    """One form for a value from either side: maps as sorted (key, value) lists (Strata gives
    pairs, Trino and pyiceberg dicts), instants in UTC."""
    if isinstance(value, tuple) and hasattr(value, "_names"):  # Trino's ROW value
        value = dict(zip(value._names, value, strict=True))
    if isinstance(value, dict):
        value = list(value.items())
    if isinstance(value, list):
        items = [plain(v) for v in value]
        return sorted(items, key=repr) if items and all(isinstance(v, tuple) for v in items) else items
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


def rows_of(rows: list[list[Any]] | list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((tuple(plain(v) for v in row) for row in rows), key=repr)


def arrow_rows(data: pa.Table) -> list[tuple[Any, ...]]:
    return rows_of(list(zip(*(c.to_pylist() for c in data.columns), strict=True)))


def pyiceberg_rows(iceberg_rest: Service, database: str, name: str) -> list[tuple[Any, ...]]:
    got, _ = read_iceberg(None, iceberg_rest.catalog_options(), rest=iceberg_rest.url,  # type: ignore[attr-defined]
                          identifier=f"{database}.{name}")
    return arrow_rows(got)


def metadata_of(table: Any) -> dict[str, Any]:
    location = latest_metadata_location(table)
    assert location is not None
    return dict(json.loads(table.file_io.read_bytes(location)))


# -- nested types ---------------------------------------------------------------------------------------
NESTED = pa.schema([
    pa.field("id", pa.int64(), nullable=False),
    ("tags", pa.list_(pa.string())),
    ("grid", pa.list_(pa.list_(pa.int32()))),
    ("scores", pa.map_(pa.string(), pa.int32())),
    ("series", pa.map_(pa.int32(), pa.list_(pa.float64()))),
])


def nested_rows(ids: range, version: int) -> pa.Table:
    def pick(i: int, *choices: Any) -> Any:
        return choices[i % len(choices)]

    return pa.table({
        "id": list(ids),
        "tags": [pick(i, None, [], [f"t{i}", None], [f"t{i}", f"v{version}", "x"]) for i in ids],
        "grid": [pick(i, [[i, None], None, []], None, [], [[i + version]]) for i in ids],
        "scores": [pick(i, [("k", i), ("n", None)], None, [], [("k", version)]) for i in ids],
        "series": [pick(i, None, [(1, [0.5, None]), (2, None)], [(3, [])], []) for i in ids],
    }, schema=NESTED)


def contains(values: list[Any] | None, x: Any) -> bool | None:
    """SQL's contains(): null for a null array, or when x is absent but a null element might be it."""
    if values is None or (x not in values and None in values):
        return None
    return x in values


@pytest.mark.pyiceberg
def test_nested_types(trino: Service, iceberg_rest: Service, rest_catalog: Any, rest_database: str) -> None:
    table = rest_catalog.create_table(f"{rest_database}.nested", NESTED, primary_keys=["id"],
                                 options={**ICEBERG_REST, "bucket": "2", "deletion-vectors.enabled": "true"})
    name = f"strata.{rest_database}.nested"
    table.write(nested_rows(range(0, 40), 0))
    ids = {f["name"]: f["type"] for f in metadata_of(table)["schemas"][-1]["fields"]}
    table = table.rename_column("tags", "labels")
    table = table.add_column("extra", pa.list_(pa.int64()))
    table.write(pa.table({**{c: nested_rows(range(20, 60), 1).column(c) for c in NESTED.names if c != "tags"},
                          "labels": nested_rows(range(20, 60), 1).column("tags"),
                          "extra": [None if i % 3 else [i, None] for i in range(20, 60)]},
                         schema=table.schema.arrow_schema()))
    # Paimon's nested ids (2^29 - 1 + 1024 * column id + depth), unchanged by the rename and the new column
    fields = {f["name"]: f for f in metadata_of(table)["schemas"][-1]["fields"]}
    assert fields["labels"]["type"] == ids["tags"] == {"type": "list", "element-id": 536870911 + 1024 + 1,
                                                       "element": "string", "element-required": False}
    assert fields["series"]["type"] == ids["series"]
    assert fields["series"]["type"]["key-id"] == 536870911 - 4 * 1024 - 1
    assert fields["series"]["type"]["value"]["element-id"] == 536870911 + 4 * 1024 + 2
    assert fields["extra"]["type"]["element-id"] == 536870911 + 5 * 1024 + 1

    expected = table.to_arrow()
    assert [row[:2] for row in query(trino, f"DESCRIBE {name}")] == [
        ["id", "bigint"], ["labels", "array(varchar)"], ["grid", "array(array(integer))"],
        ["scores", "map(varchar, integer)"], ["series", "map(integer, array(double))"], ["extra", "array(bigint)"]]
    assert rows_of(query(trino, f"SELECT * FROM {name}")) == arrow_rows(expected)
    assert pyiceberg_rows(iceberg_rest, rest_database, "nested") == arrow_rows(expected)
    # Trino's collection functions on the mirrored columns, against the same computed from Strata's rows
    got = query(trino, f"SELECT id, contains(labels, 'x'), cardinality(labels), cardinality(grid), "
                       f"element_at(scores, 'k'), map_keys(series) FROM {name}")
    want = [[r["id"], contains(r["labels"], "x"),
             None if r["labels"] is None else len(r["labels"]), None if r["grid"] is None else len(r["grid"]),
             None if r["scores"] is None else dict(r["scores"]).get("k"),
             None if r["series"] is None else [k for k, _ in r["series"]]] for r in expected.to_pylist()]
    assert rows_of(got) == rows_of(want)
    subscripts = query(trino, f"SELECT id, labels[1], grid[1][1] FROM {name} WHERE cardinality(labels) > 0 "
                              f"AND cardinality(grid) > 0 AND cardinality(grid[1]) > 0")
    assert rows_of(subscripts) == rows_of(
        [[r["id"], r["labels"][0], r["grid"][0][0]] for r in expected.to_pylist()
         if r["labels"] and r["grid"] and r["grid"][0]])
    assert query(trino, f"SELECT count(*) FROM {name} WHERE contains(labels, 'x')") == [
        [sum(1 for r in expected.to_pylist() if r["labels"] and "x" in r["labels"])]]


@pytest.mark.pyiceberg
def test_row_columns(trino: Service, iceberg_rest: Service, rest_catalog: Any, rest_database: str) -> None:
    row = pa.struct([("x", pa.int32()), ("inner", pa.struct([("s", pa.string()), ("l", pa.list_(pa.int64()))]))])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("r", row), ("rs", pa.list_(row)),
                        ("m", pa.map_(pa.string(), row))])
    table = rest_catalog.create_table(f"{rest_database}.rows", schema, options=ICEBERG_REST)
    r = [{"x": 1, "inner": {"s": "a", "l": [1, None]}}, None, {"x": None, "inner": None},
         {"x": 4, "inner": {"s": None, "l": []}}]
    table.write(pa.table({"id": [1, 2, 3, 4], "r": r, "rs": [[r[0], None], None, [], [r[3], r[2]]],
                          "m": [[("k", r[0])], None, [("n", None)], []]}, schema=schema))
    table = table.rename_column("r", "rec")
    table.write(pa.table({"id": [5], "rec": [r[0]], "rs": [None], "m": [None]}, schema=table.schema.arrow_schema()))
    fields = {f["name"]: f for f in metadata_of(table)["schemas"][-1]["fields"]}
    assert [(f["id"], f["name"]) for f in fields["rec"]["type"]["fields"]] == [(2, "x"), (3, "inner")]
    assert fields["rs"]["type"]["element"]["fields"][0]["id"] == 7  # Paimon's order: a column, then its fields
    name = f"strata.{rest_database}.rows"
    expected = table.to_arrow()
    assert rows_of(query(trino, f"SELECT * FROM {name}")) == arrow_rows(expected)
    # pyiceberg 0.12 reads a null list or map of structs as empty (Trino and Strata read it null)
    empty_for_null = expected.set_column(2, "rs", pa.array([v or [] for v in expected.column("rs").to_pylist()],
                                                           expected.schema.field("rs").type))
    empty_for_null = empty_for_null.set_column(3, "m", pa.array(
        [v or [] for v in expected.column("m").to_pylist()], expected.schema.field("m").type))
    assert pyiceberg_rows(iceberg_rest, rest_database, "rows") == arrow_rows(empty_for_null)
    got = query(trino, f'SELECT id, rec.x, rec."inner".s, cardinality(rec."inner".l), rs[1].x FROM {name} '
                       f"WHERE cardinality(rs) > 0")
    def inner(v: dict[str, Any]) -> dict[str, Any]:
        return (v["rec"] or {}).get("inner") or {}

    want = [[v["id"], (v["rec"] or {}).get("x"), inner(v).get("s"),
             None if inner(v).get("l") is None else len(inner(v)["l"]), (v["rs"][0] or {}).get("x")]
            for v in expected.to_pylist() if v["rs"]]
    assert rows_of(got) == rows_of(want)


# -- a table from create_table on ------------------------------------------------------------------------
def test_a_table_is_there_from_its_creation(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("tags", pa.list_(pa.string()))])
    table = rest_catalog.create_table(f"{rest_database}.fresh", schema, options=ICEBERG_REST)
    name = f"strata.{rest_database}.fresh"
    assert ["fresh"] in query(trino, f"SHOW TABLES FROM strata.{rest_database}")
    assert query(trino, f"SELECT * FROM {name}") == []
    assert [r[:2] for r in query(trino, f"DESCRIBE {name}")] == [["id", "bigint"], ["tags", "array(varchar)"]]
    assert metadata_of(table)["current-snapshot-id"] == -1
    table = table.add_column("note", pa.string())  # before the first write: the schema-only metadata follows
    assert [r[:2] for r in query(trino, f"DESCRIBE {name}")][-1] == ["note", "varchar"]
    table.write(pa.table({"id": [1], "tags": [["a"]], "note": ["n"]}, schema=table.schema.arrow_schema()))
    assert query(trino, f"SELECT id, tags, note FROM {name}") == [[1, ["a"], "n"]]
    # the first snapshot's metadata replaced the schema-only file, same table uuid
    listing = [s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/metadata")]
    assert "v0.metadata.json" not in listing and "v1.metadata.json" in listing
    rest_catalog.drop_table(f"{rest_database}.fresh")
    assert ["fresh"] not in query(trino, f"SHOW TABLES FROM strata.{rest_database}")
    with pytest.raises(Exception, match="does not exist"):
        query(trino, f"SELECT * FROM {name}")


def test_unexportable_types_are_refused_at_creation(rest_catalog: Any, rest_database: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("at", pa.time32("ms"))])
    with pytest.raises(ValueError, match=r"column 'at' of type TIME\(3\)"):
        rest_catalog.create_table(f"{rest_database}.timed", schema, options=ICEBERG_REST)
    table = rest_catalog.create_table(f"{rest_database}.timed", schema)
    with pytest.raises(ValueError, match=r"column 'at' of type TIME\(3\)"):
        table.set_options(**ICEBERG_REST)


# -- millisecond timestamps ------------------------------------------------------------------------------
@pytest.mark.pyiceberg
def test_millisecond_timestamps(trino: Service, iceberg_rest: Service, rest_catalog: Any, rest_database: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts3", pa.timestamp("ms")), ("tz3", pa.timestamp("ms", tz="UTC")),
                        ("tz3s", pa.list_(pa.timestamp("ms", tz="UTC")))])
    table = rest_catalog.create_table(f"{rest_database}.millis", schema, options=ICEBERG_REST)
    base = dt.datetime(1969, 12, 31, 23, 59, 58, 999000)
    n = 30
    table.write(pa.table({
        "id": list(range(n)),
        "ts3": [None if i % 5 == 0 else base + dt.timedelta(milliseconds=i * 1001, days=i) for i in range(n)],
        "tz3": [None if i % 5 == 1 else (base + dt.timedelta(milliseconds=i * 7, hours=i)).replace(tzinfo=UTC)
                for i in range(n)],
        "tz3s": [None if i % 5 == 2 else [(base + dt.timedelta(milliseconds=i)).replace(tzinfo=UTC), None]
                 for i in range(n)]}, schema=schema))
    expected = arrow_rows(table.to_arrow())
    assert rows_of(query(trino, f"SELECT * FROM strata.{rest_database}.millis")) == expected
    assert pyiceberg_rows(iceberg_rest, rest_database, "millis") == expected
    # filters on the millisecond columns (Iceberg bounds in micros) select what Strata does
    strata_rows = table.to_arrow().to_pylist()
    instant, local = dt.datetime(1970, 1, 1, 10, tzinfo=UTC), dt.datetime(1970, 1, 10)
    got = query(trino, f"SELECT id FROM strata.{rest_database}.millis WHERE tz3 < TIMESTAMP '1970-01-01 10:00:00 UTC'")
    assert sorted(r[0] for r in got) == sorted(r["id"] for r in strata_rows if (r["tz3"] or instant) < instant)
    got = query(trino, f"SELECT id FROM strata.{rest_database}.millis WHERE ts3 >= TIMESTAMP '1970-01-10 00:00:00'")
    assert sorted(r[0] for r in got) == sorted(r["id"] for r in strata_rows if r["ts3"] and r["ts3"] >= local)


# -- expiry on MinIO -------------------------------------------------------------------------------------
def test_expiry_leaves_no_failure_and_no_orphan(trino: Service, rest_catalog: Any, rest_database: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """An append table with deletion vectors: appends carry manifests forward, each delete_where
    rewrites them with position-delete files, and expiry drops all but 2 snapshots every commit."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = rest_catalog.create_table(f"{rest_database}.expiring", schema, options={
        **ICEBERG_REST, "deletion-vectors.enabled": "true",
        "snapshot.num-retained.min": "1", "snapshot.num-retained.max": "2"})
    caplog.set_level(logging.WARNING, logger="strata")
    for i in range(45):
        table.write(pa.table({"id": [i, 100 + i], "v": [f"v{i}", "new"]}, schema=schema))
        if i % 9 == 8:
            table.delete_where(strata.col("id") == i - 3)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]
    table = rest_catalog.get_table(f"{rest_database}.expiring")
    assert len(table.snapshots()) <= 2
    # the metadata directory holds exactly what the kept Iceberg snapshots reach
    metadata = metadata_of(table)
    directory = latest_metadata_location(table).rsplit("/", 1)[0]  # type: ignore[union-attr]
    reachable = {f"v{metadata['current-snapshot-id']}.metadata.json", "version-hint.text"}
    for snap in metadata["snapshots"]:
        reachable.add(snap["manifest-list"].rsplit("/", 1)[-1])
        for m in decode_manifest_list(table.file_io.read_bytes(snap["manifest-list"]), "list"):
            reachable.add(m.path.rsplit("/", 1)[-1])
            reachable |= {e.file.path.rsplit("/", 1)[-1] for e in decode_entries(table.file_io.read_bytes(m.path), [],
                                                                                   m.path)
                          if e.file.path.startswith(directory)}
    reachable |= {s["statistics-path"].rsplit("/", 1)[-1] for s in metadata.get("statistics", [])}
    listing = {s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/metadata")}
    assert listing == reachable
    assert rows_of(query(trino, f"SELECT * FROM strata.{rest_database}.expiring")) == arrow_rows(table.to_arrow())


# -- rollback --------------------------------------------------------------------------------------------
@pytest.mark.pyiceberg
def test_rollback_then_writes(trino: Service, iceberg_rest: Service, rest_catalog: Any, rest_database: str) -> None:
    """Trino loads the table before the rollback, right after it and after two more writes: each time
    the table's own rows, never a rolled-back snapshot's files or its statistics version."""
    pytest.importorskip("datasketches")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = rest_catalog.create_table(f"{rest_database}.rolled", schema, options=ICEBERG_REST)
    name = f"strata.{rest_database}.rolled"

    def write(*ids: int) -> None:
        table.write(pa.table({"id": list(ids), "v": [f"v{i}" for i in ids]}, schema=schema))

    def assert_trino_reads_the_table() -> None:
        expected = arrow_rows(table.to_arrow())
        assert rows_of(query(trino, f"SELECT * FROM {name}")) == expected
        summary = next(row for row in query(trino, f"SHOW STATS FOR {name}") if row[0] is None)
        assert summary[4] == len(expected)  # the row count of the snapshot Trino reads

    write(1, 2)
    write(3)
    table.create_tag("two", 2)
    write(4)
    refresh(table, metadata_dir(table))  # the head gets its statistics version, as `strata iceberg stats` gives it
    assert latest_metadata_location(table).endswith(".stats.metadata.json")  # type: ignore[union-attr]
    assert_trino_reads_the_table()
    table.rollback_to("two")
    assert_trino_reads_the_table()
    write(10)
    write(11, 12)
    assert_trino_reads_the_table()
    assert pyiceberg_rows(iceberg_rest, rest_database, "rolled") == arrow_rows(table.to_arrow())
