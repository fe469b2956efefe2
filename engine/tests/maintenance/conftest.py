"""Fixtures of the maintenance tests (expiry, tags, rollback, orphans, consumers, partitions):
a fresh local warehouse per test, and engine/tests on sys.path (for the shared pypaimon oracle)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import strata

_TESTS = str(Path(__file__).resolve().parents[1])
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
