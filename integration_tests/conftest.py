"""Session-scoped fixtures that hand a test a running real service.

A service is provisioned (installed from cache, started on 127.0.0.1) the first time a test asks
for it and stopped at the end of the session (strata_platform.services.testing.provide). Outside
CI a service that cannot be brought up skips its tests; under CI=true that is a failure.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from strata_platform.services.base import Service
from strata_platform.services.testing import provide

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    import strata

@pytest.fixture(scope="session")
def minio() -> Iterator[Service]:
    yield from provide("minio")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Service]:
    yield from provide("postgres")


@pytest.fixture(scope="session")
def kafka() -> Iterator[Service]:
    yield from provide("kafka")


@pytest.fixture(scope="session")
def trino() -> Iterator[Service]:
    yield from provide("trino")


@pytest.fixture(scope="module")
def iceberg_rest(minio: Service) -> Iterator[Service]:
    yield from provide("iceberg_rest")


@pytest.fixture(scope="session")
def prometheus() -> Iterator[Service]:
    yield from provide("prometheus")


@pytest.fixture(scope="session")
def spark() -> Iterator[Service]:
    yield from provide("spark")


def _stopped(spark: SparkSession) -> bool:
    return spark.sparkContext._jsc is None


def _shared_session(kind: str) -> SparkSession:
    """The process's one SparkSession of `kind` ("local" or "cluster"): a process has one
    SparkContext, so a session of the other kind is stopped first (each new one costs seconds)."""
    from strata.spark import register

    current = _SHARED.get(kind)
    if current is not None and not _stopped(current):
        return current
    for other in [s for k, s in _SHARED.items() if k != kind and not _stopped(s)]:
        for query in other.streams.active:
            query.stop()
        other.stop()
    if kind == "cluster":
        from strata_platform.services.spark_cluster import cluster_session

        created = cluster_session("strata-integration-tests-cluster")
    else:
        from strata_platform.services.spark import s3a_conf, spark_session

        created = spark_session("strata-integration-tests", **s3a_conf())  # read_table on MinIO (test_tpch)
    register(created)
    _SHARED[kind] = created
    return created


_SHARED: dict[str, SparkSession] = {}


@pytest.fixture(scope="session")
def spark_sql(spark: Service) -> Iterator[SparkSession]:
    """One local SparkSession for every Spark module, with the strata data sources registered;
    modules use it through `session` (which starts it again if a cluster module stopped it)."""
    yield _shared_session("local")
    _SHARED["local"].stop()


@pytest.fixture(scope="session")
def spark_cluster(spark: Service) -> Iterator[Service]:
    """The standalone cluster (master and two workers on 127.0.0.1)."""
    yield from provide("spark_cluster")


@pytest.fixture(scope="module")
def cluster_session(spark_cluster: Service) -> Iterator[SparkSession]:
    """A SparkSession whose executors run on the cluster's workers, for one module; the local
    shared session is stopped meanwhile (one SparkContext per process) and comes back on demand."""
    shared = _shared_session("cluster")
    yield shared
    for query in shared.streams.active:
        query.stop()
    shared.stop()


@pytest.fixture(scope="module")
def session(spark_sql: SparkSession) -> Iterator[SparkSession]:
    """The shared SparkSession for one module; at its end the streaming queries it left are
    stopped and the runtime settings it changed restored, so modules do not leak into others."""
    spark_sql = _shared_session("local")
    before = spark_sql.conf.getAll
    yield spark_sql
    for query in spark_sql.streams.active:
        query.stop()
    after = spark_sql.conf.getAll
    for key in after.keys() - before.keys():
        spark_sql.conf.unset(key)
    for key, value in before.items():
        if after.get(key) != value:
            spark_sql.conf.set(key, value)


@pytest.fixture
def catalog(tmp_path: Path) -> strata.FileSystemCatalog:
    """A filesystem catalog in the test's directory, with database "db"."""
    import strata

    cat = strata.load_catalog(str(tmp_path / "warehouse"))
    assert isinstance(cat, strata.FileSystemCatalog)
    cat.create_database("db")
    return cat


@pytest.fixture(scope="session")
def docker() -> Iterator[Service]:
    yield from provide("docker")


@pytest.fixture
def bootstrap(kafka: Service) -> str:
    """The Kafka bootstrap address of the session's broker."""
    return kafka.client_env()["STRATA_KAFKA_BOOTSTRAP"]


@pytest.fixture
def topics(bootstrap: str) -> Iterator[list[str]]:
    """Names a test appends here are deleted after it (its log-store producers closed first)."""
    from strata.log import kafka as log_kafka
    from strata_platform.services import kafka as broker

    created: list[str] = []
    yield created
    log_kafka.close_producers()
    broker.delete_topics(bootstrap, created)
