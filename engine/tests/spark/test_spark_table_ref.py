"""The Spark data source's table reference: one catalog per process, tables always as they are now."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.spark.options import TableRef, normalize, table_ref


def test_loads_share_the_process_catalog_and_see_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    warehouse = str(tmp_path / "wh")
    writer = strata.load_catalog(warehouse)
    writer.create_database("db")
    writer.create_table("db.t", pa.schema([("id", pa.int64())]))
    ref = table_ref(normalize({"path": f"{warehouse}#db.t"}))
    first = ref.load()
    assert ref.catalog() is TableRef(warehouse, "db.t").catalog()  # an equal reference, the same catalog
    writer.get_table("db.t").add_column("name", pa.string())  # through another catalog
    assert ref.load().schema.field_names == ["id", "name"]  # the table is loaded anew, the catalog kept
    catalog = ref.catalog()
    assert ref.load().file_io is first.file_io
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "another-key")  # credentials are read when a catalog is made
    assert ref.catalog() is not catalog and ref.load().file_io is not first.file_io
