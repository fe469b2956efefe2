"""Fixtures of the maintenance tests (expiry, tags, rollback, orphans, consumers, partitions):
a fresh local warehouse per test."""

from __future__ import annotations

from pathlib import Path

import pytest

import strata


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture
def catalog(warehouse: str) -> strata.Catalog:
    cat = strata.load_catalog(warehouse)
    cat.create_database("db")
    return cat
