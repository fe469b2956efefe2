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


def test_refresh_target_is_on_seconds_per_round_not_visibility() -> None:
    workload = tpch.WORKLOADS["TPCH_REFRESH"]
    rounds = [{"native_s": 2.0, "strata_s": 5.0, "visibility_s": 0.5},
              {"native_s": 2.0, "strata_s": 3.0, "visibility_s": 0.7}]
    row = workload.summarize({"tpch": {"refresh": rounds}})
    assert workload.key == "ratio" and row["ratio"] == 2.0 and not workload.target.met(row["ratio"])
    assert row["visibility_p99_s"] == 0.7  # reported beside it


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
