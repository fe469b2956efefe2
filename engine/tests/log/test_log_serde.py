"""The log store without a broker: record encoding, envelopes, options, offsets in snapshots."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import numpy as np
import pyarrow as pa
import pytest

import strata
from strata.errors import OptionError
from strata.log import LOG_OFFSETS_PROPERTY, LogCommittable, log_options, snapshot_log_offsets
from strata.log.kafka import LogCommit, merge_offsets
from strata.log.serde import decode_envelope, decode_values, encode_keys, encode_values, with_row_kinds

SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("price", pa.decimal128(10, 2)), ("ok", pa.bool_()),
    ("day", pa.date32()), ("ts", pa.timestamp("ms")), ("us", pa.timestamp("us")), ("f", pa.float64()),
    ("raw", pa.binary()), ("small", pa.int16()),
])


def sample() -> pa.Table:
    return pa.table({
        "id": [1, 2, 3, 4],
        "name": ["plain", 'quote " and \\ back', "line\nbreak \u00fc \u20ac", None],
        "price": [decimal.Decimal("1.50"), None, decimal.Decimal("-3.25"), decimal.Decimal("0.00")],
        "ok": [True, False, None, True],
        "day": [dt.date(2024, 1, 2), None, dt.date(1969, 12, 31), dt.date(2000, 2, 29)],
        "ts": [dt.datetime(2024, 1, 2, 3, 4, 5, 123000), None, dt.datetime(1970, 1, 1), dt.datetime(2038, 1, 19)],
        "us": [dt.datetime(2024, 1, 2, 3, 4, 5, 123456), None, None, dt.datetime(1999, 12, 31, 23, 59, 59, 999999)],
        "f": [0.1, 1e300, None, -2.5],
        "raw": [b"\x00\xff", None, b"", b"abc"],
        "small": [1, -2, None, 32767],
    }, schema=SCHEMA)


def test_round_trip_every_kind_and_type() -> None:
    data = sample()
    kinds = np.array([0, 1, 2, 3], dtype=np.int8)
    values = encode_values(data, kinds)
    for v in values:
        json.loads(v)  # valid JSON, escapes included
    decoded, got = decode_values(values, SCHEMA)
    assert got.tolist() == [0, 1, 2, 3]
    assert decoded.cast(SCHEMA).equals(data)


def test_envelope_is_debezium_like() -> None:
    data = sample().slice(0, 1).select(["id", "name"])
    ins, before, after, delete = (json.loads(encode_values(data, np.array([k], dtype=np.int8))[0])
                                  for k in range(4))
    row = {"id": 1, "name": "plain"}
    assert ins == {"before": None, "after": row, "op": "c"}
    assert before == {"before": row, "after": None, "op": "u"}
    assert after == {"before": None, "after": row, "op": "u"}
    assert delete == {"before": row, "after": None, "op": "d"}
    assert json.loads(encode_values(data, None)[0])["op"] == "c"


def test_temporal_values_follow_debezium_conventions() -> None:
    row = json.loads(encode_values(sample().slice(0, 1), None)[0])["after"]
    assert row["day"] == (dt.date(2024, 1, 2) - dt.date(1970, 1, 1)).days
    assert row["ts"] == 1704164645123  # io.debezium.time.Timestamp: epoch millis
    assert row["us"] == 1704164645123456  # MicroTimestamp
    assert row["price"] == "1.50"
    assert row["raw"] == "AP8="


def test_reader_accepts_debezium_forms() -> None:
    full_update = {"payload": {"before": {"id": 1}, "after": {"id": 1, "x": 2}, "op": "u"}}
    assert decode_envelope(full_update) == [(1, {"id": 1}), (2, {"id": 1, "x": 2})]
    assert decode_envelope(b'{"op":"r","after":{"id":7},"before":null}') == [(0, {"id": 7})]
    with pytest.raises(ValueError, match="op"):
        decode_envelope(b'{"hello": 1}')


def test_keys_are_the_primary_key_as_json() -> None:
    keys = encode_keys(sample(), ["id", "name"])
    assert keys is not None
    assert json.loads(keys[1]) == {"id": 2, "name": 'quote " and \\ back'}
    assert encode_keys(sample(), []) is None


def test_missing_fields_decode_as_null() -> None:
    values = [b'{"before":null,"after":{"id":1},"op":"c"}']
    decoded, _ = decode_values(values, pa.schema([("id", pa.int64()), ("added", pa.string())]))
    assert decoded.to_pylist() == [{"id": 1, "added": None}]


def test_with_row_kinds() -> None:
    t = with_row_kinds(pa.table({"a": [1, 2]}), np.array([3, 0], dtype=np.int8))
    assert t.column("_ROW_KIND").to_pylist() == ["-D", "+I"]


# -- options ------------------------------------------------------------------------------------
def _table(catalog: strata.Catalog, name: str, pk: bool = True, **options: str) -> strata.Table:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    opts = {"bucket": "2", "log.system": "kafka", "log.kafka.bootstrap-servers": "127.0.0.1:1", **options}
    if not pk:
        opts["bucket-key"] = "id"
    return catalog.create_table(f"db.{name}", schema, primary_keys=["id"] if pk else None, options=opts)


def test_options_resolve(catalog: strata.Catalog) -> None:
    opts = log_options(_table(catalog, "t", **{"log.kafka.linger.ms": "1"}))
    assert opts.topic == "strata-db-t" and opts.partitions == 2 and opts.transactional
    assert opts.changelog_mode == "all" and opts.key_fields == ("id",)
    assert opts.client == {"linger.ms": "1"}
    assert opts.transactional_id("user-1") == opts.transactional_id("user-1") != opts.transactional_id("user-2")
    eventual = log_options(_table(catalog, "e", **{"log.consistency": "eventual"}))
    assert eventual.changelog_mode == "upsert"
    append = log_options(_table(catalog, "a", pk=False))
    assert append.key_fields == ("id",)


def test_eventual_needs_a_primary_key(catalog: strata.Catalog) -> None:
    table = _table(catalog, "a", pk=False, **{"log.consistency": "eventual"})
    with pytest.raises(OptionError, match="primary key"):
        log_options(table)


def test_unknown_log_option_values_are_rejected(catalog: strata.Catalog) -> None:
    with pytest.raises(OptionError, match=r"log\.changelog-mode"):
        _table(catalog, "bad", **{"log.changelog-mode": "sometimes"})


# -- offsets in snapshot properties ---------------------------------------------------------------
def test_merge_offsets_keeps_the_maximum() -> None:
    assert merge_offsets({0: 5, 1: 3}, {1: 2, 2: 9}) == {0: 5, 1: 3, 2: 9}


def _commit_with_offsets(table: strata.Table, rows: pa.Table, offsets: dict[int, int] | None) -> None:
    writer = table.new_write()
    writer._log_enabled = False  # no broker here: attach a committable by hand
    writer.write_arrow(rows)
    messages = writer.prepare_commit()
    if offsets is not None:
        committable = LogCommittable("127.0.0.1:1", "t", offsets, None)
        for m in messages:
            m.log = committable
    table.new_commit().commit(messages)
    writer.close()


def test_snapshots_record_and_carry_forward_log_offsets(catalog: strata.Catalog) -> None:
    table = _table(catalog, "t")
    _commit_with_offsets(table, pa.table({"id": [1, 2], "v": ["a", "b"]}), {0: 5})
    assert json.loads(table.latest_snapshot().properties[LOG_OFFSETS_PROPERTY]) == {"0": 5}
    _commit_with_offsets(table, pa.table({"id": [3], "v": ["c"]}), {1: 3})
    assert snapshot_log_offsets(table.latest_snapshot()) == {0: 5, 1: 3}
    # a commit without log records (e.g. compaction) carries the offsets forward
    table.compact(full=True)
    latest = table.latest_snapshot()
    assert latest.commit_kind == "COMPACT"
    assert snapshot_log_offsets(latest) == {0: 5, 1: 3}
    assert snapshot_log_offsets(table.snapshot_manager.snapshot(1)) == {0: 5}


def test_log_commit_builds_properties_on_the_latest_snapshot() -> None:
    commit = LogCommit([LogCommittable("b", "t", {0: 10}, None), LogCommittable("b", "t", {1: 4, 0: 7}, None)])
    assert commit.offsets == {0: 10, 1: 4}
    props = commit.snapshot_properties(None, {"user": "x"})
    assert props == {"user": "x", LOG_OFFSETS_PROPERTY: '{"0":10,"1":4}'}


def test_tables_without_log_have_no_offsets(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.plain", pa.schema([("id", pa.int64())]), primary_keys=["id"],
                                 options={"bucket": "1"})
    table.write(pa.table({"id": [1]}))
    assert snapshot_log_offsets(table.latest_snapshot()) == {}
    assert table.latest_snapshot().properties is None
