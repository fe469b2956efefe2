from __future__ import annotations

import pytest
from stack_tables import KINDS, make_table

import strata


@pytest.fixture(params=KINDS)
def table(request: pytest.FixtureRequest, catalog: strata.Catalog) -> strata.Table:
    return make_table(catalog, request.param)
