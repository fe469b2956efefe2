"""Tables on real object storage (MinIO): the engine's table operations through S3FileIO, the
conditional-PUT publish under a race, and the same table tests on a local warehouse for contrast."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.errors import SnapshotNotFoundError, TableNotFoundError
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

pytestmark = pytest.mark.minio

KV = pa.schema([("id", pa.int64()), ("dt", pa.string()), ("v", pa.string())])


def s3_options(minio: Service) -> dict[str, str]:
    env = minio.client_env()
    return {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
            "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"]}


@pytest.fixture
def s3_prefix(minio: Service) -> Iterator[str]:
    """A fresh s3://warehouse/<unique> prefix, removed afterwards."""
    prefix = f"s3://warehouse/it-{uuid.uuid4().hex[:12]}"
    yield prefix
    S3FileIO(s3_options(minio)).delete_dir(prefix)


@pytest.fixture(params=["local", "s3"])
def catalog(request: pytest.FixtureRequest, tmp_path: Any) -> strata.Catalog:
    if request.param == "local":
        cat = strata.load_catalog(str(tmp_path / "warehouse"))
    else:
        minio = request.getfixturevalue("minio")
        cat = strata.load_catalog(request.getfixturevalue("s3_prefix"), **s3_options(minio))
    cat.create_database("db")
    return cat


def kv(ids: Any, dt: str = "a", tag: str = "v") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "dt": [dt] * len(ids), "v": [f"{tag}{i}" for i in ids]},
                    schema=KV)


def state(table: strata.Table | pa.Table, **kw: Any) -> dict[tuple[int, str], str]:
    data = table if isinstance(table, pa.Table) else table.to_arrow(**kw)
    return {(r["id"], r["dt"]): r["v"] for r in data.to_pylist()}


# -- the engine's table operations, local and on MinIO ------------------------------------------------

def test_pk_table_upsert_delete_time_travel(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.pk", KV, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "2"})
    table.write(pa.concat_tables([kv(range(6), "a"), kv(range(3), "b")]))
    time.sleep(0.005)
    table.write(kv([1, 4, 7], "a", tag="u"))  # upsert
    time.sleep(0.005)
    table.delete(kv([0, 7], "a"))
    s1 = {**{(i, "a"): f"v{i}" for i in range(6)}, **{(i, "b"): f"v{i}" for i in range(3)}}
    s2 = {**s1, (1, "a"): "u1", (4, "a"): "u4", (7, "a"): "u7"}
    s3 = {k: v for k, v in s2.items() if k not in ((0, "a"), (7, "a"))}
    assert state(table) == s3
    for sid, expected in ((1, s1), (2, s2), (3, s3)):
        assert state(table, snapshot_id=sid) == expected
        ts = table.snapshot_manager.snapshot(sid).time_millis
        assert state(table, timestamp_millis=ts) == expected
    assert [s.id for s in table.snapshots()] == [1, 2, 3]
    assert table.latest_snapshot().total_record_count == 9 + 3 + 2  # delete records count as rows in files
    with pytest.raises(SnapshotNotFoundError):
        table.to_arrow(snapshot_id=9)
    # a reopened table (new catalog object) sees the same
    assert state(catalog.get_table("db.pk")) == s3


def test_append_table_and_partition_filter(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.log", KV, partition_keys=["dt"])
    table.write(kv(range(100), "a"))
    table.write(kv(range(50), "b"))
    table.write(kv(range(100, 110), "a"))
    assert table.to_arrow().num_rows == 160
    assert table.to_arrow(filter=strata.col("dt") == "b").num_rows == 50
    assert sorted(table.to_arrow(filter=strata.col("id") >= 105).column("id").to_pylist()) == list(range(105, 110))
    assert table.read_incremental(2, 3).num_rows == 10


def test_overwrite_partition_and_read_incremental(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.o", KV, partition_keys=["dt"], primary_keys=["id", "dt"],
                                 options={"bucket": "1"})
    table.write(pa.concat_tables([kv(range(4), "a"), kv(range(4), "b")]))
    table.write(kv([9], "a", tag="n"), mode="overwrite", partition={"dt": "a"})
    assert state(table) == {(9, "a"): "n9", **{(i, "b"): f"v{i}" for i in range(4)}}
    assert table.latest_snapshot().commit_kind == "OVERWRITE"
    assert state(table, snapshot_id=1) == {**{(i, "a"): f"v{i}" for i in range(4)},
                                          **{(i, "b"): f"v{i}" for i in range(4)}}


def test_catalog_listing_and_drop(catalog: strata.Catalog) -> None:
    catalog.create_database("empty")
    catalog.create_table("db.t1", KV)
    catalog.create_table("db.t2", KV, primary_keys=["id"], options={"bucket": "1"}).write(kv([1]))
    assert catalog.list_databases() == ["db", "empty"]
    assert catalog.list_tables("db") == ["t1", "t2"]
    assert catalog.list_tables("empty") == []
    catalog.drop_table("db.t2")
    assert catalog.list_tables("db") == ["t1"]
    with pytest.raises(TableNotFoundError):
        catalog.get_table("db.t2")
    catalog.drop_database("db", cascade=True)
    catalog.drop_database("empty")
    assert catalog.list_databases() == []


def test_files_really_are_in_the_bucket(minio: Service, s3_prefix: str) -> None:
    catalog = strata.load_catalog(s3_prefix, **s3_options(minio))
    catalog.create_database("db")
    table = catalog.create_table("db.t", KV, primary_keys=["id"], options={"bucket": "2"})
    table.write(kv(range(10)))
    io = S3FileIO(s3_options(minio))
    names = {s.path.rsplit("/", 1)[-1] for s in io.list_status(f"{s3_prefix}/db.db/t")}
    assert {"schema", "snapshot", "manifest", "bucket-0", "bucket-1"} <= names
    snapshot_dir = {s.path.rsplit("/", 1)[-1] for s in io.list_status(f"{s3_prefix}/db.db/t/snapshot")}
    assert snapshot_dir == {"snapshot-1", "LATEST", "EARLIEST"}
    data_files = io.list_status(f"{s3_prefix}/db.db/t/bucket-0")
    assert data_files and all(s.path.endswith(".parquet") and s.size > 0 for s in data_files)


def test_configuration_from_environment_only(minio: Service, s3_prefix: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in minio.client_env().items():
        monkeypatch.setenv(key, value)
    catalog = strata.load_catalog(s3_prefix)
    catalog.create_database("db")
    table = catalog.create_table("db.t", KV)
    table.write(kv(range(3)))
    assert table.to_arrow().num_rows == 3


# -- S3FileIO semantics -------------------------------------------------------------------------------

def test_write_new_never_overwrites(minio: Service, s3_prefix: str) -> None:
    io = S3FileIO(s3_options(minio))
    assert io.conditional_put_supported(f"{s3_prefix}/x"), "the provisioned MinIO honours If-None-Match:*"
    path = f"{s3_prefix}/snapshot/snapshot-1"
    assert io.write_new(path, b"first")
    assert not io.write_new(path, b"second")
    assert io.read_bytes(path) == b"first"
    io.write_bytes(f"{s3_prefix}/plain", b"p")
    assert not io.write_new(f"{s3_prefix}/plain", b"q")
    assert io.read_bytes(f"{s3_prefix}/plain") == b"p"
    # no probe object is left behind
    assert [s.path.rsplit("/", 1)[-1] for s in io.list_status(s3_prefix) if not s.is_dir] == ["plain"]


@pytest.mark.parametrize("round_", range(3))
def test_write_new_race_on_minio_has_exactly_one_winner(minio: Service, s3_prefix: str, round_: int) -> None:
    n = 12
    ios = [S3FileIO(s3_options(minio)) for _ in range(n)]  # separate clients, as separate writers
    path = f"{s3_prefix}/snapshot/snapshot-{round_ + 1}"
    barrier = threading.Barrier(n)

    def attempt(i: int) -> bool:
        barrier.wait()
        return ios[i].write_new(path, f"writer-{i}".encode() * 4096)

    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(attempt, range(n)))
    assert results.count(True) == 1, results
    assert ios[0].read_bytes(path) == f"writer-{results.index(True)}".encode() * 4096


def test_lost_response_of_a_conditional_put_is_recognised(minio: Service, s3_prefix: str) -> None:
    """The first PUT lands but its response is 'lost' (botocore retries): the retry's 412 is ours."""
    io = S3FileIO(s3_options(minio))
    io.conditional_put_supported(s3_prefix + "/x")
    forced: list[int] = []

    def lose_first_response(attempts: int, response: Any, **_: Any) -> int | None:
        if not forced and response is not None and response[1].get("ResponseMetadata", {}).get(
                "HTTPStatusCode") == 200:
            forced.append(attempts)
            return 0  # "retry after 0 s", as if the connection had dropped after the PUT
        return None

    io._client.meta.events.register_first("needs-retry.s3.PutObject", lose_first_response)
    path = f"{s3_prefix}/snapshot/snapshot-1"
    assert io.write_new(path, b"ours")
    assert forced == [1]
    assert not io.write_new(path, b"ours")  # not a retry: an identical existing object is not ours
    other = f"{s3_prefix}/snapshot/snapshot-2"
    S3FileIO(s3_options(minio)).write_bytes(other, b"theirs")
    forced.clear()
    assert not io.write_new(other, b"ours")  # 412 without a retry: exists


def test_check_then_put_fallback_and_listing_pages(minio: Service, s3_prefix: str) -> None:
    io = S3FileIO({**s3_options(minio), "s3.conditional-put": "false"})
    assert not io.conditional_put_supported(s3_prefix)
    assert io.write_new(f"{s3_prefix}/a", b"1") and not io.write_new(f"{s3_prefix}/a", b"2")
    assert io.read_bytes(f"{s3_prefix}/a") == b"1"
    for i in range(23):
        io.write_bytes(f"{s3_prefix}/many/f{i:03d}", b"x" * i)
    for d in ("d1", "d2"):
        io.write_bytes(f"{s3_prefix}/many/{d}/inner", b"y")
    io.mkdirs(f"{s3_prefix}/many/empty")
    io.list_page_size = 5
    listed = io.list_status(f"{s3_prefix}/many")
    files = sorted((s.path.rsplit("/", 1)[-1], s.size) for s in listed if not s.is_dir)
    assert files == [(f"f{i:03d}", i) for i in range(23)]
    assert sorted(s.path.rsplit("/", 1)[-1] for s in listed if s.is_dir) == ["d1", "d2", "empty"]
    assert all(s.path.startswith(f"{s3_prefix}/many/") for s in listed)
    assert io.list_status(f"{s3_prefix}/many/empty") == []
    assert io.exists(f"{s3_prefix}/many/empty") and io.exists(f"{s3_prefix}/many/d1")
    assert not io.exists(f"{s3_prefix}/many/nope") and not io.exists(f"{s3_prefix}/many/f00")
    assert io.file_size(f"{s3_prefix}/many/f022") == 22
    with pytest.raises(FileNotFoundError):
        io.read_bytes(f"{s3_prefix}/missing")
    with pytest.raises(FileNotFoundError):
        io.file_size(f"{s3_prefix}/missing")
    io.delete(f"{s3_prefix}/missing")  # no error
    io.delete_dir(f"{s3_prefix}/many")
    assert io.list_status(f"{s3_prefix}/many") == [] and not io.exists(f"{s3_prefix}/many")


def test_s3_file_io_pickles_by_options(minio: Service, s3_prefix: str) -> None:
    import pickle

    io = S3FileIO(s3_options(minio))
    io.write_bytes(f"{s3_prefix}/p", b"pickled")
    clone = pickle.loads(pickle.dumps(io))
    assert clone.read_bytes(f"{s3_prefix}/p") == b"pickled"
