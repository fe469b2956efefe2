from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack_tables import KINDS, make_table

import strata
import strata.table.read as table_read


@pytest.fixture(params=KINDS)
def table(request: pytest.FixtureRequest, catalog: strata.Catalog) -> strata.Table:
    return make_table(catalog, request.param)


@pytest.fixture
def files_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Paths of the data files reads open (the reader itself runs, only counted)."""
    opened: list[str] = []
    real = table_read.read_file

    def counting(io, path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(path)
        return real(io, path, *args, **kwargs)

    monkeypatch.setattr(table_read, "read_file", counting)
    yield opened
