"""Fixtures of the log-store unit tests: a fresh warehouse per test (no broker needed)."""

from pathlib import Path

import pytest

import strata


@pytest.fixture
def catalog(tmp_path: Path) -> strata.Catalog:
    cat = strata.load_catalog(str(tmp_path / "warehouse"))
    cat.create_database("db")
    return cat
