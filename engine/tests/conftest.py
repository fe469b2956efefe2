"""Fixtures shared by the engine tests, and engine/tests on sys.path (for the shared pypaimon oracle
and table helpers).

Every test that asks for a warehouse (``warehouse``, ``catalog``, ``warehouse_io``...) runs twice:
on the local filesystem and on a real MinIO (the shared service, ``strata_platform.services``) under a
fresh ``s3://warehouse/engine-tests/<unique>`` prefix that is deleted afterwards. Outside CI the MinIO
variants skip when MinIO cannot be brought up; under CI=true that is a failure. A test that can only
run on local disk says why with ``@pytest.mark.local_storage_only(reason=...)``.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import strata
from strata.fs import FileIO, file_io_for

_TESTS = str(Path(__file__).resolve().parents[0])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

STORAGE_KINDS = ("local", "minio")
MINIO_PREFIX = "engine-tests"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "local_storage_only(reason): the test needs a local warehouse; it is not run on MinIO")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test that uses a warehouse over the storage kinds."""
    if "storage" not in metafunc.fixturenames:
        return
    local_only = metafunc.definition.get_closest_marker("local_storage_only")
    if local_only is not None and not local_only.kwargs.get("reason"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: local_storage_only needs reason=...")
    kinds = [pytest.param("minio", marks=pytest.mark.minio) if kind == "minio" else kind
             for kind in STORAGE_KINDS if not (local_only and kind != "local")]
    metafunc.parametrize("storage", kinds)


@pytest.fixture
def storage() -> str:
    """The storage kind of this test's warehouse: "local" or "minio" (set by parametrization)."""
    raise AssertionError("parametrized in pytest_generate_tests")  # pragma: no cover


@pytest.fixture(scope="session")
def minio_options() -> Iterator[dict[str, str]]:
    """Catalog options of the shared MinIO service, started here if nobody runs it."""
    from strata_platform.services.testing import provide

    for service in provide("minio"):
        env = service.client_env()
        yield {"s3.endpoint": env["AWS_ENDPOINT_URL"], "s3.access-key": env["AWS_ACCESS_KEY_ID"],
               "s3.secret-key": env["AWS_SECRET_ACCESS_KEY"], "s3.region": env["AWS_REGION"]}


@pytest.fixture
def warehouse_options(storage: str, request: pytest.FixtureRequest) -> dict[str, str]:
    """The catalog options the warehouse needs (the S3 connection on MinIO, none locally)."""
    return dict(request.getfixturevalue("minio_options")) if storage == "minio" else {}


@pytest.fixture
def warehouse(storage: str, tmp_path: Path, warehouse_options: dict[str, str],
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh, empty warehouse root: a local directory, or a unique s3:// prefix on MinIO.

    On MinIO the standard AWS variables are set too, so that code opening the warehouse without
    options (the CLI, a second catalog) reaches the same store."""
    if storage == "local":
        yield str(tmp_path / "warehouse")
        return
    from strata_platform.services.minio import BUCKET

    for option, variable in (("s3.endpoint", "AWS_ENDPOINT_URL"), ("s3.access-key", "AWS_ACCESS_KEY_ID"),
                             ("s3.secret-key", "AWS_SECRET_ACCESS_KEY"), ("s3.region", "AWS_REGION")):
        monkeypatch.setenv(variable, warehouse_options[option])
    root = f"s3://{BUCKET}/{MINIO_PREFIX}/{uuid.uuid4().hex[:16]}"
    yield root
    file_io_for(root, warehouse_options).delete_dir(root)


@pytest.fixture
def warehouse_io(warehouse: str, warehouse_options: dict[str, str]) -> FileIO:
    """The FileIO of the warehouse: inspect stored files through it, never with os/pathlib."""
    return file_io_for(warehouse, warehouse_options)


@pytest.fixture
def catalog(warehouse: str, warehouse_options: dict[str, str]) -> strata.Catalog:
    cat = strata.load_catalog(warehouse, **warehouse_options)
    cat.create_database("db")
    return cat
