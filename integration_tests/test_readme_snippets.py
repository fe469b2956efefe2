"""The Trino and Spark blocks of the README and of the docs pages (marked `<!-- run: trino -->` /
`<!-- run: spark -->`) run as written, each group of each document in a process of its own with the
environment `strata-services env` gives; the plain `<!-- run -->` blocks run in
engine/tests/test_readme_snippets.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from strata_platform.readme_snippets import blocks, display_name, documents, run_group
from strata_platform.services.base import Service


def _with_group(group: str) -> list[Path]:
    return [d for d in documents() if any(b.group == group for b in blocks(d.read_text(encoding="utf-8")))]


def _run(document: Path, group: str, *services: Service) -> None:
    env = {key: value for service in services for key, value in service.client_env().items()}
    done = run_group(document, group, env=env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"


@pytest.mark.trino
@pytest.mark.minio
@pytest.mark.parametrize("document", _with_group("trino"), ids=display_name)
def test_the_trino_blocks_run(document: Path, minio: Service, iceberg_rest: Service, trino: Service) -> None:
    _run(document, "trino", minio, iceberg_rest, trino)


@pytest.mark.spark
@pytest.mark.minio
@pytest.mark.parametrize("document", _with_group("spark"), ids=display_name)
def test_the_spark_blocks_run(document: Path, minio: Service, spark: Service) -> None:
    _run(document, "spark", minio, spark)
