"""Streaming reads and idempotent ``foreachBatch`` writes of Strata tables in a real local Spark.

Reads: the ``compacted-full`` start, ``scan.bounded.watermark`` and the per-micro-batch read
limits (records and files). Writes: ``strata.spark.upsert_batch`` / ``batch_writer`` commit a
batch once per (commit user, batch id), upsert and delete by key, and skip a replayed batch,
called directly and from a restarted query whose commit marker was lost; ``delete_batch`` /
``batch_deleter`` delete the rows a batch of keys names, marking them in deletion vectors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import strata
from strata.errors import OptionError
from strata.spark import batch_deleter, batch_writer, delete_batch, upsert_batch
from strata.spark.options import commit_user_for_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

Warehouse: TypeAlias = strata.FileSystemCatalog  # a catalog with a warehouse path, for data source URIs
EVENTS = pa.schema([("id", pa.int64()), ("snap", pa.int32()), ("v", pa.string())])


def uri(catalog: Warehouse, name: str) -> str:
    return f"{catalog.warehouse}#{name}"


def events(snap: int, ids: range) -> pa.Table:
    return pa.table({"id": list(ids), "snap": [snap] * len(ids), "v": [f"s{snap}"] * len(ids)}, schema=EVENTS)


def commit(table: strata.Table, snap: int, ids: range, watermark: int | None = None) -> None:
    """One APPEND snapshot, with a watermark if given (TableCommit.commit's `watermark`)."""
    with table.new_write() as writer:
        writer.write_arrow(events(snap, ids))
        messages = writer.prepare_commit()
    table.new_commit().commit(messages, watermark=watermark)


def read_batches(session: SparkSession, source: str, checkpoint: str | None = None,
                 **options: str) -> list[list[tuple[int, int]]]:
    """(snap, id) rows of each non-empty micro-batch of an AvailableNow streaming read."""
    got: dict[int, list[tuple[int, int]]] = {}

    def collect(df: DataFrame, batch_id: int) -> None:
        got[batch_id] = sorted((r["snap"], r["id"]) for r in df.collect())

    writer = session.readStream.format("strata").options(**options).load(source).writeStream.foreachBatch(collect)
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None
    return [rows for _, rows in sorted(got.items()) if rows]


# -- streaming reads -------------------------------------------------------------------------------
def test_compacted_full_starts_from_the_latest_compaction(session: SparkSession, catalog: Warehouse) -> None:
    table = catalog.create_table("db.t", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    source = uri(catalog, "db.t")
    commit(table, 1, range(0, 10))
    # never compacted: compacted-full starts like latest-full, from the latest snapshot
    assert read_batches(session, source, **{"scan.mode": "compacted-full"}) == [[(1, i) for i in range(10)]]

    commit(table, 2, range(10, 20))
    table.compact(full=True)  # snapshot 3
    assert [s.commit_kind for s in table.snapshots()] == ["APPEND", "APPEND", "COMPACT"]
    commit(table, 4, range(20, 25))
    commit(table, 5, range(5, 8))  # updates keys of the compacted base
    one_snapshot_each = {"max-rows-per-trigger": "1"}
    compacted = read_batches(session, source, **{"scan.mode": "compacted-full"}, **one_snapshot_each)
    base = sorted([(1, i) for i in range(10)] + [(2, i) for i in range(10, 20)])
    assert compacted == [base, [(4, i) for i in range(20, 25)], [(5, i) for i in range(5, 8)]]
    # latest-full starts from snapshot 5 instead: its whole content in one batch
    latest = read_batches(session, source, **one_snapshot_each)
    assert latest == [sorted([(1, i) for i in (*range(0, 5), *range(8, 10))] + [(5, i) for i in range(5, 8)]
                             + [(2, i) for i in range(10, 20)] + [(4, i) for i in range(20, 25)])]


def test_bounded_watermark_ends_the_stream(session: SparkSession, catalog: Warehouse, tmp_path: Path) -> None:
    table = catalog.create_table("db.t", EVENTS)
    source = uri(catalog, "db.t")
    commit(table, 1, range(0, 5))  # no watermark: never ends the stream
    commit(table, 2, range(5, 10), watermark=1000)
    commit(table, 3, range(10, 15), watermark=2000)  # == the bound: not past it
    commit(table, 4, range(15, 20), watermark=2001)  # past the bound: the stream ends before it
    commit(table, 5, range(20, 25), watermark=1500)
    assert [s.watermark for s in table.snapshots()] == [None, 1000, 2000, 2001, 1500]

    bounded = {"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "scan.bounded.watermark": "2000"}
    checkpoint = str(tmp_path / "ck")
    batches = read_batches(session, source, checkpoint, **bounded)
    assert sorted(row for rows in batches for row in rows) == [(s, i) for s in (1, 2, 3)
                                                              for i in range(s * 5 - 5, s * 5)]
    # the ended stream stays ended when its query restarts, whatever comes later
    commit(table, 6, range(25, 30), watermark=10)
    assert read_batches(session, source, checkpoint, **bounded) == []
    # with admission control the bound still holds, batch by batch
    limited = read_batches(session, source, **bounded, **{"max-rows-per-trigger": "5"})
    assert [sorted({s for s, _ in rows}) for rows in limited] == [[1], [2], [3]]
    # a full start reads its base snapshot whole even past the bound, then ends
    assert len(read_batches(session, source, **{"scan.bounded.watermark": "0"})[0]) == 30
    with pytest.raises(Exception, match=r"scan\.bounded\.watermark.*integer"):
        read_batches(session, source, **{"scan.bounded.watermark": "soon"})


def test_read_limits_per_micro_batch(session: SparkSession, catalog: Warehouse) -> None:
    table = catalog.create_table("db.t", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    source = uri(catalog, "db.t")
    for snap, size in ((1, 40), (2, 30), (3, 10)):  # every commit writes one file per bucket
        commit(table, snap, range(snap * 100, snap * 100 + size))

    def snaps_per_batch(**options: str) -> list[list[int]]:
        batches = read_batches(session, source, **{"scan.mode": "from-snapshot", "scan.snapshot-id": "1"}, **options)
        return [sorted({s for s, _ in rows}) for rows in batches]

    # at most N records / files per batch, whole snapshots, at least one snapshot per batch
    assert snaps_per_batch(**{"max-rows-per-trigger": "70"}) == [[1, 2], [3]]
    assert snaps_per_batch(**{"max-rows-per-trigger": "69"}) == [[1], [2, 3]]
    assert snaps_per_batch(**{"max-rows-per-trigger": "5"}) == [[1], [2], [3]]
    assert snaps_per_batch(**{"max-files-per-trigger": "4"}) == [[1, 2], [3]]
    assert snaps_per_batch(**{"max-files-per-trigger": "3"}) == [[1], [2], [3]]
    assert snaps_per_batch(**{"read.stream.maxFilesPerTrigger": "6"}) == [[1, 2, 3]]  # Paimon's name
    assert snaps_per_batch(**{"max-files-per-trigger": "4", "max-rows-per-trigger": "50"}) == [[1], [2, 3]]
    # a full start: the base snapshot counts all its files (6 here)
    assert len(read_batches(session, source, **{"max-files-per-trigger": "1"})) == 1
    with pytest.raises(Exception, match=r"max-files-per-trigger.*at least 1"):
        snaps_per_batch(**{"max-files-per-trigger": "0"})


# -- foreachBatch ----------------------------------------------------------------------------------
def test_upsert_batch_is_idempotent_and_deletes_by_row_kind(session: SparkSession, catalog: Warehouse) -> None:
    table = catalog.create_table("db.pk", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    target = uri(catalog, "db.pk")

    def batch(rows: list[tuple[int, int, str, str]]) -> DataFrame:
        return session.createDataFrame(rows, "id bigint, snap int, v string, op string")

    first = batch([(i, 0, f"a{i}", "U") for i in range(10)])
    assert upsert_batch(first.drop("op"), 0, target, commit_user="job")
    # a replay of batch 0, even with other rows, is skipped before any task runs
    assert not upsert_batch(batch([(99, 0, "x", "U")]).drop("op"), 0, target, commit_user="job")
    assert sorted(table.to_arrow().column("id").to_pylist()) == list(range(10))

    # MERGE-like: upserts and deletes from a condition; the column driving it is not written
    merge = batch([(1, 1, "b1", "U"), (2, 1, "", "D"), (3, 1, "", "D"), (10, 1, "b10", "U")])
    assert upsert_batch(merge, 1, target, commit_user="job", delete_when="op = 'D'", extra_columns=["op"])
    rows = {r["id"]: r["v"] for r in table.to_arrow().to_pylist()}
    assert sorted(rows) == [0, 1, 4, 5, 6, 7, 8, 9, 10] and rows[1] == "b1" and rows[10] == "b10"
    # a row-kind column
    kinds = batch([(4, 2, "", "-D"), (5, 2, "c5", "+U")]).withColumnRenamed("op", "kind")
    assert upsert_batch(kinds, 2, target, commit_user="job", row_kind_column="kind")
    rows = {r["id"]: r["v"] for r in table.to_arrow().to_pylist()}
    assert 4 not in rows and rows[5] == "c5"
    snaps = table.snapshots()
    assert [(s.commit_user, s.commit_identifier) for s in snaps] == [("job", 0), ("job", 1), ("job", 2)]

    # a batch older than the last committed one means a lost checkpoint: refused
    with pytest.raises(OptionError, match="checkpoint was deleted or replaced"):
        upsert_batch(first.drop("op"), 1, target, commit_user="job")
    # deletes need a primary key; bad settings name what is wrong
    catalog.create_table("db.log", EVENTS)
    with pytest.raises(OptionError, match="need a primary-key table"):
        upsert_batch(merge, 0, uri(catalog, "db.log"), commit_user="job", delete_when="op = 'D'",
                     extra_columns=["op"])
    with pytest.raises(OptionError, match="checkpoint_location or a commit_user"):
        batch_writer(target)
    with pytest.raises(OptionError, match=r"extra_columns \['nope'\]"):
        upsert_batch(merge, 3, target, commit_user="job", extra_columns=["nope"])
    with pytest.raises(OptionError, match="row_kind_column 'kind'"):
        upsert_batch(merge, 3, target, commit_user="job", row_kind_column="kind")
    assert len(table.snapshots()) == 3


def test_batch_writer_in_a_restarted_query_skips_the_replayed_batch(session: SparkSession, catalog: Warehouse,
                                                                     tmp_path: Path) -> None:
    # an aggregation table: a batch applied twice would double its sums
    table = catalog.create_table("db.agg", pa.schema([("k", pa.int64()), ("total", pa.int64())]),
                                 primary_keys=["k"],
                                 options={"bucket": "1", "merge-engine": "aggregation",
                                          "fields.total.aggregate-function": "sum"})
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    for n in range(3):
        path = source_dir / f"part-{n}.parquet"
        pq.write_table(pa.table({"k": [n % 2, 2], "total": [10 ** n, 1]}), path)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    checkpoint = str(tmp_path / "ck")
    write = batch_writer(uri(catalog, "db.agg"), checkpoint_location=checkpoint)

    def run() -> Any:
        stream = (session.readStream.schema("k bigint, total bigint").option("maxFilesPerTrigger", 1)
                  .parquet(str(source_dir)))
        query = (stream.writeStream.foreachBatch(write).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        return query

    assert [p["batchId"] for p in run().recentProgress] == [0, 1, 2]
    expected = [{"k": 0, "total": 101}, {"k": 1, "total": 10}, {"k": 2, "total": 3}]
    assert table.to_arrow().sort_by("k").to_pylist() == expected
    # the batch's commit marker is lost: Spark runs batch 2 again, the helper skips it
    os.remove(f"{checkpoint}/commits/2")
    os.remove(f"{checkpoint}/commits/.2.crc")
    assert [p["batchId"] for p in run().recentProgress] == [2]
    assert table.to_arrow().sort_by("k").to_pylist() == expected
    snaps = table.snapshots()
    # the sink's identity: commit user from the checkpoint location, identifier = batch id
    assert [(s.commit_user, s.commit_identifier) for s in snaps] == [
        (commit_user_for_checkpoint(checkpoint), b) for b in range(3)]


def test_batch_deleter_marks_rows_of_an_append_table_exactly_once(session: SparkSession, catalog: Warehouse,
                                                                   tmp_path: Path) -> None:
    """A stream of ids to delete, on an append table with deletion vectors: rows are marked in
    place (no data file rewritten), and a replayed batch is skipped; a replay would delete the
    row written again after it."""
    table = catalog.create_table("db.events", EVENTS, options={"bucket": "-1", "deletion-vectors.enabled": "true"})
    for snap in range(2):
        table.write(events(snap, range(snap * 100, snap * 100 + 100)))
    files_before = {f.file_name for s in table.scan() for f in s.files}
    source_dir = tmp_path / "deletes"
    source_dir.mkdir()
    for n, ids in enumerate(([5, 6, 150], [7, 7, 999], [150, 160])):
        path = source_dir / f"part-{n}.parquet"
        pq.write_table(pa.table({"id": pa.array(ids, pa.int64()), "reason": ["gdpr"] * len(ids)}), path)
        os.utime(path, (1_000_000 + n, 1_000_000 + n))
    checkpoint = str(tmp_path / "ck")
    delete = batch_deleter(uri(catalog, "db.events"), on=["id"], checkpoint_location=checkpoint)

    def run() -> Any:
        stream = session.readStream.schema("id bigint, reason string").option("maxFilesPerTrigger", 1)
        query = (stream.parquet(str(source_dir)).writeStream.foreachBatch(delete)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        return query

    assert [p["batchId"] for p in run().recentProgress] == [0, 1, 2]
    expected = sorted(set(range(200)) - {5, 6, 7, 150, 160})
    assert sorted(table.to_arrow().column("id").to_pylist()) == expected
    assert {f.file_name for s in table.scan() for f in s.files} == files_before  # marked, not rewritten
    assert sum(d.cardinality or 0 for s in table.scan() for d in (s.deletion_files or {}).values()) == 5
    table.write(events(9, range(160, 161)))  # 160 comes back
    os.remove(f"{checkpoint}/commits/2")
    os.remove(f"{checkpoint}/commits/.2.crc")
    assert [p["batchId"] for p in run().recentProgress] == [2]
    assert sorted(table.to_arrow().column("id").to_pylist()) == sorted([*expected, 160])
    user = commit_user_for_checkpoint(checkpoint)
    assert [(s.commit_user, s.commit_identifier) for s in table.snapshots()][2:5] == [(user, b) for b in range(3)]


def test_delete_batch_on_a_primary_key_table_and_its_errors(session: SparkSession, catalog: Warehouse) -> None:
    table = catalog.create_table("db.pk", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    table.write(events(0, range(20)))
    target = uri(catalog, "db.pk")
    keys = session.createDataFrame([(3, "a"), (4, "b"), (4, "c"), (99, "d")], "id bigint, why string")
    assert delete_batch(keys, 0, target, on=["id"], commit_user="gdpr")
    assert not delete_batch(keys.limit(0), 0, target, on=["id"], commit_user="gdpr")  # a replay
    assert sorted(table.to_arrow().column("id").to_pylist()) == sorted(set(range(20)) - {3, 4})
    with pytest.raises(OptionError, match=r"missing in the batch: \['v'\]"):
        delete_batch(keys, 1, target, on=["v"], commit_user="gdpr")
    with pytest.raises(OptionError, match=r"unknown to the table: \['why'\]"):
        delete_batch(keys, 1, target, on=["why"], commit_user="gdpr")
    append = catalog.create_table("db.plain", EVENTS)
    with pytest.raises(ValueError, match="needs deletion vectors"):
        delete_batch(keys, 0, uri(catalog, "db.plain"), on=["id"], commit_user="gdpr")
    assert append.snapshots() == []
