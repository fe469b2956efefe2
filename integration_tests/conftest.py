"""Session-scoped fixtures that hand a test a running real service.

A service is provisioned (installed from cache, started on 127.0.0.1) the first time a test asks
for it and stopped at the end of the session (strata_platform.services.testing.provide). Outside
CI a service that cannot be brought up skips its tests; under CI=true that is a failure.
"""

from __future__ import annotations

import functools
import uuid
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
def trino(minio: Service, postgres: Service) -> Iterator[Service]:
    """Trino, with what its catalogs reach: MinIO, and PostgreSQL for its own Iceberg catalog (native)."""
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


@pytest.fixture(scope="module")
def rest_catalog(iceberg_rest: Service) -> strata.Catalog:
    """The catalog the Iceberg REST service serves (its warehouse on MinIO), as the engine opens it."""
    catalog: strata.Catalog = iceberg_rest.catalog()  # type: ignore[attr-defined]
    return catalog


@pytest.fixture(scope="module")
def rest_database(rest_catalog: strata.Catalog, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of the REST catalog for one module (named after it), dropped with its tables after it."""
    module = request.module.__name__.rsplit(".", 1)[-1].removeprefix("test_")
    name = f"{module}_{uuid.uuid4().hex[:8]}"
    rest_catalog.create_database(name)
    yield name
    rest_catalog.drop_database(name, cascade=True)


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


# -- several workers (make test: pytest-xdist with --dist loadgroup) ---------------------------------
# Services that modules of different groups use are started once, by the controlling process, before
# any worker runs, and stopped by it at the end if it started them: workers find them running, and
# provide() stops only what it started, so no worker starts or stops one under another. Lanes start
# side by side (the REST catalog after the MinIO it serves from).
SHARED_SERVICES: tuple[tuple[str, ...], ...] = (("minio", "iceberg_rest"), ("postgres",), ("kafka",))

# A group runs on one worker, its modules one after another. The modules that use a service one of
# them restarts, or that only one worker may own for its session (Trino, Prometheus, the Docker engine
# and the cluster; compose and the chart's release would also starve each other of the 2 cores), form
# one group; every other module is a group of its own. Longest first: the scheduler hands the groups
# out in this order (--no-loadscope-reorder), so the long ones start early and the short ones fill in.
GROUPS: dict[str, tuple[str, ...]] = {
    "containers": ("test_compose.py", "test_helm_k8s.py", "test_images.py", "test_services_docker.py"),
    "trino": ("test_tpch.py", "test_trino_iceberg.py", "test_trino_iceberg_mirror.py", "test_trino_statistics.py",
              "test_services_trino.py", "test_trino_branch_refs.py", "test_readme_snippets.py",
              "test_hostile_names.py"),
    "prometheus": ("test_observability.py", "test_services_prometheus.py", "test_services_cli.py"),
}
LONGEST_FIRST = ("containers", "trino", "test_spark_exactly_once.py", "test_faults.py", "test_concurrent_commits.py",
                 "test_spark_cluster.py", "test_bench_spark.py", "test_cdc_spark.py", "test_spark_streaming.py")
# Short groups that wait for the background builds: last, when the builds are done
LAST = ("prometheus", "test_helm.py")

# Tests that stop a service every other module shares (a module name stands for all its tests): left
# out of the parallel run (--exclusive-modules=skip) and run after it on their own (=only).
EXCLUSIVE_TESTS: dict[str, str] = {
    "test_services_postgres.py::test_warm_restart_reuses_the_initialised_cluster": "restarts PostgreSQL",
    "test_log_faults.py::test_broker_restart_mid_stream": "restarts the Kafka broker",
}

# Modules whose set-up needs what make test builds in the background (the images, helm, the cluster's
# binaries; strata_platform.test_run): their first test waits for those jobs, while other groups run.
NEEDS_BACKGROUND_BUILDS = {*GROUPS["containers"], "test_helm.py", "test_services_cli.py"}

_GROUP_OF = {module: group for group, modules in GROUPS.items() for module in modules}
_STARTED_BY_CONTROLLER: list[Service] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--exclusive-modules", choices=("skip", "only"), default=None,
                     help="skip: leave out the tests that restart a shared service (for the parallel run); "
                          "only: run just those")


def _distributing(config: pytest.Config) -> bool:
    """This process hands tests out to xdist workers (and runs none itself)."""
    return config.pluginmanager.has_plugin("dsession")


def pytest_sessionstart(session: pytest.Session) -> None:
    if not _distributing(session.config):
        return
    from concurrent.futures import ThreadPoolExecutor

    from strata_platform.services import registry
    from strata_platform.services.testing import IN_CI

    def start_lane(names: tuple[str, ...]) -> None:
        for name in names:
            service = registry.get(name)
            if service.running_pid() is None:
                _STARTED_BY_CONTROLLER.append(service)
            service.start()

    with ThreadPoolExecutor(max_workers=len(SHARED_SERVICES)) as pool:
        failures = [f.exception() for f in [pool.submit(start_lane, lane) for lane in SHARED_SERVICES]]
    for failure in failures:
        if failure is not None:
            message = f"a shared service could not be started before the workers: {failure}"
            if IN_CI:
                pytest.exit(message, returncode=1)
            print(f"\n{message} (its tests will skip)")


def pytest_sessionfinish(session: pytest.Session) -> None:
    while _STARTED_BY_CONTROLLER:
        _STARTED_BY_CONTROLLER.pop().stop()


def _module_of(item: pytest.Item) -> str:
    return item.path.name


def _exclusive(item: pytest.Item) -> bool:
    name = getattr(item, "originalname", item.name)
    return _module_of(item) in EXCLUSIVE_TESTS or f"{_module_of(item)}::{name}" in EXCLUSIVE_TESTS


def _group(item: pytest.Item) -> str:
    return _GROUP_OF.get(_module_of(item), _module_of(item))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _module_of(item) in NEEDS_BACKGROUND_BUILDS:
        _background_builds_done()


@functools.cache
def _background_builds_done() -> None:
    """Wait for make test's background jobs (none outside make test); fail the test if one failed."""
    from strata_platform import test_run

    failed = test_run.wait_for_jobs()
    if failed:
        pytest.fail(f"background build(s) failed: {', '.join(failed)} (logs in {test_run.shown(test_run.RUN_DIR)})",
                    pytrace=False)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("--exclusive-modules")
    if part is not None:
        keep = [item for item in items if _exclusive(item) == (part == "only")]
        if not keep and items:  # a run of nothing would pass (or exit 5): refuse it
            raise pytest.UsageError(f"--exclusive-modules={part} leaves no test of the {len(items)} collected "
                                    f"(exclusive: {', '.join(EXCLUSIVE_TESTS)})")
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = keep
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    order = {group: rank for rank, group in enumerate(LONGEST_FIRST)}
    order.update({group: len(LONGEST_FIRST) + 1 + rank for rank, group in enumerate(LAST)})
    # while the background builds run, a group that waits for them goes last: it would hold its
    # worker idle (on a bare machine the builds outlast the engine tests by minutes)
    from strata_platform import test_run

    waiting = {_GROUP_OF.get(m, m) for m in NEEDS_BACKGROUND_BUILDS} if test_run.jobs_running() else set()

    def rank(indexed: tuple[int, pytest.Item]) -> tuple[bool, int, int]:
        group = _group(indexed[1])
        return group in waiting, order.get(group, len(LONGEST_FIRST)), indexed[0]

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]
