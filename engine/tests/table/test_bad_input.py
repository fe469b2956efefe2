"""Bad input and damaged metadata: clear errors naming the culprit, and the table left unchanged."""

from __future__ import annotations

import datetime as dt
import os
from decimal import Decimal

import pyarrow as pa
import pytest
from table_helpers import rows, snapshot_ids

from strata.errors import (
    CorruptMetadataError,
    OptionError,
    SchemaMismatchError,
    StrataError,
    WriterClosedError,
)
from strata.manifest.manifest_store import DECODED_MANIFESTS

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("small", pa.int8()),
                    ("price", pa.decimal128(10, 2)), ("ts", pa.timestamp("us")), ("f", pa.float32()),
                    ("name", pa.string())])


def batch(ids, dt_value="a", **overrides):
    ids = list(ids)
    n = len(ids)
    columns = {
        "id": pa.array(ids, pa.int64()), "dt": pa.array([dt_value] * n),
        "small": pa.array([i % 100 for i in ids], pa.int8()),
        "price": pa.array([Decimal(i) / 4 for i in ids], pa.decimal128(10, 2)),
        "ts": pa.array([dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i) for i in ids], pa.timestamp("us")),
        "f": pa.array([i / 2 for i in ids], pa.float32()),
        "name": pa.array([f"n{i}" for i in ids]),
    }
    columns.update(overrides)
    return pa.table(columns)


@pytest.fixture(params=["pk", "append"])
def table(request, catalog):
    if request.param == "pk":
        t = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "2"})
    else:
        t = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"])
    t.write(batch(range(10)))
    t.write(batch(range(5), "b"))
    return t


@pytest.fixture
def unchanged(table):
    """Asserts, after the test body, that the table still has its snapshots and rows."""
    before_snapshots, before_rows = snapshot_ids(table), rows(table)
    yield table
    fresh = table.catalog.get_table(str(table.identifier))
    assert snapshot_ids(fresh) == before_snapshots
    assert rows(fresh) == before_rows


# -- schema mismatches ----------------------------------------------------------------------------

def test_missing_column(unchanged):
    with pytest.raises(SchemaMismatchError, match="price"):
        unchanged.write(batch([1]).drop_columns(["price"]))


def test_extra_column(unchanged):
    with pytest.raises(SchemaMismatchError, match="surprise"):
        unchanged.write(batch([1]).append_column("surprise", pa.array([1])))


@pytest.mark.parametrize("column,values", [
    ("small", pa.array(["x"])),                      # unparsable string
    ("small", pa.array(["12"])),                     # numeric string: no silent parsing
    ("name", pa.array([12], pa.int64())),            # number into STRING
    ("price", pa.array([b"\x01"], pa.binary())),     # bytes into DECIMAL
    ("ts", pa.array([5], pa.int64())),               # integer into TIMESTAMP
    ("small", pa.array([True])),                     # boolean into TINYINT
    ("ts", pa.array([[1, 2]], pa.list_(pa.int64()))),  # nested
], ids=["unparsable", "numeric-string", "int-to-string", "bytes-to-decimal", "int-to-ts", "bool-to-int",
        "nested"])
def test_incompatible_type(unchanged, column, values):
    with pytest.raises(SchemaMismatchError, match=column):
        unchanged.write(batch([1], **{column: values}))


@pytest.mark.parametrize("column,values", [
    ("small", pa.array([300], pa.int64())),
    ("small", pa.array([-129], pa.int32())),
    ("price", pa.array([Decimal("123456789.12")], pa.decimal128(11, 2))),
    ("price", pa.array([Decimal("1.125")], pa.decimal128(10, 3))),  # would round
    ("price", pa.array([1.005], pa.float64())),                     # not exactly 1.00 or 1.01
    ("price", pa.array([10**9], pa.int64())),
    ("ts", pa.array([1_700_000_000_000_000_001], pa.timestamp("ns"))),  # ns into us would truncate
    ("f", pa.array([1e300], pa.float64())),                           # overflows FLOAT
], ids=["tinyint-300", "tinyint-neg", "decimal-precision", "decimal-scale", "float-to-decimal",
        "int-to-decimal", "ts-ns", "float-overflow"])
def test_value_does_not_fit(unchanged, column, values):
    with pytest.raises(SchemaMismatchError, match=column):
        unchanged.write(batch([1], **{column: values}))


def test_lossless_conversions_are_accepted(catalog):
    table = catalog.create_table("db.ok", SCHEMA)
    data = batch([1, 2], small=pa.array([7, -8], pa.int64()), price=pa.array([3, 4], pa.int64()),
                 f=pa.array([0.1, 2.5], pa.float64()), ts=pa.array([dt.datetime(2024, 1, 1)] * 2, pa.timestamp("ms")),
                 name=pa.array(["x", "y"], pa.large_string()), id=pa.array([1, 2], pa.int32()))
    table.write(data)
    got = rows(table, ["id"])
    assert [r["small"] for r in got] == [7, -8]
    assert [r["price"] for r in got] == [Decimal("3.00"), Decimal("4.00")]
    assert got[1]["f"] == 2.5 and abs(got[0]["f"] - 0.1) < 1e-7
    assert [r["name"] for r in got] == ["x", "y"]
    # pandas input, with Python decimals and all-null object columns
    df = batch([3]).to_pandas()
    df["name"] = [None]
    table.write(df)
    assert rows(table, ["id"])[-1]["name"] is None


def test_null_in_primary_key(catalog):
    table = catalog.create_table("db.k", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    table.write(batch([1]))
    with pytest.raises(SchemaMismatchError, match="'id'"):
        table.write(batch([1, 2], id=pa.array([None, 2], pa.int64())))
    assert snapshot_ids(table) == [1]
    with pytest.raises(SchemaMismatchError, match="'id'"):
        table.delete(batch([1], id=pa.array([None], pa.int64())))
    assert table.to_arrow().num_rows == 1


def test_bad_row_kinds(unchanged):
    if not unchanged.schema.primary_keys:
        with pytest.raises(ValueError, match="append"):
            unchanged.write(batch([1]), row_kind="-D")
        return
    with pytest.raises(SchemaMismatchError, match=r"\+X"):
        unchanged.write(batch([1, 2]), row_kind=["+I", "+X"])
    with pytest.raises(SchemaMismatchError, match="row kinds"):
        unchanged.write(batch([1, 2]), row_kind=["+I"])
    with pytest.raises(SchemaMismatchError, match=r"0\.\.3"):
        unchanged.write(batch([1]), row_kind=pa.array([7], pa.int8()))


def test_bad_batch_does_not_poison_the_writer(table):
    writer = table.new_write()
    writer.write_arrow(batch([100, 101]))
    with pytest.raises(SchemaMismatchError):
        writer.write_arrow(batch([102], small=pa.array([1000])))
    writer.write_arrow(batch([103]))
    table.new_commit().commit(writer.prepare_commit())
    writer.close()
    assert sorted(r["id"] for r in rows(table) if r["id"] >= 100) == [100, 101, 103]


def test_rowkind_field_missing_from_data(catalog):
    schema = pa.schema([("id", pa.int32()), ("op", pa.string())])
    table = catalog.create_table("db.cdc", schema, primary_keys=["id"],
                                 options={"bucket": "1", "rowkind.field": "op"})
    with pytest.raises(SchemaMismatchError, match="op"):
        table.write(pa.table({"id": pa.array([1], pa.int32())}))
    assert table.latest_snapshot() is None


# -- options ------------------------------------------------------------------------------------------

def test_unknown_option(catalog, warehouse, warehouse_io):
    with pytest.raises(OptionError, match="bukket"):
        catalog.create_table("db.o", SCHEMA, options={"bukket": "2"})
    assert not catalog.table_exists("db.o")
    assert not warehouse_io.exists(f"{warehouse}/db.db/o/schema/schema-0")


@pytest.mark.parametrize("key,value", [
    ("bucket", "zero"), ("bucket", "0"), ("bucket", "-3"), ("write-buffer-size", "lots"),
    ("target-file-size", "12 parsecs"), ("merge-engine", "newest"), ("file.format", "csv"),
    ("commit.max-retries", "-1"), ("snapshot.time-retained", "forever"), ("ignore-delete", "yes"),
])
def test_invalid_option_value(catalog, key, value):
    options = {"bucket": "1", key: value}
    with pytest.raises(OptionError, match=key):
        catalog.create_table("db.o", SCHEMA, primary_keys=["id"], options=options)
    assert not catalog.table_exists("db.o")


@pytest.mark.parametrize("kwargs,culprit", [
    ({"primary_keys": ["nope"], "options": {"bucket": "1"}}, "nope"),
    ({"partition_keys": ["nope"]}, "nope"),
    ({"primary_keys": ["id"], "partition_keys": ["dt"], "options": {"bucket": "1"}}, "dt"),
    ({"options": {"bucket": "2"}}, "bucket-key"),
    ({"options": {"bucket": "2", "bucket-key": "nope"}}, "nope"),
    ({"primary_keys": ["id"], "options": {"bucket": "2", "bucket-key": "name"}}, "name"),
    ({"primary_keys": ["id"], "options": {"bucket": "-2"}}, "postpone"),
])
def test_invalid_table_definitions(catalog, kwargs, culprit):
    with pytest.raises(StrataError, match=culprit):
        catalog.create_table("db.o", SCHEMA, **kwargs)
    assert not catalog.table_exists("db.o")


# -- closed writers -----------------------------------------------------------------------------------

def test_write_after_close(unchanged):
    writer = unchanged.new_write()
    writer.write_arrow(batch([50]))
    writer.close()
    with pytest.raises(WriterClosedError):
        writer.write_arrow(batch([51]))
    with pytest.raises(WriterClosedError):
        writer.prepare_commit()


def test_commit_after_close(unchanged):
    with unchanged.new_write() as writer:
        writer.write_arrow(batch([60]))
        messages = writer.prepare_commit()
    commit = unchanged.new_commit()
    commit.close()
    with pytest.raises(WriterClosedError):
        commit.commit(messages)
    with pytest.raises(WriterClosedError):
        commit.overwrite(messages)
    with unchanged.new_commit() as commit:
        pass
    with pytest.raises(WriterClosedError):
        commit.commit(messages)


# -- damaged metadata ---------------------------------------------------------------------------------

def _damage(table, path, how):
    data = table.file_io.read_bytes(path)
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "empty":
        data = b""
    elif how == "garbage":
        data = b"\x00garbage\xff" * 7
    elif how == "flip":
        middle = len(data) // 2
        data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]
    elif how == "tail":
        data = data[:-1]
    table.file_io.write_bytes(path, data)


DAMAGES = ["truncate", "empty", "garbage", "flip", "tail"]


def _assert_corrupt(table, culprit):
    # the damage happened behind the process's back: drop what it already decoded (immutable
    # manifests are cached process-wide), as a process started after the damage would have
    DECODED_MANIFESTS.clear()
    fresh = table.catalog.get_table(str(table.identifier))
    with pytest.raises(CorruptMetadataError, match=os.path.basename(culprit)):
        fresh.to_arrow()
    # writers must not build on damaged metadata either
    with pytest.raises(CorruptMetadataError, match=os.path.basename(culprit)):
        fresh.write(batch([1000]))


@pytest.mark.parametrize("how", DAMAGES)
def test_corrupt_snapshot(table, how):
    latest = table.snapshot_manager.path(table.snapshot_manager.latest_id())
    _damage(table, latest, how)
    if how == "flip":  # a flipped byte may still parse: then the content must be checked elsewhere
        try:
            table.snapshot_manager.snapshot(table.snapshot_manager.latest_id())
        except CorruptMetadataError as exc:
            assert os.path.basename(latest) in str(exc)
        return
    _assert_corrupt(table, latest)
    # older snapshots stay readable
    assert table.to_arrow(snapshot_id=1).num_rows == 10


@pytest.mark.parametrize("which", ["base", "delta"])
@pytest.mark.parametrize("how", DAMAGES)
def test_corrupt_manifest_list(table, which, how):
    snap = table.latest_snapshot()
    name = snap.base_manifest_list if which == "base" else snap.delta_manifest_list
    path = table.manifest_store.path(name)
    _damage(table, path, how)
    _assert_corrupt(table, path)


@pytest.mark.parametrize("how", DAMAGES)
def test_corrupt_manifest_file(table, how):
    snap = table.latest_snapshot()
    metas = table.manifest_store.read_manifest_list(snap.delta_manifest_list)
    path = table.manifest_store.path(metas[0].file_name)
    _damage(table, path, how)
    _assert_corrupt(table, path)


def test_missing_manifest_file(table):
    snap = table.latest_snapshot()
    metas = table.manifest_store.read_manifest_list(snap.base_manifest_list)
    path = table.manifest_store.path(metas[0].file_name)
    table.file_io.delete(path)
    _assert_corrupt(table, path)


def test_corrupt_schema_file(table):
    path = f"{table.path}/schema/schema-0"
    _damage(table, path, "truncate")
    with pytest.raises(CorruptMetadataError, match="schema-0"):
        table.catalog.get_table(str(table.identifier))


@pytest.mark.parametrize("how", ["truncate", "empty", "missing"])
def test_damaged_data_file_names_the_file(table, how):
    split = table.scan()[0]
    path = f"{split.bucket_path}/{split.files[0].file_name}"
    if how == "missing":
        table.file_io.delete(path)
    else:
        _damage(table, path, how)
    fresh = table.catalog.get_table(str(table.identifier))
    with pytest.raises((StrataError, OSError), match=split.files[0].file_name):
        fresh.to_arrow()


# -- features Strata would get wrong are refused, not ignored ------------------------------------------

@pytest.mark.parametrize("options,culprit", [
    ({"deletion-vectors.enabled": "true", "merge-engine": "first-row"}, "first-row"),
    ({"deletion-vectors.enabled": "true", "changelog-producer": "full-compaction"}, "changelog-producer"),
    ({"partition.legacy-name": "false"}, "legacy-name"),
    ({"rowkind.field": "nope"}, "rowkind.field"),
    ({"rowkind.field": "small"}, "rowkind.field"),
])
def test_unsupported_features_are_refused(catalog, options, culprit):
    with pytest.raises(StrataError, match=culprit):
        catalog.create_table("db.u", SCHEMA, primary_keys=["id"], options={"bucket": "1", **options})
    assert not catalog.table_exists("db.u")


def test_sequence_field_decides_over_write_order(catalog):
    """sequence.field must be honoured (merging by write order would let older rows win)."""
    table = catalog.create_table("db.seq", SCHEMA, primary_keys=["id"],
                                 options={"bucket": "1", "sequence.field": "small"})
    table.write(batch([1], small=pa.array([5], pa.int8()), name=pa.array(["new"])))
    table.write(batch([1], small=pa.array([3], pa.int8()), name=pa.array(["old"])))
    assert [r["name"] for r in rows(table)] == ["new"]


def test_time_keeps_milliseconds_only(catalog):
    """Paimon stores TIME as milliseconds of the day: finer values are refused, not truncated."""
    schema = pa.schema([("id", pa.int32()), ("t", pa.time64("us"))])
    table = catalog.create_table("db.time", schema)
    assert table.schema.field("t").type.to_json() == "TIME(6)"
    table.write(pa.table({"id": pa.array([1], pa.int32()), "t": pa.array([dt.time(1, 2, 3, 4000)], pa.time64("us"))}))
    with pytest.raises(SchemaMismatchError, match="'t'"):
        table.write(pa.table({"id": pa.array([2], pa.int32()),
                              "t": pa.array([dt.time(1, 2, 3, 4001)], pa.time64("us"))}))
    assert table.to_arrow().to_pylist() == [{"id": 1, "t": dt.time(1, 2, 3, 4000)}]
