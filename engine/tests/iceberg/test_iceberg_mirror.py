"""The Iceberg metadata of what goes beyond flat tables: collections and their field ids, types that
cannot be mirrored, schema-only metadata before the first snapshot, millisecond timestamps. (Trino
and pyiceberg read the same tables in integration_tests/test_trino_iceberg_mirror.py.)"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.iceberg import latest_metadata_location
from strata.iceberg.types import highest_field_id, name_mapping, schema_json
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType, UnsupportedTypeError
from strata.table.table import Table

ICEBERG = {"metadata.iceberg.storage": "table-location"}
BASE = 2**29 - 1  # Paimon's SpecialFields.STRUCTURED_TYPE_FIELD_ID_BASE


def metadata(table: Table) -> dict[str, Any]:
    location = latest_metadata_location(table)
    assert location is not None
    return dict(json.loads(table.file_io.read_bytes(location)))


def test_collections_get_paimons_nested_field_ids() -> None:
    int_nn = DataType("INT", nullable=False)
    schema = TableSchema(0, [
        DataField(0, "id", DataType("BIGINT", nullable=False)),
        DataField(3, "grid", DataType.array(DataType.array(int_nn), nullable=False)),
        DataField(7, "series", DataType.map(DataType("STRING", nullable=False), DataType.array(DataType("DOUBLE")))),
        DataField(8, "bag", DataType.multiset(DataType("STRING"))),
    ])
    fields = schema_json(schema)["fields"]
    assert fields[1] == {"id": 3, "name": "grid", "required": True, "type": {
        "type": "list", "element-id": BASE + 3 * 1024 + 1, "element-required": False,
        "element": {"type": "list", "element-id": BASE + 3 * 1024 + 2, "element": "int", "element-required": True}}}
    assert fields[2]["type"] == {
        "type": "map", "key-id": BASE - 7 * 1024 - 1, "key": "string", "value-id": BASE + 7 * 1024 + 1,
        "value-required": False,
        "value": {"type": "list", "element-id": BASE + 7 * 1024 + 2, "element": "double", "element-required": False}}
    # a multiset is Paimon's map of element to count
    assert fields[3]["type"] == {"type": "map", "key-id": BASE - 8 * 1024 - 1, "key": "string",
                                 "value-id": BASE + 8 * 1024 + 1, "value": "int", "value-required": True}
    assert highest_field_id(schema) == BASE + 8 * 1024 + 1
    assert name_mapping(schema)[2] == {"field-id": 7, "names": ["series"], "fields": [
        {"field-id": BASE - 7 * 1024 - 1, "names": ["key"]},
        {"field-id": BASE + 7 * 1024 + 1, "names": ["value"], "fields": [
            {"field-id": BASE + 7 * 1024 + 2, "names": ["element"]}]}]}


@pytest.mark.local_storage_only(reason="reads the written Parquet schema")
def test_ids_are_stable_across_schema_changes_and_in_the_data_files(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.int32()))])
    table = catalog.create_table("db.nested", schema, options=ICEBERG)
    table.write(pa.table({"id": [1], "tags": [["a", None]], "m": [[("k", 1)]]}, schema=schema))
    before = {f["name"]: f for f in metadata(table)["schemas"][-1]["fields"]}
    table = table.rename_column("tags", "labels").add_column("more", pa.list_(pa.int64()), first=True)
    table.write(pa.table({"more": [[2]], "id": [2], "labels": [None], "m": [None]}, schema=table.schema.arrow_schema()))
    after = metadata(table)
    fields = {f["name"]: f for f in after["schemas"][-1]["fields"]}
    assert fields["labels"]["type"] == before["tags"]["type"] and fields["m"]["type"] == before["m"]["type"]
    assert fields["more"]["type"]["element-id"] == BASE + 3 * 1024 + 1
    assert after["last-column-id"] == BASE + 3 * 1024 + 1
    mapping = json.loads(after["properties"]["schema.name-mapping.default"])
    assert [m["names"] for m in mapping] == [["more"], ["id"], ["labels"], ["m"]]
    files = sorted(table.file_io.list_status(f"{table.path}/bucket-0"), key=lambda s: s.path)
    text = str(pq.ParquetFile(files[0].path.removeprefix("file://")).schema)
    assert f"field_id={BASE + 1024 + 1} element" in text and f"field_id={BASE - 2048 - 1} key" in text


@pytest.mark.parametrize(("arrow_type", "shown"), [
    (pa.time32("ms"), r"TIME\(3\)"), (pa.timestamp("ns"), r"TIMESTAMP\(9\)"),
    (pa.list_(pa.time32("ms")), r"ARRAY<TIME\(3\)>")])
def test_types_that_cannot_be_mirrored_are_refused_naming_the_column(catalog: strata.Catalog, arrow_type: pa.DataType,
                                                                     shown: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("odd", arrow_type)])
    with pytest.raises(UnsupportedTypeError, match=rf"table db.odd .*column 'odd' of type {shown}"):
        catalog.create_table("db.odd", schema, options=ICEBERG)
    assert not catalog.table_exists("db.odd")
    table = catalog.create_table("db.odd", schema)
    with pytest.raises(ValueError, match=rf"column 'odd' of type {shown}"):
        table.set_options(**ICEBERG)
    mirrored = catalog.create_table("db.mirrored", pa.schema([("id", pa.int64())]), options=ICEBERG)
    with pytest.raises(ValueError, match=rf"column 'odd' of type {shown}"):
        mirrored.add_column("odd", arrow_type)


def test_schema_only_metadata_from_creation_to_the_first_snapshot(catalog: strata.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.fresh", schema, partition_keys=["v"], options=ICEBERG)
    first = metadata(table)
    assert (latest_metadata_location(table) or "").endswith("/metadata/v0.metadata.json")
    assert (first["current-snapshot-id"], first["snapshots"], first["refs"], first["last-sequence-number"]) == (
        -1, [], {}, 0)
    assert [f["name"] for f in first["schemas"][0]["fields"]] == ["id", "v"]
    assert first["partition-specs"] == [{"spec-id": 0, "fields": [
        {"name": "v", "transform": "identity", "source-id": 1, "field-id": 1000}]}]
    table = table.add_column("w", pa.float64())  # before the first write: the schema-only metadata follows
    second = metadata(table)
    assert [f["name"] for f in second["schemas"][-1]["fields"]] == ["id", "v", "w"]
    assert second["table-uuid"] == first["table-uuid"] and second["current-schema-id"] == 1
    table.write(pa.table({"id": [1], "v": ["a"], "w": [0.5]}, schema=table.schema.arrow_schema()))
    third = metadata(table)
    assert third["table-uuid"] == first["table-uuid"] and third["current-snapshot-id"] == 1
    listing = sorted(s.path.rsplit("/", 1)[-1] for s in table.file_io.list_status(f"{table.path}/metadata")
                     if s.path.endswith(".metadata.json"))
    # the schema-only file went with delete-after-commit; the first rows' statistics are v1's own version
    assert listing == ["v1.metadata.json", "v1.stats.metadata.json"]
    table.add_column("x", pa.int32())  # after the first snapshot: the next commit publishes the change
    assert metadata(catalog.get_table("db.fresh"))["current-snapshot-id"] == 1


def test_setting_the_option_on_a_written_table_publishes_its_latest_snapshot(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.later", pa.schema([("id", pa.int64())]))
    table.write(pa.table({"id": [1, 2]}))
    assert latest_metadata_location(table) is None
    table = table.set_options(**ICEBERG)
    assert metadata(table)["current-snapshot-id"] == 1


def test_a_dropped_hadoop_catalog_table_leaves_no_iceberg_table(catalog: strata.Catalog, warehouse: str) -> None:
    table = catalog.create_table("db.hadoop", pa.schema([("id", pa.int64())]),
                                 options={"metadata.iceberg.storage": "hadoop-catalog"})
    location = latest_metadata_location(table) or ""
    assert location.endswith("/iceberg/db/hadoop/metadata/v0.metadata.json")
    catalog.drop_table("db.hadoop")
    assert not table.file_io.exists(location)
    assert not table.file_io.exists(location.rsplit("/metadata/", 1)[0])


@pytest.mark.local_storage_only(reason="reads the written Parquet schema")
def test_millisecond_ltz_is_stored_in_micros_when_mirrored(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts3", pa.timestamp("ms")), ("tz3", pa.timestamp("ms", tz="UTC"))])
    data = pa.table({"id": [1, 2], "ts3": [1_700_000_000_123, None], "tz3": [None, -1]}, schema=schema)
    for name, options in (("plain", {}), ("mirrored", ICEBERG)):
        table = catalog.create_table(f"db.{name}", schema, options=options)
        table.write(data)
        assert table.to_arrow().equals(data)  # read back in the table's type, values unchanged
        (status,) = table.file_io.list_status(f"{table.path}/bucket-0")
        stored = pq.read_schema(status.path.removeprefix("file://"))
        assert stored.field("ts3").type == pa.timestamp("ms")  # Iceberg readers take MILLIS timestamps
        assert stored.field("tz3").type == pa.timestamp("us" if options else "ms", tz="UTC")


def test_tags_and_unwritten_branches_are_refs(catalog: strata.Catalog) -> None:
    """A tag is a tag ref; a branch made from a tag or a snapshot and not written since is a branch
    ref at its head (its first snapshot drops the source commit's changelog, and is still main's
    snapshot); a written branch's snapshots are not main's, so it gets no ref."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
    table = catalog.create_table("db.refs", schema, primary_keys=["id"],
                                 options={**ICEBERG, "changelog-producer": "input"})
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    table.create_tag("t1")
    table.create_branch("from_tag", from_tag="t1")
    table.create_branch("from_snapshot", from_snapshot=1)
    table.create_branch("wip", from_tag="t1").write(pa.table({"id": [9], "v": ["w"]}, schema=schema))
    table.write(pa.table({"id": [3], "v": ["c"]}, schema=schema))
    assert metadata(table)["refs"] == {"main": {"snapshot-id": 2, "type": "branch"},
                                       "t1": {"snapshot-id": 1, "type": "tag"},
                                       "from_tag": {"snapshot-id": 1, "type": "branch"},
                                       "from_snapshot": {"snapshot-id": 1, "type": "branch"}}
