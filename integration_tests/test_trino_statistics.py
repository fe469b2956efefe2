"""Trino plans Strata tables from their Iceberg statistics and skips their position deletes.

- ``SHOW STATS`` gives each column's distinct count within 5% of the truth, from the Puffin
  ``apache-datasketches-theta-v1`` blobs ``strata iceberg stats`` listed in the table metadata.
- A multi-join query gets the same join order (``EXPLAIN``) for Strata tables as for the same data
  written by Trino itself into its ``native`` Iceberg catalog (Trino collects its own statistics
  on write), and a different one without Strata's statistics: the statistics decide it.
- A deletion-vector table's position deletes: one file per data file, ``referenced_data_file`` and
  exact ``file_path`` bounds, positions sorted within their ``pos`` bounds; Trino's rows equal
  Strata's.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from strata.iceberg import latest_metadata_location
from strata.iceberg import manifests as im
from strata.iceberg.statistics import refresh
from strata_platform.services.base import Service

pytestmark = [pytest.mark.trino, pytest.mark.minio, pytest.mark.e2e]

ICEBERG = {"metadata.iceberg.storage": "rest-catalog", "metadata.iceberg.statistics": "manual"}


def query(trino: Service, sql: str, **session: Any) -> list[list[Any]]:
    rows: list[list[Any]] = trino.query(sql, **session)  # type: ignore[attr-defined]
    return rows


def publish_statistics(table: Any) -> None:
    location = latest_metadata_location(table)
    assert location is not None
    result = refresh(table, location.rsplit("/", 1)[0])
    assert result.path is not None, result.reason


# -- SHOW STATS ------------------------------------------------------------------------------------------

def test_show_stats_distinct_counts_within_five_percent(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    n = 200_000
    i = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(25)
    data = pa.table({
        "id": i, "customer": rng.integers(0, 50_000, n), "qty": pa.array(i % 37, pa.int32()),
        "price": np.round(rng.random(n) * 1000, 2),
        "city": pc.binary_join_element_wise("city-", pa.array(rng.integers(0, 9000, n)).cast(pa.string()), ""),
        "day": pa.array((i % 700 + 19_000).astype(np.int32)).view(pa.date32())})
    table = rest_catalog.create_table(f"{rest_database}.facts", data.schema, options=ICEBERG)
    table.write(data)
    name = f"strata.{rest_database}.facts"
    before = {row[0]: row[2] for row in query(trino, f"SHOW STATS FOR {name}")}
    assert before["id"] is None, "no distinct counts before statistics are published"
    publish_statistics(table)
    stats = {row[0]: row[2] for row in query(trino, f"SHOW STATS FOR {name}")}
    for column in data.column_names:
        truth = pc.count_distinct(data.column(column)).as_py()
        assert stats[column] == pytest.approx(truth, rel=0.05), (column, stats[column], truth)


# -- join order against Trino's own tables ------------------------------------------------------------------

JOIN = ("SELECT count(*), sum(f.mid_id) FROM {c}.{s}.dim_small d1 JOIN {c}.{s}.fact f ON f.small_id = d1.id "
        "JOIN {c}.{s}.dim_mid d2 ON f.mid_id = d2.id WHERE d1.flag = 1 AND d2.grp < 5")


def join_data() -> dict[str, pa.Table]:
    """A fact table and two dimensions (fixed-width columns: Trino's size estimates need no column
    sizes), written in the order that is worst for a syntactic plan."""
    rng = np.random.default_rng(7)
    n = 300_000
    fact = pa.table({"small_id": rng.integers(0, 200, n), "mid_id": rng.integers(0, 20_000, n),
                     "amount": rng.random(n)})
    small = pa.table({"id": np.arange(200, dtype=np.int64), "flag": np.arange(200, dtype=np.int64) % 2})
    mid = pa.table({"id": np.arange(20_000, dtype=np.int64), "grp": np.arange(20_000, dtype=np.int64) % 100})
    return {"fact": fact, "dim_small": small, "dim_mid": mid}


def join_order(trino: Service, catalog: str, schema: str, **session: Any) -> list[str]:
    """The join tree of the query's distributed plan: its joins (kind and distribution) and scanned
    tables, in plan order, catalog and schema left out."""
    plan = "\n".join(row[0] for row in query(trino, "EXPLAIN " + JOIN.format(c=catalog, s=schema), **session))
    out = []
    for line in plan.splitlines():
        depth = len(line) - len(line.lstrip())  # the tree's shape: a node's indentation
        join = re.search(r"(InnerJoin|CrossJoin|LeftJoin|RightJoin|SemiJoin)\[", line)
        if join:
            distribution = re.search(r"distribution = (\w+)", line)
            out.append(f"{depth} {join.group(1)} {distribution.group(1) if distribution else ''}".strip())
        table = re.search(r"table = \w+:[\w$]+\.(\w+)", line)
        if table:
            out.append(f"{depth} {table.group(1)}")
    assert sum("Join" in node for node in out) == 2 and len(out) == 5, plan
    return out


def test_join_order_matches_trino_written_tables(trino: Service, rest_catalog: Any, rest_database: str) -> None:
    catalogs = {row[0] for row in query(trino, "SHOW CATALOGS")}
    assert "native" in catalogs, "Trino's own Iceberg catalog (native) is missing from the trino service"
    for name, data in join_data().items():
        table = rest_catalog.create_table(f"{rest_database}.{name}", data.schema, options=ICEBERG)
        table.write(data)
    native = f"stats_{uuid.uuid4().hex[:8]}"
    query(trino, f"CREATE SCHEMA native.{native}")
    try:
        for name in join_data():  # Trino's writer collects its NDV sketches itself
            query(trino, f"CREATE TABLE native.{native}.{name} AS SELECT * FROM strata.{rest_database}.{name}")
        blind = join_order(trino, "strata", rest_database)
        for name in join_data():
            publish_statistics(rest_catalog.get_table(f"{rest_database}.{name}"))
        strata_plan = join_order(trino, "strata", rest_database)
        native_plan = join_order(trino, "native", native)
        assert strata_plan == native_plan
        assert blind != strata_plan, "the statistics should change the plan of this query"
        assert query(trino, JOIN.format(c="strata", s=rest_database)) == query(trino, JOIN.format(c="native", s=native))
    finally:
        for name in join_data():
            query(trino, f"DROP TABLE IF EXISTS native.{native}.{name}")
        query(trino, f"DROP SCHEMA IF EXISTS native.{native}")


# -- position-delete layout -----------------------------------------------------------------------------------

def test_position_deletes_one_file_per_data_file_with_bounds(trino: Service, rest_catalog: Any,
                                                              rest_database: str) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.int64())])
    table = rest_catalog.create_table(f"{rest_database}.marked", schema, primary_keys=["id"], options={
        **ICEBERG, "bucket": "2", "deletion-vectors.enabled": "true",
        "compaction.delete-ratio-threshold": "1.0"})  # keep the vectors: they are what is checked
    ids = np.arange(20_000, dtype=np.int64)
    table.write(pa.table({"id": ids, "v": ids}, schema=schema))
    table.compact(full=True)
    table.write(pa.table({"id": ids[::7], "v": -ids[::7]}, schema=schema))  # upserts mark old rows
    strata_rows = table.to_arrow()
    expected = sorted(zip(*(strata_rows.column(c).to_pylist() for c in ("id", "v")), strict=True))
    got = sorted(tuple(r) for r in query(trino, f"SELECT id, v FROM strata.{rest_database}.marked"))
    assert got == expected
    location = latest_metadata_location(table)
    assert location is not None
    current = json.loads(table.file_io.read_bytes(location))
    snapshot = next(s for s in current["snapshots"] if s["snapshot-id"] == current["current-snapshot-id"])
    manifests = im.decode_manifest_list(table.file_io.read_bytes(snapshot["manifest-list"]), "list")
    deletes = [e.file for m in manifests if m.content == im.DELETES
               for e in im.decode_entries(table.file_io.read_bytes(m.path), [], m.path)]
    assert deletes, "the upserts left deletion vectors"
    referenced = [f.referenced_data_file for f in deletes]
    assert None not in referenced and len(set(referenced)) == len(referenced), "one delete file per data file"
    for f in deletes:
        assert f.lower_bounds[im.FILE_PATH_ID] == f.upper_bounds[im.FILE_PATH_ID] == f.referenced_data_file.encode()
        rows = pq.read_table(table.file_io.arrow_fs()[0].open_input_file(table.file_io.arrow_path(f.path)))
        pos = rows.column("pos").to_numpy()
        assert np.all(np.diff(pos) > 0), "sorted by position"
        low, high = (int.from_bytes(b[im.POS_ID], "little") for b in (f.lower_bounds, f.upper_bounds))
        assert (low, high) == (pos[0], pos[-1]) and f.record_count == len(pos)
        assert set(rows.column("file_path").to_pylist()) == {f.referenced_data_file}
