"""``strata sql``: DuckDB over the catalog's tables, time travel and system tables, output files."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from stack_tables import make_table

import strata
from strata.cli import main

pytestmark = pytest.mark.local_storage_only(reason="the CLI opens the warehouse by path")


def test_sql_reads_tables_time_travel_and_system_tables(catalog: strata.Catalog, warehouse: str, tmp_path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    table = make_table(catalog, "pk_dv")
    out = tmp_path / "r.parquet"
    query = ("SELECT (SELECT count(*) FROM db.t WHERE dt = '2024-01-02') AS now, "
             "(SELECT count(*) FROM db.t$snapshot=1) AS first, (SELECT count(*) FROM db.t$snapshots) AS snaps")
    assert main(["--warehouse", warehouse, "sql", query, "--output", str(out)]) == 0
    row = pq.read_table(out).to_pylist()[0]
    from strata import col
    assert row == {"now": table.to_arrow(filter=col("dt") == "2024-01-02").num_rows,
                   "first": table.to_arrow(snapshot_id=1).num_rows, "snaps": len(table.snapshots())}
    assert main(["--warehouse", warehouse, "sql", "SELECT 1", "--output", str(tmp_path / "r.xlsx")]) == 2
    assert "must end in .csv, .parquet or .json" in capsys.readouterr().err
