"""pypaimon 2.1 reads primary-key tables that Strata's writers compacted into several levels
(asynchronous universal compaction with a low trigger, then a dedicated full compaction and new
level-0 runs on top), for every merge engine pypaimon merges: both must see the same rows."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from mergetree.test_merge_engines_pypaimon import ENGINES, SCHEMA, batches, load, pypaimon, sorted_rows

import strata
from strata.table.table import Table

pytestmark = pytest.mark.pypaimon

ROUNDS = 3


def levels(table: Table) -> collections.Counter[int]:
    return collections.Counter(f.level for s in table.scan() for f in s.files)


def base(engine: str) -> pa.Table:
    """A large run of other keys: fully compacted, it is the top level that later, smaller runs
    are not worth merging into (size ratio), so they compact into the levels below it. Its bytes
    are in random values: consecutive keys delta-encode to almost nothing."""
    ids = np.arange(1000, 4000)
    noise = np.random.default_rng(1).random(len(ids))
    return pa.table({"id": ids, "v": np.ones(len(ids), np.int64), "d": noise, "s": [f"b{i % 7}" for i in ids],
                     "g": ids % 5, "op": ["+I"] * len(ids)}, schema=SCHEMA)


def churn(table: Table, engine: str) -> None:
    """Several runs per commit and several commits, so the writers' compaction fills levels."""
    table.write(base(engine))
    table.compact(full=True)
    commit = table.new_commit("churn")
    with table.new_write("churn") as writer:
        for r in range(ROUNDS):
            for data in batches(engine):
                writer.write_arrow(data)
            commit.commit(writer.prepare_commit(), identifier=r)


def test_pypaimon_reads_multi_level_tables_of_every_merge_engine(tmp_path) -> None:
    warehouse = str(tmp_path / "warehouse")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    expected, jobs = {}, []
    for engine, engine_options in ENGINES.items():
        options = {"bucket": "2", "rowkind.field": "op", "write-buffer-size": "1 kb",
                   "write-buffer-spillable": "false",  # a level-0 run per buffer: many levels
                   "num-sorted-run.compaction-trigger": "3", "num-levels": "5", **engine_options}
        table = catalog.create_table(f"db.{engine}", SCHEMA, primary_keys=["id"], options=options)
        churn(table, engine)
        auto = levels(table)
        if engine == "first_row":  # its writers compact at every commit: Paimon skips level 0
            assert 0 not in auto, auto
        else:  # level 0, an intermediate level and the top level
            assert len(auto) >= 3 and 0 in auto, (engine, auto)
        expected[f"{engine}_auto"] = sorted_rows(table.to_arrow())
        jobs.append({"op": "read", "table": f"db.{engine}", "out": str(tmp_path / f"{engine}_auto.arrow")})
    pypaimon(warehouse, jobs)
    for name, rows in expected.items():
        assert sorted_rows(load(str(tmp_path / f"{name}.arrow"))) == rows, name

    expected, jobs = {}, []
    for engine in ENGINES:
        table = catalog.get_table(f"db.{engine}")
        table.compact(full=True)
        table.write(batches(engine)[0])  # a new level-0 run over the fully compacted top level
        top = table.core.num_levels - 1
        assert top in levels(table), (engine, levels(table))
        expected[f"{engine}_full"] = sorted_rows(table.to_arrow())
        jobs.append({"op": "read", "table": f"db.{engine}", "out": str(tmp_path / f"{engine}_full.arrow")})
    pypaimon(warehouse, jobs)
    for name, rows in expected.items():
        assert sorted_rows(load(str(tmp_path / f"{name}.arrow"))) == rows, name
