"""Tags and branches as Iceberg refs, read by Trino 476 on the ``strata`` catalog (its Iceberg
connector on Strata's REST catalog, files on MinIO): a Paimon tag is a ``tag`` ref, so
``FOR VERSION AS OF '<tag>'`` reads the tagged snapshot; a branch whose head is one of main's
mirrored snapshots is a ``branch`` ref that Trino reads the same way; a branch written since it was
created is not in the Iceberg metadata (its snapshot ids are main's), and Trino says so."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from strata_platform.services.base import Service

pytestmark = [pytest.mark.trino, pytest.mark.minio, pytest.mark.e2e]
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def rows(trino: Service, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in trino.query(sql))


def test_tags_and_unwritten_branches_are_iceberg_refs(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    catalog, db = rest_catalog, rest_database
    table = catalog.create_table(f"{db}.t", SCHEMA, options={"metadata.iceberg.storage": "rest-catalog"})
    table.write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    table.create_tag("t1")
    table.create_branch("fresh", from_tag="t1")                  # head = main's snapshot 1
    table.create_branch("wip", from_tag="t1").write(pa.table({"id": [9], "v": ["w"]}, schema=SCHEMA))
    table.write(pa.table({"id": [3], "v": ["c"]}, schema=SCHEMA))  # the sync publishes the refs
    name = f"strata.{db}.t"
    refs = rows(trino, f'SELECT name, type, snapshot_id FROM strata.{db}."t$refs"')
    assert refs == [("fresh", "BRANCH", 1), ("main", "BRANCH", 2), ("t1", "TAG", 1)]
    assert rows(trino, f"SELECT * FROM {name} FOR VERSION AS OF 't1'") == [(1, "a"), (2, "b")]
    assert rows(trino, f"SELECT * FROM {name} FOR VERSION AS OF 'fresh'") == [(1, "a"), (2, "b")]
    assert rows(trino, f"SELECT * FROM {name}") == [(1, "a"), (2, "b"), (3, "c")]
    with pytest.raises(Exception, match="Cannot find snapshot with reference name: wip") as missing:
        trino.query(f"SELECT * FROM {name} FOR VERSION AS OF 'wip'")
    print(f"Trino on a branch without a ref: {missing.value}")
