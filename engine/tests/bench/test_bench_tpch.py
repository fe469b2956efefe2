"""The TPC-H bench entries' bookkeeping (no services): the shared run is cached by source revision,
targets apply to the entries' main ratios, and each Spark run plans the tables its query reads."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("strata_platform")

from strata.bench import tpch
from strata_platform.tpch import queries


def test_the_cached_run_is_keyed_by_source_revision(tmp_path, monkeypatch) -> None:
    revision = tpch.source_revision()
    assert revision == tpch.source_revision()
    planted = {"scale_factor": tpch.BENCH_SCALE_FACTOR, "planted": True}
    (tmp_path / f"tpch-sf{tpch.BENCH_SCALE_FACTOR:g}-{revision}.json").write_text(json.dumps(planted))
    assert tpch.run_once(str(tmp_path), 1.0) == planted  # this revision's run is shared
    monkeypatch.setattr(tpch, "REFRESH_ROUNDS", tpch.REFRESH_ROUNDS + 1)
    assert tpch.source_revision() != revision  # other settings: another run


def test_refresh_target_is_on_seconds_per_warm_round_not_visibility() -> None:
    workload = tpch.WORKLOADS["TPCH_REFRESH"]
    rounds = [{"native_s": 3.0, "strata_s": 9.0, "visibility_s": 0.9},  # the warm-up round
              {"native_s": 2.0, "strata_s": 5.0, "visibility_s": 0.5},
              {"native_s": 2.0, "strata_s": 3.0, "visibility_s": 0.7}]
    row = workload.summarize({"tpch": {"refresh": rounds}})
    assert workload.key == "ratio" and row["ratio"] == 2.0 and not workload.target.met(row["ratio"])
    assert row["visibility_p99_s"] == 0.7  # reported beside it
    assert row["first_round"] == "9.00 s vs 3.00 s"  # and the warm-up round, outside the ratio


def test_load_ratio_is_against_sparks_own_parquet_write() -> None:
    workload = tpch.WORKLOADS["TPCH_LOAD"]
    seconds = {"strata_load_s": 4.0, "parquet_load_s": 2.0, "native_load_s": 1.0}
    row = workload.summarize({"tpch": {"rows": 1000, **seconds}})
    assert row["value"] == 250 and row["reference"] == 500 and row["ratio"] == 0.5
    assert not workload.target.met(row["ratio"])
    assert row["trino_ctas_rows_per_s"] == 1000 and row["ratio_to_trino_ctas"] == 0.25  # beside it, no target


def test_each_query_names_the_tables_its_run_plans() -> None:
    assert queries.tables_of(queries.render(1, 0.01)) == ("lineitem",)
    # whole words: partsupp is not part, n_nationkey is not nation
    assert queries.tables_of(queries.render(16, 0.01)) == ("part", "supplier", "partsupp")
    assert queries.tables_of(queries.render(13, 0.01)) == ("customer", "orders")


def test_trino_sides_are_warmed_then_timed_in_alternating_order() -> None:
    """Each query runs once per side to warm it, then in rounds whose order alternates; the
    fastest round counts. Before, Strata's side ran first on a cold Trino, every time."""

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def query(self, sql: str) -> list[list[int]]:
            self.calls.append("strata" if "strata." in sql else "native")
            return [[len(self.calls)]]

    from strata_platform.tpch.workload import Tpch

    trino = Recorder()
    run = Tpch(0.01, spark=None, trino=trino, rest=None, progress=lambda line: None)  # type: ignore[arg-type]
    runs = run.run_trino_pair((1, 6), repeat=3)
    per_query = ["strata", "native", "strata", "native", "native", "strata", "strata", "native"]
    assert trino.calls == per_query * 2
    assert runs["trino_strata"][1].rows == [(1,)] and runs["trino_native"][1].rows == [(2,)]  # the warm-up's rows
    assert set(runs) == {"trino_strata", "trino_native"} and set(runs["trino_native"]) == {1, 6}


def test_sf1_runs_only_when_named() -> None:
    """TPCH_SF1 (many minutes) is left out of a plain run and runs when --only names it."""
    from strata.bench import _selection

    assert tpch.WORKLOADS["TPCH_SF1"].opt_in
    assert "TPCH_SF1" not in _selection(None)
    assert {"TPCH_TRINO", "W1"} <= set(_selection(None))
    assert _selection("tpch_sf1") == ["TPCH_SF1"]
    assert _selection("W1,TPCH_SF1") == ["W1", "TPCH_SF1"]


def test_sf1_ratio_is_after_load_with_refresh_and_worst_query_beside_it(tmp_path) -> None:
    workload = tpch.WORKLOADS["TPCH_SF1"]
    phases = {"after_load": {"trino_strata": {"1": 2.0, "18": 4.0}, "trino_native": {"1": 2.0, "18": 1.0}},
              "after_refresh": {"trino_strata": {"1": 1.0, "18": 2.0}, "trino_native": {"1": 1.0, "18": 1.0}}}
    part = {**phases, "strata_load_s": 50.0, "native_load_s": 40.0, "scale_factor": 1.0,
            "processes_peak_rss_mb": {}}
    row = workload.summarize({"tpch_sf1": part})
    assert workload.key == "ratio" and row["ratio"] == 2.0 and row["ratio_after_refresh"] == 1.414
    assert row["worst_query"] == "Q18 4.00x (after_load)" and row["worst_query_ratio"] == 4.0
    assert row["slow_queries"] == {"after_load": {"Q18": 4.0}, "after_refresh": {"Q18": 2.0}}
    # its own cached run, apart from the SF 0.1 entries' run
    planted = {"scale_factor": 1.0, "planted": True}
    (tmp_path / f"tpch-sf1-trino-{tpch.source_revision()}.json").write_text(json.dumps(planted))
    assert tpch.run_sf1(str(tmp_path), 1.0) == planted


def test_an_orders_lineitems_share_one_bucket(tmp_path) -> None:
    """lineitem is bucketed by l_orderkey: an order's lines sit side by side in one bucket's sorted
    files, as in Trino's own files. Bucketed by the whole key (l_orderkey, l_linenumber), a 1.6M-row
    file held lines of 877k orders, and Trino's partial aggregation by l_orderkey (Q18) passed on
    3.3M of the 6M rows at SF 1 where its own tables passed 1.5M."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import strata
    from strata_platform.tpch.tables import TABLES

    lineitem = TABLES["lineitem"]
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    options = {k: v for k, v in lineitem.strata_options(1.0).items() if not k.startswith("metadata.iceberg")}
    schema = lineitem.arrow_schema()
    table = catalog.create_table("db.lineitem", schema, primary_keys=list(lineitem.primary_key), options=options)
    given = {"l_orderkey": np.repeat(np.arange(1, 301, dtype=np.int64), 4),
             "l_linenumber": np.tile(np.arange(1, 5, dtype=np.int32), 300)}
    table.write(pa.table({f.name: pa.array(given[f.name], f.type) if f.name in given else pa.nulls(1200, f.type)
                          for f in schema}, schema=schema))
    buckets: dict[int, set[int]] = {}
    for split in table.scan():
        for f in split.files:
            for key in pq.read_table(split.file_path(f), columns=["l_orderkey"]).column(0).to_pylist():
                buckets.setdefault(key, set()).add(split.bucket)
    assert len(buckets) == 300 and all(len(b) == 1 for b in buckets.values())
    assert len({b for bs in buckets.values() for b in bs}) == 3  # SF 1: three buckets of whole orders
