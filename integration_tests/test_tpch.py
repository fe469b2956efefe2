"""TPC-H at scale factor 0.01 through the whole stack (strata_platform.tpch): Spark loads the eight
tables into Strata tables on MinIO, Trino CTAS the same rows into its own Iceberg tables (the
``native`` catalog), both match the source's row counts and checksums; two refresh rounds (RF1
inserts orders and lineitems, RF2 deletes them by key) go through Spark, as one changelog per table,
exactly once (a replayed round publishes nothing) and through Trino's INSERT/DELETE; the 22
queries give equal results on Trino over Strata and Trino native after the load, and on those two
and Spark SQL over Strata (``strata.spark.read_table``: Spark's Parquet reader on MinIO through
s3a, deletion vectors as an anti join) after the refresh."""

from __future__ import annotations

from typing import Any

import pytest

from strata_platform.services.base import Service
from strata_platform.tpch.tables import TABLES
from strata_platform.tpch.workload import REFRESH_USER, Tpch

pytestmark = [pytest.mark.tpch, pytest.mark.trino, pytest.mark.minio, pytest.mark.postgres, pytest.mark.spark,
              pytest.mark.e2e]

SCALE_FACTOR = 0.01


@pytest.fixture(scope="module")
def tpch(session: Any, trino: Service, iceberg_rest: Service, postgres: Service, tmp_path_factory: Any) -> Tpch:
    session.conf.set("spark.sql.adaptive.enabled", "false")  # tiny tables: re-planning after each stage only costs
    run = Tpch(SCALE_FACTOR, session, trino, iceberg_rest, work_dir=tmp_path_factory.mktemp("tpch"),
               progress=lambda _line: None)
    run.load_native()
    run.export_parquet()
    run.load_strata()
    return run


def latest_snapshots(tpch: Tpch) -> dict[str, int | None]:
    catalog = tpch.rest.catalog()
    return {t: catalog.get_table(f"{tpch.database}.{t}").snapshot_manager.latest_id() for t in ("orders", "lineitem")}


def test_load_equals_the_source(tpch: Tpch) -> None:
    rows = tpch.verify_load()  # raises when a count or checksum differs from the source
    assert rows["lineitem"][0] == 60175 and rows["orders"][0] == 15000 and len(rows) == len(TABLES)
    files = tpch.query(f'SELECT content, count(*) FROM strata.{tpch.database}."lineitem$files" GROUP BY content')
    assert dict(files).get(0, 0) >= 1 and dict(files).get(1, 0) == 0  # compacted on load: no deletes yet


def test_queries_equal_after_load(tpch: Tpch) -> None:
    # Trino on both catalogs here; Spark joins them after the refresh rounds (its 22 queries cost
    # minutes on 2 cores, and the refreshed tables are the harder case: deletion vectors, new files)
    runs = tpch.run_all(with_spark=False)  # raises when a result differs from Trino native's
    assert len(runs["trino_native"][1].rows) == 4  # Q1: four (returnflag, linestatus) groups
    assert all(len(runs[e]) == 22 for e in runs)


def test_refresh_exactly_once_then_queries_equal(tpch: Tpch) -> None:
    for round_no in (1, 2):
        tpch.refresh_native(round_no)
        tpch.refresh_strata(round_no)
        assert tpch.visibility_seconds() < 60
    before = latest_snapshots(tpch)
    tpch.refresh_strata(2)  # a replay: every (commit user, round) is already published
    assert latest_snapshots(tpch) == before
    catalog = tpch.rest.catalog()
    orders = catalog.get_table(f"{tpch.database}.orders")
    rounds = {s.commit_identifier for s in orders.snapshot_manager.snapshots() if s.commit_user == REFRESH_USER}
    assert rounds == {1, 2}  # each round's inserts and deletes in one commit
    new, deleted = tpch.query(
        f"SELECT count_if(o_orderkey >= 10000000000), 15000 + count_if(o_orderkey >= 10000000000) - count(*) "
        f"FROM strata.{tpch.database}.orders")[0]
    assert new > 0 and deleted > 0  # RF1 added orders, RF2 removed some
    for table in ("orders", "lineitem"):  # the two sides hold the same rows
        columns = ", ".join(TABLES[table].column_names)
        assert tpch.query(f"SELECT count(*), checksum(ROW({columns})) FROM strata.{tpch.database}.{table}") == \
            tpch.query(f"SELECT count(*), checksum(ROW({columns})) FROM native.{tpch.database}.{table}")
    runs = tpch.run_all(spark_cache=True)
    assert set(runs) == {"trino_strata", "trino_native", "spark_strata"} and all(len(r) == 22 for r in runs.values())
