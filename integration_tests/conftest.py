"""Session-scoped fixtures that hand a test a running real service.

A service is provisioned (installed from cache, started on 127.0.0.1) the first time a test asks
for it and stopped at the end of the session. Outside CI a service that cannot be brought up
skips its tests; under CI=true that is a failure, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from strata_platform.services import registry
from strata_platform.services.base import Service

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _provide(name: str) -> Iterator[Service]:
    service = registry.get(name)
    started_here = service.running_pid() is None
    try:
        service.start()
    except Exception as exc:
        if started_here:
            service.stop()
        if IN_CI:
            pytest.fail(f"service {name} could not be started under CI: {exc}", pytrace=False)
        pytest.skip(f"service {name} unavailable: {exc}")
    try:
        yield service
    finally:
        if started_here:
            service.stop()


@pytest.fixture(scope="session")
def minio() -> Iterator[Service]:
    yield from _provide("minio")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Service]:
    yield from _provide("postgres")


@pytest.fixture(scope="session")
def kafka() -> Iterator[Service]:
    yield from _provide("kafka")


@pytest.fixture(scope="session")
def trino() -> Iterator[Service]:
    yield from _provide("trino")


@pytest.fixture(scope="session")
def prometheus() -> Iterator[Service]:
    yield from _provide("prometheus")


@pytest.fixture(scope="session")
def spark() -> Iterator[Service]:
    yield from _provide("spark")


@pytest.fixture(scope="session")
def docker() -> Iterator[Service]:
    yield from _provide("docker")


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
