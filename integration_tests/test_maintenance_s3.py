"""Table maintenance on real object storage (MinIO): snapshot expiry, tags, rollback, orphan file
removal, consumers and partition expiry through S3FileIO, with a JDBC (PostgreSQL) catalog whose
commits publish under the lock."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest

import strata
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

pytestmark = [pytest.mark.minio, pytest.mark.postgres]

SCHEMA = pa.schema([("dt", pa.string()), ("id", pa.int32()), ("v", pa.int64())])


def batch(dt: str, ids: list[int], v: int) -> pa.Table:
    return pa.table({"dt": [dt] * len(ids), "id": pa.array(ids, pa.int32()), "v": pa.array([v] * len(ids), pa.int64())},
                    schema=SCHEMA)


def rows(table: strata.Table, **at: object) -> list[tuple]:
    data = table.to_arrow(**at)  # type: ignore[arg-type]
    return sorted(zip(*(data.column(c).to_pylist() for c in ("dt", "id", "v")), strict=True))


@pytest.fixture
def catalog(minio: Service, postgres: Service) -> Iterator[strata.Catalog]:
    env = minio.client_env()
    options = {"metastore": "jdbc", "uri": postgres.client_env()["STRATA_PG_DSN"],
               "catalog-key": f"mt_{uuid.uuid4().hex[:10]}", "s3.conditional-put": "false",
               "commit.lock-free": "false", "s3.endpoint": env["AWS_ENDPOINT_URL"],
               "s3.access-key": env["AWS_ACCESS_KEY_ID"], "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"],
               "s3.region": env["AWS_REGION"]}
    warehouse = f"s3://warehouse/it-maint-{uuid.uuid4().hex[:10]}"
    cat = strata.load_catalog(warehouse, **options)
    cat.create_database("db")
    yield cat
    S3FileIO(options).delete_dir(warehouse)


def data_files(table: strata.Table) -> set[str]:
    """Every data file under the table's partition directories, by listing the bucket."""
    io = table.file_io
    out = set()
    for part in io.list_status(table.path):
        if part.is_dir and "=" in part.path.rsplit("/", 1)[-1]:
            for bucket in io.list_status(part.path):
                out.update(s.path for s in io.list_status(bucket.path) if not s.is_dir)
    return out


def test_expiry_tags_rollback_orphans_on_minio(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                 options={"bucket": "1", "write-only": "true"})
    for i in range(1, 9):
        table.write(batch("a" if i % 2 else "b", [i % 3, i], i))
        if i == 5:
            table.compact(full=True)
    latest = table.snapshot_manager.latest_id()
    state = {s.id: rows(table, snapshot_id=s.id) for s in table.snapshots()}
    table.create_tag("t3", 3)
    files_before = data_files(table)

    result = table.expire_snapshots(retain_min=2, time_retained=0)
    assert result.expired == list(range(1, latest - 1)) and result.data_files_deleted > 0
    assert [s.id for s in table.snapshots()] == [latest - 1, latest]
    for sid in (latest - 1, latest):
        assert rows(table, snapshot_id=sid) == state[sid]
    assert rows(table, tag="t3") == state[3]
    assert data_files(table) < files_before
    assert table.remove_orphan_files(older_than="0 ms", dry_run=True).deleted == []  # nothing left over

    # rollback over S3, then the table goes on
    table.rollback_to(latest - 1)
    assert rows(table) == state[latest - 1]
    table.write(batch("a", [42], 42))
    assert ("a", 42, 42) in rows(table)

    # orphans: an uncommitted write's files are kept by the default guard, removed by a zero one
    with table.new_write() as writer:
        writer.write_arrow(batch("c", [7], 7))
        pending = writer.prepare_commit()
    assert table.remove_orphan_files().deleted == []
    removed = table.remove_orphan_files(older_than="0 ms").deleted
    assert {p.rsplit("/", 1)[-1] for p in removed} == {f.file_name for m in pending for f in m.new_files}
    assert ("a", 42, 42) in rows(table) and rows(table, tag="t3") == state[3]

    # deleting the tag frees the files only it kept
    before = data_files(table)
    assert table.delete_tag("t3")
    assert data_files(table) < before
    assert table.remove_orphan_files(older_than="0 ms", dry_run=True).deleted == []


def test_consumers_and_partition_expiry_on_minio(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.p", SCHEMA, partition_keys=["dt"], options={"write-only": "true"})
    for i, dt in enumerate(["2020-01-01", "2020-01-02", "2999-01-01", "2999-01-02"]):
        table.write(batch(dt, [i], i))
    table.reset_consumer("etl", 2)
    assert table.expire_snapshots(retain_min=1, time_retained=0).expired == [1]  # the consumer keeps 2
    assert table.consumers.expire(0) == ["etl"]  # last touched before now
    assert table.expire_snapshots(retain_min=1, time_retained=0).expired == [2, 3]
    assert table.expire_partitions("1 d") == [{"dt": "2020-01-01"}, {"dt": "2020-01-02"}]
    assert sorted(set(table.to_arrow().column("dt").to_pylist())) == ["2999-01-01", "2999-01-02"]
