"""Fixtures shared by the engine tests: a fresh local warehouse per test with a database `db`,
and engine/tests on sys.path (for the shared pypaimon oracle and table helpers)."""

import sys
from pathlib import Path

import pytest

import strata

_TESTS = str(Path(__file__).resolve().parents[0])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def catalog(warehouse: str) -> strata.Catalog:
    cat = strata.load_catalog(warehouse)
    cat.create_database("db")
    return cat
