"""The README's Trino and Spark blocks (marked `<!-- run: trino -->` / `<!-- run: spark -->`) run as
written, each group in a process of its own with the environment `strata-services env` gives; the
plain `<!-- run -->` blocks run in engine/tests/test_readme_snippets.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_platform.readme_snippets import run_group
from strata_platform.services.base import Service

README = Path(__file__).resolve().parents[1] / "README.md"


def _run(group: str, *services: Service) -> None:
    env = {key: value for service in services for key, value in service.client_env().items()}
    done = run_group(README, group, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


@pytest.mark.trino
@pytest.mark.minio
def test_the_readme_trino_blocks_run(minio: Service, iceberg_rest: Service, trino: Service) -> None:
    _run("trino", minio, iceberg_rest, trino)


@pytest.mark.spark
@pytest.mark.minio
def test_the_readme_spark_blocks_run(minio: Service, spark: Service) -> None:
    _run("spark", minio, spark)
