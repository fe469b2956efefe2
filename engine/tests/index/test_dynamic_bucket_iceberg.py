"""The Iceberg mirror of a dynamic-bucket table (deletion vectors, several buckets per partition)
reads like the table itself, through pyiceberg."""

from __future__ import annotations

import pyarrow as pa
import pytest
from dynamic_helpers import check_placement, hash_index
from pyiceberg_oracle import read_iceberg

import strata
from strata.iceberg import latest_metadata_location

pytestmark = pytest.mark.pyiceberg

SCHEMA = pa.schema([("dt", pa.string()), pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])


def test_iceberg_mirror_of_dynamic_buckets(catalog: strata.Catalog, warehouse_options: dict[str, str]) -> None:
    table = catalog.create_table("db.t", SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"], options={
        "metadata.iceberg.storage": "table-location", "deletion-vectors.enabled": "true",
        "deletion-vectors.bitmap64": "true", "dynamic-bucket.target-row-num": "25"})
    for step in range(3):
        ids = list(range(step * 20, step * 20 + 40))
        table.write(pa.table({"dt": ["a" if i % 3 else "b" for i in ids], "id": ids, "v": [step] * len(ids)},
                             schema=SCHEMA))
    table.delete(pa.table({"dt": ["a", "b"], "id": [1, 3], "v": [None, None]}, schema=SCHEMA))
    table = catalog.get_table("db.t")
    assert len(hash_index(table)) > 2
    check_placement(table)
    location = latest_metadata_location(table)
    assert location is not None
    got, _ = read_iceberg(location, warehouse_options)
    key = ["dt", "id", "v"]
    assert sorted(got.select(key).to_pylist(), key=str) == sorted(table.to_arrow().select(key).to_pylist(), key=str)
    assert got.num_rows == 78
