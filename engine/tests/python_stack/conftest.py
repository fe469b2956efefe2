from __future__ import annotations

from collections.abc import Iterator

import pytest
from stack_tables import KINDS, make_table

import strata
import strata.polars
import strata.table.read as table_read


@pytest.fixture(params=KINDS)
def table(request: pytest.FixtureRequest, catalog: strata.Catalog) -> strata.Table:
    return make_table(catalog, request.param)


@pytest.fixture
def native_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[list[str], object]]]:
    """The files and the predicate each Polars scan handed to Polars' own Parquet reader (local
    append tables: strata.arrow_stream.native_files), the reader itself run."""
    calls: list[tuple[list[str], object]] = []
    real = strata.polars._native_frames

    def recorded(paths, columns, predicate, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append((list(paths), predicate))
        return real(paths, columns, predicate, *args, **kwargs)

    monkeypatch.setattr(strata.polars, "_native_frames", recorded)
    yield calls


@pytest.fixture
def files_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Paths of the data files reads open: Strata's reader's, and those a Polars scan hands to
    Polars' own reader (each reader itself runs, only counted)."""
    opened: list[str] = []
    read_file, native_frames = table_read.read_file, strata.polars._native_frames

    def counting(io, path, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(path)
        return read_file(io, path, *args, **kwargs)

    def handed(paths, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.extend(paths)
        return native_frames(paths, *args, **kwargs)

    monkeypatch.setattr(table_read, "read_file", counting)
    monkeypatch.setattr(strata.polars, "_native_frames", handed)
    yield opened
