"""Every kind of schema change, and every refusal, through catalog.alter_table and the Table helpers."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata import Move, SchemaChange
from strata.errors import OptionError, TableNotFoundError
from strata.schema.evolution import SchemaChangeError, apply_changes, widening_problem
from strata.schema.types import DataType

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("a", pa.int32()), ("b", pa.string()),
                    ("c", pa.float32()), ("d", pa.decimal128(10, 2))])


def _rows(n: int = 4, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": ["p1" if i % 2 else "p2" for i in ids],
                     "a": pa.array(ids, pa.int32()), "b": [f"b{i}" for i in ids],
                     "c": pa.array([i + 0.5 for i in ids], pa.float32()),
                     "d": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2))})


@pytest.fixture
def pk(catalog: strata.Catalog) -> strata.Table:
    table = catalog.create_table("db.pk", SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "2"})
    table.write(_rows())
    return table


@pytest.fixture
def append(catalog: strata.Catalog) -> strata.Table:
    table = catalog.create_table("db.ap", SCHEMA, partition_keys=["dt"])
    table.write(_rows())
    return table


def _schema_file(table: strata.Table, schema_id: int) -> dict:
    return json.loads(table.file_io.read_bytes(f"{table.path}/schema/schema-{schema_id}"))


@pytest.fixture
def jdbc_options(warehouse_options: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """Options of a JDBC catalog over the test's warehouse (embedded SQLite, kept on local disk)."""
    return {"metastore": "jdbc", "uri": f"sqlite:///{tmp_path}/catalog.sqlite", **warehouse_options}


# -- every change kind ---------------------------------------------------------------------------------


def test_set_and_remove_option(catalog: strata.Catalog, pk: strata.Table) -> None:
    t = catalog.alter_table("db.pk", [SchemaChange.set_option("snapshot.num-retained.min", "3")])
    assert t is not None and t.schema.id == 1 and t.options["snapshot.num-retained.min"] == "3"
    assert catalog.get_table("db.pk").schema.options["snapshot.num-retained.min"] == "3"
    t = t.remove_options("snapshot.num-retained.min")
    assert "snapshot.num-retained.min" not in t.options and t.schema.id == 2
    t = t.set_options(**{"bucket": "4"})  # N -> M is allowed (rescale per partition by overwrite)
    assert t.core.bucket == 4
    # the schema file is Paimon's JSON, version 3
    obj = _schema_file(t, 3)
    assert obj["version"] == 3 and obj["id"] == 3 and obj["options"]["bucket"] == "4"


def test_add_column_positions_and_ids(pk: strata.Table) -> None:
    t = pk.alter(SchemaChange.add_column("last1", "STRING"),
                 SchemaChange.add_column("first1", pa.int64(), first=True),
                 SchemaChange.add_column("after_a", DataType.parse("DOUBLE"), after="a", comment="hi"),
                 SchemaChange.add_column("before_b", "INT", before="b"))
    assert t.schema.field_names == ["first1", "id", "dt", "a", "after_a", "before_b", "b", "c", "d", "last1"]
    assert [t.schema.field(n).id for n in ("last1", "first1", "after_a", "before_b")] == [6, 7, 8, 9]
    assert t.schema.highest_field_id == 9
    assert t.schema.field("after_a").description == "hi"
    assert t.schema.id == 1  # one schema version for the whole list
    obj = _schema_file(t, 1)
    assert obj["highestFieldId"] == 9
    assert {"id": 8, "name": "after_a", "type": "DOUBLE", "description": "hi"} in obj["fields"]
    # old rows read the new columns as null
    data = t.to_arrow()
    assert data.column("first1").null_count == data.num_rows == 4
    # the helper form
    t2 = t.add_column("x", "BOOLEAN", after="first1")
    assert t2.schema.field_names[:3] == ["first1", "x", "id"]


def test_drop_column_and_readd_gets_new_id(pk: strata.Table) -> None:
    t = pk.drop_column("b")
    assert "b" not in t.schema.field_names
    assert "b" not in t.to_arrow().column_names
    t = t.add_column("b", "STRING")
    assert t.schema.field("b").id == 6  # a new field: the dropped values stay gone
    assert t.to_arrow().column("b").null_count == 4


def test_rename_column_keeps_values_and_renames_options(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("seq", pa.int64()), ("v", pa.int64()), ("w", pa.int64())])
    t = catalog.create_table("db.agg", schema, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "fields.v.aggregate-function": "sum",
        "sequence.field": "seq"})
    t.write(pa.table({"id": pa.array([1, 1], pa.int64()), "seq": pa.array([1, 2], pa.int64()),
                      "v": pa.array([10, 5], pa.int64()), "w": pa.array([1, 2], pa.int64())}))
    t = t.alter(SchemaChange.rename_column("v", "total"), SchemaChange.rename_column("seq", "version"))
    assert t.options["fields.total.aggregate-function"] == "sum"
    assert "fields.v.aggregate-function" not in t.options
    assert t.options["sequence.field"] == "version"
    assert t.schema.field("total").id == 2
    t.write(pa.table({"id": pa.array([1], pa.int64()), "version": pa.array([3], pa.int64()),
                      "total": pa.array([100], pa.int64()), "w": pa.array([3], pa.int64())}))
    assert t.to_arrow().to_pylist() == [{"id": 1, "version": 3, "total": 115, "w": 3}]


def test_rename_bucket_key_renames_option(catalog: strata.Catalog) -> None:
    schema = pa.schema([("k", pa.int64()), ("v", pa.string())])
    t = catalog.create_table("db.q", schema, options={"bucket": "2", "bucket-key": "k"})
    t.write(pa.table({"k": pa.array([1, 2, 3], pa.int64()), "v": ["a", "b", "c"]}))
    t = t.rename_column("k", "key")
    assert t.options["bucket-key"] == "key"
    assert sorted(t.to_arrow(filter=strata.col("key") == 2).column("v").to_pylist()) == ["b"]


@pytest.mark.parametrize(("column", "old", "new"), [
    ("a", "INT", "BIGINT"),
    ("a", "INT", "INT"),
    ("c", "FLOAT", "DOUBLE"),
    ("d", "DECIMAL(10, 2)", "DECIMAL(12, 2)"),
    ("d", "DECIMAL(10, 2)", "DECIMAL(11, 3)"),
    ("b", "STRING", "STRING"),
])
def test_update_column_type_widening(pk: strata.Table, column: str, old: str, new: str) -> None:
    assert pk.schema.field(column).type.to_json() == old
    before = pk.to_arrow().sort_by("id")
    t = pk.alter(SchemaChange.update_column_type(column, new))
    assert t.schema.field(column).type.to_json() == new
    after = t.to_arrow().sort_by("id")
    assert after.schema.field(column).type == DataType.parse(new).to_arrow()
    assert after.column(column).to_pylist() == before.column(column).cast(after.schema.field(column).type).to_pylist()


def test_widening_rules() -> None:
    ok = [("TINYINT", "SMALLINT"), ("TINYINT", "BIGINT"), ("SMALLINT", "INT"), ("INT", "BIGINT"),
          ("FLOAT", "DOUBLE"), ("DECIMAL(10, 2)", "DECIMAL(38, 2)"), ("DECIMAL(5, 0)", "DECIMAL(8, 3)"),
          ("VARCHAR(3)", "VARCHAR(10)"), ("VARCHAR(3)", "STRING"), ("CHAR(3)", "VARCHAR(3)"),
          ("VARBINARY(3)", "BYTES"), ("BINARY(4)", "VARBINARY(8)"), ("TIMESTAMP(3)", "TIMESTAMP(6)"),
          ("TIMESTAMP(3) WITH LOCAL TIME ZONE", "TIMESTAMP(9) WITH LOCAL TIME ZONE"),
          ("INT NOT NULL", "BIGINT")]
    bad = [("BIGINT", "INT"), ("INT", "SMALLINT"), ("DOUBLE", "FLOAT"), ("INT", "STRING"),
           ("STRING", "INT"), ("INT", "DOUBLE"), ("DECIMAL(10, 2)", "DECIMAL(10, 3)"),
           ("DECIMAL(10, 2)", "DECIMAL(12, 1)"), ("VARCHAR(10)", "VARCHAR(5)"), ("STRING", "VARCHAR(10)"),
           ("BYTES", "VARBINARY(3)"), ("TIMESTAMP(6)", "TIMESTAMP(3)"), ("DATE", "TIMESTAMP(3)"),
           ("TIMESTAMP(3)", "TIMESTAMP(3) WITH LOCAL TIME ZONE"), ("BOOLEAN", "INT"),
           ("BINARY(4)", "BINARY(8)"), ("STRING", "BYTES")]
    for src, dst in ok:
        assert widening_problem(DataType.parse(src), DataType.parse(dst)) is None, (src, dst)
    for src, dst in bad:
        assert widening_problem(DataType.parse(src), DataType.parse(dst)) is not None, (src, dst)


def test_comments_and_nullability_and_position(catalog: strata.Catalog) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int32(), nullable=False),
                        pa.field("w", pa.string())])
    t = catalog.create_table("db.n", schema, primary_keys=["id"], options={"bucket": "1"}, comment="old")
    t.write(pa.table({"id": pa.array([1], pa.int64()), "v": pa.array([7], pa.int32()), "w": ["x"]},
                     schema=pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int32(), nullable=False),
                                       pa.field("w", pa.string())])))
    assert not t.schema.field("v").type.nullable
    t = t.alter(SchemaChange.update_column_nullability("v", True),
                SchemaChange.update_column_comment("w", "the w"),
                SchemaChange.update_comment("new comment"),
                SchemaChange.update_column_position(Move.first("w")))
    assert t.schema.field("v").type.nullable
    assert t.schema.field("w").description == "the w"
    assert t.schema.comment == "new comment"
    assert t.schema.field_names == ["w", "id", "v"]
    t = t.alter(SchemaChange.update_column_position(Move.after("w", "v")))
    assert t.schema.field_names == ["id", "v", "w"]
    t = t.alter(SchemaChange.update_column_position(Move.before("v", "id")))
    assert t.schema.field_names == ["v", "id", "w"]
    t = t.alter(SchemaChange.update_column_position(Move.last("v")))
    assert t.schema.field_names == ["id", "w", "v"]
    assert t.to_arrow().to_pylist() == [{"id": 1, "w": "x", "v": 7}]
    # a null can now be written to v
    t.write(pa.table({"id": pa.array([2], pa.int64()), "w": ["y"], "v": pa.array([None], pa.int32())}))
    assert t.to_arrow().sort_by("id").column("v").to_pylist() == [7, None]
    # update_column_type keeps NOT NULL when asked to
    not_null = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.int32(), nullable=False)])
    t2 = catalog.create_table("db.n2", not_null, primary_keys=["id"], options={"bucket": "1"})
    assert not t2.update_column_type("v", "BIGINT").schema.field("v").type.nullable
    assert t2.alter(SchemaChange.update_column_type("v", "BIGINT NOT NULL")).schema.field("v").type.to_json() \
        == "BIGINT NOT NULL"


def test_new_schema_id_used_by_writers(pk: strata.Table) -> None:
    t = pk.add_column("e", "STRING")
    t.write(_rows(2, 10).append_column("e", pa.array(["x", "y"])))
    snapshot = t.latest_snapshot()
    assert snapshot is not None and snapshot.schema_id == 1
    files = [f for s in t.scan() for f in s.files]
    assert sorted({f.schema_id for f in files}) == [0, 1]


def test_empty_change_list_and_not_a_change(catalog: strata.Catalog, pk: strata.Table) -> None:
    with pytest.raises(SchemaChangeError, match="no schema changes"):
        catalog.alter_table("db.pk", [])
    with pytest.raises(SchemaChangeError, match="not a schema change"):
        catalog.alter_table("db.pk", ["add column x"])  # type: ignore[list-item]


def test_alter_missing_table(catalog: strata.Catalog) -> None:
    with pytest.raises(TableNotFoundError):
        catalog.alter_table("db.nope", [SchemaChange.set_option("bucket", "2")])
    assert catalog.alter_table("db.nope", [SchemaChange.set_option("bucket", "2")], ignore_if_not_exists=True) is None


# -- refusals ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "message"), [
    (SchemaChange.drop_column("dt"), "cannot drop partition key column 'dt'"),
    (SchemaChange.rename_column("dt", "day"), "cannot rename partition key column 'dt'"),
    (SchemaChange.update_column_type("dt", "VARCHAR(20)"), "cannot change the type of partition key column 'dt'"),
    (SchemaChange.drop_column("id"), "cannot drop primary key column 'id'"),
    (SchemaChange.rename_column("id", "key"), "cannot rename primary key column 'id'"),
    (SchemaChange.update_column_type("id", "DECIMAL(20, 0)"), "cannot change the type of primary key column 'id'"),
    (SchemaChange.update_column_nullability("id", True), "cannot make primary key column 'id' nullable"),
    (SchemaChange.update_column_nullability("a", False), "cannot make column 'a' NOT NULL"),
    (SchemaChange.update_column_type("a", "INT NOT NULL"), "cannot make column 'a' NOT NULL"),
    (SchemaChange.update_column_type("a", "SMALLINT"), "column 'a' from INT to SMALLINT: narrowing"),
    (SchemaChange.update_column_type("a", "STRING"), "column 'a' from INT to STRING"),
    (SchemaChange.update_column_type("c", "FLOAT"), None),  # no-op, fine
    (SchemaChange.update_column_type("d", "DECIMAL(10, 3)"), "column 'd' from DECIMAL\\(10, 2\\)"),
    (SchemaChange.update_column_type("b", "VARCHAR(5)"), "column 'b' from STRING to VARCHAR\\(5\\): shorter"),
    (SchemaChange.add_column("z", "INT NOT NULL"), "column 'z' cannot be added as NOT NULL"),
    (SchemaChange.add_column("a", "INT"), "column 'a' already exists"),
    (SchemaChange.add_column("_KEY_id", "INT"), "reserved"),
    (SchemaChange.add_column("_SEQUENCE_NUMBER", "BIGINT"), "reserved"),
    (SchemaChange.add_column("z", "INT", after="nope"), "column 'nope' does not exist"),
    (SchemaChange.rename_column("a", "b"), "column 'b' already exists"),
    (SchemaChange.drop_column("nope"), "column 'nope' does not exist"),
    (SchemaChange.rename_column("nope", "x"), "column 'nope' does not exist"),
    (SchemaChange.update_column_type("nope", "INT"), "column 'nope' does not exist"),
    (SchemaChange.update_column_comment("nope", "x"), "column 'nope' does not exist"),
    (SchemaChange.update_column_nullability("nope", True), "column 'nope' does not exist"),
    (SchemaChange.update_column_position(Move.first("nope")), "column 'nope' does not exist"),
    (SchemaChange.update_column_position(Move.after("a", "a")), "relative to itself"),
    (SchemaChange.set_option("path", "/elsewhere"), "option 'path'"),
    (SchemaChange.remove_option("path"), "option 'path'"),
    (SchemaChange.set_option("bucket", "-1"), "cannot change option 'bucket' to -1"),
    (SchemaChange.remove_option("bucket"), "cannot reset option 'bucket'"),
    (SchemaChange.set_option("merge-engine", "first-row"), "option 'merge-engine' cannot be changed"),
    (SchemaChange.set_option("bucket-key", "id"), "option 'bucket-key' cannot be changed"),
    (SchemaChange.set_option("primary-key", "a"), "option 'primary-key' cannot be changed"),
    (SchemaChange.set_option("partition", "a"), "option 'partition' cannot be changed"),
    (SchemaChange.set_option("no-such-option", "1"), "unknown option 'no-such-option'"),
    (SchemaChange.set_option("bucket", "zero"), "invalid value 'zero' for option 'bucket'"),
])
def test_refused_changes(catalog: strata.Catalog, pk: strata.Table, change: SchemaChange,
                         message: str | None) -> None:
    if message is None:
        catalog.alter_table("db.pk", [change])
        return
    with pytest.raises((SchemaChangeError, OptionError), match=message) as info:
        catalog.alter_table("db.pk", [change])
    assert "db.pk" in str(info.value)
    # nothing was published
    assert catalog.get_table("db.pk").schema.id == 0


def test_refused_bucket_changes_of_append_table(catalog: strata.Catalog, append: strata.Table) -> None:
    with pytest.raises(SchemaChangeError, match="cannot change option 'bucket' when it is -1"):
        append.set_options(bucket="4", **{"bucket-key": "id"})
    # the same change is fine while the table is still empty
    empty = catalog.create_table("db.empty", SCHEMA)
    t = empty.set_options(bucket="4", **{"bucket-key": "id"})
    assert t.core.bucket == 4


def test_refused_ignore_delete_true_to_false(catalog: strata.Catalog) -> None:
    t = catalog.create_table("db.ig", SCHEMA, primary_keys=["id"],
                             options={"bucket": "1", "ignore-delete": "true"})
    t.write(_rows())
    for change in (SchemaChange.set_option("ignore-delete", "false"), SchemaChange.remove_option("ignore-delete")):
        with pytest.raises(SchemaChangeError, match="'ignore-delete' from true to false"):
            t.alter(change)
    # false -> true is fine
    t2 = catalog.create_table("db.ig2", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    t2.write(_rows())
    assert t2.set_options(**{"ignore-delete": "true"}).options["ignore-delete"] == "true"


def test_refused_drop_all_columns_and_keys_in_options(catalog: strata.Catalog) -> None:
    t = catalog.create_table("db.one", pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    with pytest.raises(SchemaChangeError, match="cannot drop all columns"):
        t.alter(SchemaChange.drop_column("a"), SchemaChange.drop_column("b"))
    seq = catalog.create_table("db.seq", pa.schema([("id", pa.int64()), ("s", pa.int64()), ("v", pa.int64())]),
                               primary_keys=["id"], options={"bucket": "1", "sequence.field": "s"})
    with pytest.raises(SchemaChangeError, match=r"cannot drop column 's': option 'sequence\.field'"):
        seq.drop_column("s")
    bk = catalog.create_table("db.bk", pa.schema([("k", pa.int32()), ("v", pa.int64())]),
                              options={"bucket": "2", "bucket-key": "k"})
    with pytest.raises(SchemaChangeError, match="cannot drop column 'k': option 'bucket-key'"):
        bk.drop_column("k")
    with pytest.raises(SchemaChangeError, match="cannot change the type of bucket-key column 'k'"):
        bk.update_column_type("k", "BIGINT")


def test_dropping_aggregated_column_drops_its_options(catalog: strata.Catalog) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.int64()), ("w", pa.int64())])
    t = catalog.create_table("db.agg", schema, primary_keys=["id"], options={
        "bucket": "1", "merge-engine": "aggregation", "fields.v.aggregate-function": "sum"})
    t = t.drop_column("v")
    assert "fields.v.aggregate-function" not in t.options


def test_changes_apply_in_order_and_fail_atomically(pk: strata.Table) -> None:
    # rename then refer to the new name in the same list
    t = pk.alter(SchemaChange.rename_column("b", "name"), SchemaChange.update_column_comment("name", "n"),
                 SchemaChange.add_column("after_name", "INT", after="name"))
    assert t.schema.field("name").description == "n"
    assert t.schema.field_names.index("after_name") == t.schema.field_names.index("name") + 1
    # a later bad change rejects the whole list
    with pytest.raises(SchemaChangeError):
        t.alter(SchemaChange.add_column("ok", "INT"), SchemaChange.drop_column("nope"))
    assert "ok" not in pk.schema_manager.latest().field_names  # type: ignore[union-attr]


def test_apply_changes_is_pure(pk: strata.Table) -> None:
    new = apply_changes(pk.schema, [SchemaChange.add_column("x", "INT")], "db.pk", has_snapshots=True)
    assert new.id == pk.schema.id + 1 and "x" in new.field_names and "x" not in pk.schema.field_names


def test_concurrent_changes_all_land(catalog: strata.Catalog, pk: strata.Table) -> None:
    """Threads race to publish schema-N: each retry re-applies on the newer schema."""
    errors: list[BaseException] = []

    def add(i: int) -> None:
        try:
            strata.load_catalog(catalog.warehouse, **catalog.options).alter_table(  # type: ignore[attr-defined]
                "db.pk", [SchemaChange.add_column(f"col{i}", "INT")])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=add, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    latest = catalog.get_table("db.pk").schema
    assert latest.id == 8
    assert {f"col{i}" for i in range(8)} <= set(latest.field_names)
    assert sorted(latest.field(f"col{i}").id for i in range(8)) == list(range(6, 14))
    assert pk.schema_manager.list_ids() == list(range(9))


def test_stale_table_object(catalog: strata.Catalog, append: strata.Table) -> None:
    """A Table keeps the schema it was loaded with: it still writes (old schema id, readable), but
    will not compact files written under a newer schema (their new columns would be lost)."""
    new = append.add_column("e", "STRING")
    new.write(_rows(2, 10).append_column("e", pa.array(["x", "y"])))
    append.write(_rows(2, 20))  # the stale object writes under schema 0
    data = catalog.get_table("db.ap").to_arrow().sort_by("id")
    assert data.num_rows == 8
    assert data.column("e").to_pylist() == [None] * 4 + ["x", "y"] + [None] * 2
    with pytest.raises(SchemaChangeError, match="written under schema 1, newer than"):
        append.compact(full=True)
    catalog.get_table("db.ap").compact(full=True)
    assert catalog.get_table("db.ap").to_arrow().sort_by("id").equals(data)


def test_jdbc_catalog_alter(warehouse: str, jdbc_options: dict[str, str]) -> None:
    catalog = strata.load_catalog(warehouse, **jdbc_options)
    catalog.create_database("db")
    t = catalog.create_table("db.t", SCHEMA, primary_keys=["id", "dt"], partition_keys=["dt"],
                             options={"bucket": "1"})
    t.write(_rows())
    altered = catalog.alter_table("db.t", [SchemaChange.rename_column("b", "name"),
                                           SchemaChange.add_column("z", "INT")])
    assert altered is not None and altered.schema.id == 1
    data = catalog.get_table("db.t").to_arrow().sort_by("id")
    assert data.column("name").to_pylist() == ["b0", "b1", "b2", "b3"]
    assert data.column("z").null_count == 4
    with pytest.raises(SchemaChangeError, match="cannot drop primary key column 'id'"):
        catalog.alter_table("db.t", [SchemaChange.drop_column("id")])
    with pytest.raises(SchemaChangeError, match="read-only"):
        catalog.alter_table("db.t$snapshots", [SchemaChange.drop_column("a")])


def test_options_of_other_engines_are_kept(catalog: strata.Catalog, pk: strata.Table) -> None:
    """A table another Paimon engine created may carry options Strata does not know: altering it keeps
    them (only options being set are validated)."""
    obj = _schema_file(pk, 0)
    obj["id"] = 1
    obj["options"]["changelog-producer.lookup-wait"] = "false"
    pk.file_io.write_bytes(f"{pk.path}/schema/schema-1", json.dumps(obj).encode())
    t = catalog.alter_table("db.pk", [SchemaChange.add_column("z", "INT")])
    assert t is not None and t.schema.id == 2
    assert t.options["changelog-producer.lookup-wait"] == "false"
    with pytest.raises(OptionError, match=r"unknown option 'changelog-producer\.lookup-wait'"):
        t.set_options(**{"changelog-producer.lookup-wait": "true"})


def test_jdbc_schema_change_takes_the_table_lock(warehouse: str, jdbc_options: dict[str, str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Where snapshots are published under the JDBC lock (object stores without conditional PUT),
    schema versions are too (Paimon's JdbcCatalog.alterTableImpl runs commitChanges with the lock)."""
    catalog = strata.load_catalog(warehouse, **{**jdbc_options, "lock.enabled": "true"})
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    taken: list[tuple[str, str]] = []
    real_lock = catalog.locks.lock  # type: ignore[attr-defined]

    def recording_lock(database: str, table: str):  # type: ignore[no-untyped-def]
        taken.append((database, table))
        return real_lock(database, table)

    monkeypatch.setattr(catalog, "publish_mode", lambda table: "lock")
    monkeypatch.setattr(catalog.locks, "lock", recording_lock)  # type: ignore[attr-defined]
    altered = catalog.alter_table("db.t", [SchemaChange.add_column("z", "INT")])
    assert altered is not None and "z" in altered.schema.field_names
    assert taken == [("db", "t")]
