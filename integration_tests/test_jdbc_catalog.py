"""The JDBC catalog and its distributed lock, on PostgreSQL (the provisioned server) and SQLite."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from sqlalchemy import Engine, create_engine, inspect, text

import strata
from strata.catalog.jdbc import JdbcCatalog, LocationConflictError, sqlalchemy_url
from strata.catalog.lock import LOCK_TABLE, JdbcCatalogLock, JdbcLock, LockAcquireTimeoutError, ensure_lock_table
from strata.errors import (
    DatabaseNotEmptyError,
    DatabaseNotFoundError,
    InvalidNameError,
    OptionError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from strata.fs.s3 import S3FileIO
from strata_platform.services.base import Service

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(ids: Any, tag: str = "v") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


@pytest.fixture(params=[pytest.param("sqlite", marks=pytest.mark.sqlite),
                        pytest.param("postgres", marks=pytest.mark.postgres)])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'meta' / 'catalog.sqlite'}"
    dsn = request.getfixturevalue("postgres").client_env()["STRATA_PG_DSN"]
    return dsn.replace("postgresql://", "jdbc:postgresql://")


@pytest.fixture
def catalog(uri: str, tmp_path: Path) -> Iterator[JdbcCatalog]:
    (tmp_path / "meta").mkdir(exist_ok=True)
    # a unique catalog key isolates this test's rows in the shared PostgreSQL database
    cat = strata.load_catalog(str(tmp_path / "warehouse"), metastore="jdbc", uri=uri,
                              **{"catalog-key": f"it_{uuid.uuid4().hex[:10]}"})
    assert isinstance(cat, JdbcCatalog)
    yield cat
    cat.close()


@pytest.fixture
def engine(catalog: JdbcCatalog) -> Engine:
    return catalog.engine


# -- the catalog ------------------------------------------------------------------------------------

def test_create_list_drop_tables(catalog: JdbcCatalog, tmp_path: Path) -> None:
    assert catalog.list_databases() == []
    catalog.create_database("db")
    catalog.create_database("other")
    catalog.create_database("db", ignore_if_exists=True)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_database("db")
    assert catalog.list_databases() == ["db", "other"]

    pk = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    catalog.create_table("db.log", SCHEMA)
    assert catalog.list_tables("db") == ["log", "pk"]
    assert catalog.list_tables("other") == []
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table("db.pk", SCHEMA)
    assert catalog.create_table("db.pk", SCHEMA, ignore_if_exists=True).path == pk.path
    with pytest.raises(DatabaseNotFoundError):
        catalog.create_table("nope.t", SCHEMA)
    with pytest.raises(DatabaseNotFoundError):
        catalog.list_tables("nope")

    # metadata stays in files under the warehouse, as Paimon's JDBC catalog
    assert pk.path == f"{tmp_path}/warehouse/db.db/pk"
    assert (tmp_path / "warehouse" / "db.db" / "pk" / "schema" / "schema-0").exists()
    pk.write(rows(range(5)))
    catalog.get_table("db.pk").write(rows([1, 2], tag="u"))
    got = {r["id"]: r["v"] for r in catalog.get_table("db.pk").to_arrow().to_pylist()}
    assert got == {0: "v0", 1: "u1", 2: "u2", 3: "v3", 4: "v4"}
    assert catalog.table_exists("db.pk") and not catalog.table_exists("db.zz")

    catalog.drop_table("db.pk")
    assert catalog.list_tables("db") == ["log"]
    assert not (tmp_path / "warehouse" / "db.db" / "pk").exists()
    with pytest.raises(TableNotFoundError):
        catalog.get_table("db.pk")
    with pytest.raises(TableNotFoundError):
        catalog.drop_table("db.pk")
    catalog.drop_table("db.pk", ignore_if_not_exists=True)

    with pytest.raises(DatabaseNotEmptyError):
        catalog.drop_database("db")
    catalog.drop_database("db", cascade=True)
    catalog.drop_database("other")
    with pytest.raises(DatabaseNotFoundError):
        catalog.drop_database("other")
    assert catalog.list_databases() == []


def test_paimon_table_layouts(catalog: JdbcCatalog, engine: Engine) -> None:
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA)
    insp = inspect(engine)
    assert [c["name"] for c in insp.get_columns("paimon_tables")] == ["catalog_key", "database_name", "table_name"]
    assert insp.get_pk_constraint("paimon_tables")["constrained_columns"] == [
        "catalog_key", "database_name", "table_name"]
    assert [c["name"] for c in insp.get_columns("paimon_database_properties")] == [
        "catalog_key", "database_name", "property_key", "property_value"]
    with engine.connect() as conn:
        assert conn.execute(text("SELECT database_name, table_name FROM paimon_tables WHERE catalog_key = :k"),
                            {"k": catalog.catalog_key}).fetchall() == [("db", "t")]
        props = dict(conn.execute(text(
            "SELECT property_key, property_value FROM paimon_database_properties WHERE catalog_key = :k"),
            {"k": catalog.catalog_key}).fetchall())
    assert props == {"exists": "true", "location": f"{catalog.warehouse}/db.db"}


def test_catalog_keys_isolate_catalogs_sharing_a_database(catalog: JdbcCatalog, uri: str, tmp_path: Path) -> None:
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA)
    other = JdbcCatalog(str(tmp_path / "warehouse2"), {"uri": uri, "catalog-key": f"o_{uuid.uuid4().hex[:8]}"})
    try:
        assert other.list_databases() == []
        other.create_database("db")
        assert other.list_tables("db") == []
        other.create_table("db.t", SCHEMA).write(rows([1]))
        assert catalog.get_table("db.t").to_arrow().num_rows == 0
    finally:
        other.drop_database("db", cascade=True)
        other.close()


def test_jdbc_tables_are_plain_paimon_tables_on_disk(catalog: JdbcCatalog) -> None:
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "1"}).write(rows(range(3)))
    by_path = strata.load_catalog(catalog.warehouse).get_table("db.t")  # the filesystem catalog
    assert by_path.to_arrow().num_rows == 3


def test_unregistered_leftover_directory_is_not_silently_adopted(catalog: JdbcCatalog) -> None:
    catalog.create_database("db")
    strata.load_catalog(catalog.warehouse).create_table("db.t", SCHEMA)  # files only, no row
    assert catalog.list_tables("db") == []
    with pytest.raises(TableNotFoundError):
        catalog.get_table("db.t")
    with pytest.raises(TableAlreadyExistsError, match="already holds a table schema"):
        catalog.create_table("db.t", SCHEMA)


def test_a_database_location_may_not_overlap_another(catalog: JdbcCatalog) -> None:
    """A database's location is deleted when it is dropped: it must be no other database's
    directory, nor inside or around one (nor a table's: tables lie inside their database)."""
    warehouse = catalog.warehouse
    catalog.create_database("victim")
    catalog.create_table("victim.t", SCHEMA).write(rows([1, 2, 3]))
    for location, relation in ((f"{warehouse}/victim.db", "is"), (f"{warehouse}/victim.db/t", "lies inside"),
                               (f"{warehouse}/./victim.db/", "is")):
        with pytest.raises(LocationConflictError, match=f"{relation} the directory of database 'victim'"):
            catalog.create_database("evil", properties={"location": location})
    catalog.create_database("inner", properties={"location": f"{warehouse}/outer/inner"})
    with pytest.raises(LocationConflictError, match="contains the directory of database 'inner'"):
        catalog.create_database("outer", properties={"location": f"{warehouse}/outer"})
    catalog.create_database("squatter", properties={"location": f"{warehouse}/later.db"})
    with pytest.raises(LocationConflictError, match=r"database 'later'.*directory of database 'squatter'"):
        catalog.create_database("later")  # its default location is taken
    assert catalog.list_databases() == ["inner", "squatter", "victim"]

    catalog.create_database("own", properties={"location": f"{warehouse}/elsewhere/own"})
    catalog.create_table("own.t", SCHEMA).write(rows([9]))
    for name in ("own", "inner", "squatter"):
        catalog.drop_database(name, cascade=True)
    assert catalog.get_table("victim.t").to_arrow().num_rows == 3
    assert not (Path(warehouse) / "elsewhere" / "own").exists() and (Path(warehouse) / "elsewhere").exists()
    catalog.drop_database("victim", cascade=True)
    assert not (Path(warehouse) / "victim.db").exists()


def test_dropping_a_database_registered_over_another_deletes_no_file(catalog: JdbcCatalog) -> None:
    """A database registered before locations were checked, at another's directory: dropping it
    unregisters it and keeps the files, which are the other database's too."""
    catalog.create_database("victim")
    catalog.create_table("victim.t", SCHEMA).write(rows([1, 2, 3]))
    with catalog.engine.begin() as conn:
        conn.execute(text("INSERT INTO paimon_database_properties VALUES (:key, 'evil', :pk, :pv)"),
                     [{"key": catalog.catalog_key, "pk": "exists", "pv": "true"},
                      {"key": catalog.catalog_key, "pk": "location", "pv": f"{catalog.warehouse}/victim.db"}])
        conn.execute(text("INSERT INTO paimon_tables VALUES (:key, 'evil', 't')"), {"key": catalog.catalog_key})
    catalog.drop_table("evil.t")
    assert catalog.get_table("victim.t").to_arrow().num_rows == 3
    catalog.drop_database("evil", cascade=True)
    assert catalog.list_databases() == ["victim"]
    assert catalog.get_table("victim.t").to_arrow().num_rows == 3


def test_a_table_whose_lock_id_would_not_fit_is_refused_at_creation(catalog: JdbcCatalog) -> None:
    """Names may be 240 bytes each, the lock id '<catalog-key>.<db>.<table>' at most 255
    characters: such a table could be created but never committed to under the lock."""
    database = "d" * 100
    catalog.create_database(database)
    fits = "t" * (255 - len(catalog.catalog_key) - 2 - len(database))
    with pytest.raises(InvalidNameError, match=r"lock id .* 256 characters long.*at most 255"):
        catalog.create_table(f"{database}.{fits}x", SCHEMA)
    assert catalog.list_tables(database) == []
    assert not (Path(catalog.database_path(database)) / f"{fits}x").exists()
    catalog.create_table(f"{database}.{fits}", SCHEMA).write(rows([1]))
    with JdbcCatalogLock(catalog.engine, catalog.catalog_key, {}).lock(database, fits) as lock:
        assert lock.held


@pytest.mark.sqlite
def test_embedded_sqlite_default(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    cat = strata.load_catalog(str(warehouse), metastore="jdbc")
    assert isinstance(cat, JdbcCatalog)
    assert cat.uri == f"sqlite:///{warehouse}/catalog.sqlite"
    cat.create_database("db")
    table = cat.create_table("db.t", SCHEMA)
    table.write(rows([1, 2]))
    assert cat.publish_mode(table) == "atomic" and cat.snapshot_publisher(table) is None
    assert cat.locks is None  # lock.enabled defaults to "is an object store"
    reopened = strata.load_catalog(str(warehouse), metastore="jdbc")
    assert reopened.list_tables("db") == ["t"] and reopened.get_table("db.t").to_arrow().num_rows == 2


@pytest.mark.sqlite
def test_uri_forms() -> None:
    assert sqlalchemy_url("sqlite:////abs/c.db") == "sqlite:////abs/c.db"
    assert sqlalchemy_url("jdbc:sqlite:/abs/c.db") == "sqlite:////abs/c.db"
    assert sqlalchemy_url("jdbc:sqlite:rel.db") == "sqlite:///rel.db"
    assert sqlalchemy_url("postgresql://u:p@127.0.0.1:15432/db") == "postgresql+psycopg://u:p@127.0.0.1:15432/db"
    assert sqlalchemy_url("jdbc:postgresql://127.0.0.1:15432/db?user=u&password=p&sslmode=disable") == \
        "postgresql+psycopg://u:p@127.0.0.1:15432/db?sslmode=disable"
    assert sqlalchemy_url("jdbc:postgresql://127.0.0.1/db", {"jdbc.user": "a", "jdbc.password": "b@c"}) == \
        "postgresql+psycopg://a:b%40c@127.0.0.1/db"
    with pytest.raises(OptionError, match="unsupported uri"):
        sqlalchemy_url("jdbc:mysql://127.0.0.1/db")


@pytest.mark.sqlite
def test_object_store_warehouse_needs_a_uri() -> None:
    with pytest.raises(OptionError, match="'uri'"):
        JdbcCatalog("s3://warehouse/x", {"s3.endpoint": "http://127.0.0.1:1", "s3.conditional-put": "false"})


# -- the lock ---------------------------------------------------------------------------------------

@pytest.fixture
def lock_engine(catalog: JdbcCatalog) -> Engine:
    ensure_lock_table(catalog.engine)
    return catalog.engine


def test_lock_table_layout(lock_engine: Engine) -> None:
    insp = inspect(lock_engine)
    assert [c["name"] for c in insp.get_columns(LOCK_TABLE)] == [
        "lock_id", "acquired_at", "expire_time_seconds", "lock_owner"]
    assert insp.get_pk_constraint(LOCK_TABLE)["constrained_columns"] == ["lock_id"]
    ensure_lock_table(lock_engine)  # idempotent


def test_lock_id_is_catalog_db_table(catalog: JdbcCatalog, lock_engine: Engine) -> None:
    locks = JdbcCatalogLock(lock_engine, catalog.catalog_key, {})
    assert locks.lock("db", "t").lock_id == f"{catalog.catalog_key}.db.t"
    with pytest.raises(OptionError):
        locks.lock("db", "x" * 300)


def test_two_acquirers_exclude_each_other(lock_engine: Engine, uri: str) -> None:
    lock_id = f"it.excl.{uuid.uuid4().hex}"
    other_engine = create_engine(sqlalchemy_url(uri), connect_args={"timeout": 60} if "sqlite" in uri else {})
    a = JdbcLock(lock_engine, lock_id)
    b = JdbcLock(other_engine, lock_id, acquire_timeout_ms=200, check_max_sleep_ms=50)
    a.acquire()
    assert a.held and a.valid_for() > 50
    assert not b.try_acquire()
    with pytest.raises(LockAcquireTimeoutError, match=lock_id):
        b.acquire()
    assert a.release()
    assert b.try_acquire()
    assert not a.try_acquire()
    assert b.release()
    assert not b.release()  # nothing left to release

    # N threads, each with its own lock object, bump a counter non-atomically inside the lock
    inside = 0
    overlaps = 0
    done = 0
    guard = threading.Lock()

    def worker(i: int) -> None:
        nonlocal inside, overlaps, done
        for _ in range(5):
            with JdbcLock(lock_engine if i % 2 else other_engine, lock_id, acquire_timeout_ms=60_000,
                          check_max_sleep_ms=20):
                with guard:
                    inside += 1
                    overlaps += inside > 1
                time.sleep(0.005)
                with guard:
                    inside -= 1
                    done += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other_engine.dispose()
    assert overlaps == 0 and done == 20


def test_stale_lock_is_taken_over(lock_engine: Engine) -> None:
    lock_id = f"it.stale.{uuid.uuid4().hex}"
    past = "LOCALTIMESTAMP - INTERVAL '1 hour'" if lock_engine.dialect.name == "postgresql" \
        else "datetime('now', '-1 hour')"
    with lock_engine.begin() as conn:  # a holder that died an hour ago, with a 60 s lease
        conn.execute(text(f"INSERT INTO {LOCK_TABLE} (lock_id, acquired_at, expire_time_seconds, lock_owner) "
                          f"VALUES (:id, {past}, 60, 'dead-writer')"), {"id": lock_id})
    lock = JdbcLock(lock_engine, lock_id, acquire_timeout_ms=1000)
    started = time.monotonic()
    with lock:
        assert time.monotonic() - started < 1
        with lock_engine.connect() as conn:
            owner = conn.execute(text(f"SELECT lock_owner FROM {LOCK_TABLE} WHERE lock_id = :id"),
                                 {"id": lock_id}).scalar_one()
        assert owner == lock.owner
    with lock_engine.connect() as conn:
        assert conn.execute(text(f"SELECT COUNT(*) FROM {LOCK_TABLE} WHERE lock_id = :id"),
                            {"id": lock_id}).scalar_one() == 0


def test_lease_expiry_in_real_time_and_late_release(lock_engine: Engine) -> None:
    lock_id = f"it.lease.{uuid.uuid4().hex}"
    crashed = JdbcLock(lock_engine, lock_id, expire_seconds=2)
    crashed.acquire()  # ... and never releases in time
    assert crashed.valid_for() <= 1.0
    successor = JdbcLock(lock_engine, lock_id, acquire_timeout_ms=10_000, check_max_sleep_ms=200)
    started = time.monotonic()
    successor.acquire()
    waited = time.monotonic() - started
    assert 0.5 < waited < 5, waited
    assert crashed.valid_for() == 0
    assert not crashed.release()  # the late holder must not free its successor's lock
    assert not JdbcLock(lock_engine, lock_id).try_acquire()
    assert successor.release()


@pytest.mark.minio
def test_publisher_takes_the_lock_on_object_stores(catalog: JdbcCatalog, uri: str, minio: Service,
                                                   tmp_path: Path) -> None:
    env = minio.client_env()
    prefix = f"s3://warehouse/it-jdbc-{uuid.uuid4().hex[:10]}"
    s3 = {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
          "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"]}
    modes = {}
    try:
        for lock_free in ("false", "auto", "true"):
            cat = JdbcCatalog(prefix, {**s3, "uri": uri, "catalog-key": f"{catalog.catalog_key}{lock_free}",
                                       "commit.lock-free": lock_free, "lock-acquire-timeout": "10 s"})
            cat.create_database("db")
            table = cat.create_table("db.t", SCHEMA)
            modes[lock_free] = cat.publish_mode(table)
            publisher = cat.snapshot_publisher(table)
            assert (publisher is None) == (modes[lock_free] == "atomic")
            if publisher is not None:  # a held lock blocks the publish until it times out
                assert cat.locks is not None
                blocker = cat.locks.lock("db", "t")
                blocker.acquire()
                slow = JdbcCatalog(prefix, {**s3, "uri": uri, "catalog-key": cat.catalog_key,
                                            "commit.lock-free": "false", "lock-acquire-timeout": "300 ms"})
                with pytest.raises(LockAcquireTimeoutError):
                    slow.get_table("db.t").write(rows([0]))
                blocker.release()
                slow.close()
            table.write(rows(range(3)))
            table.write(rows(range(3, 5)))
            assert table.to_arrow().num_rows == 5 and [s.id for s in table.snapshots()] == [1, 2]
            cat.drop_database("db", cascade=True)
            cat.close()
    finally:
        S3FileIO(s3).delete_dir(prefix)
    assert modes == {"false": "lock", "auto": "atomic", "true": "atomic"}
