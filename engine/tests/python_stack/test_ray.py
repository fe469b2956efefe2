"""Ray Data on a local cluster of 2 workers: ``strata.ray.read`` gives ``to_arrow``'s rows, one
read task per split of the filtered plan; ``strata.ray.write`` commits every task's files as one
snapshot, and a replay of its (commit user, identifier) writes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from stack_tables import SCHEMA, make_table, rows, sorted_rows

import strata
import strata.ray
from strata import col

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.local_storage_only(reason="Ray's workers open the warehouse by path")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("kind", ["pk_dv", "pk", "append_partitioned"])
def test_read_gives_to_arrows_rows_one_task_per_split(local_ray: None, catalog: strata.Catalog, kind: str) -> None:
    table = make_table(catalog, kind)
    predicate = (col("dt") == "2024-01-02") & (col("k").is_null() | (col("k") > 30))
    expected = sorted_rows(table.to_arrow(columns=["id", "k", "v"], filter=predicate))
    dataset = strata.ray.read(table, columns=["id", "k", "v"], filter=predicate).materialize()
    got = pa.concat_tables(ray.get(dataset.to_arrow_refs()))
    assert expected.num_rows > 0 and sorted_rows(got).cast(expected.schema).equals(expected)
    tasks = strata.ray.datasource(table, filter=predicate).get_read_tasks(2)
    assert len(tasks) == len(table.arrow_scan(filter=predicate).splits) < len(table.arrow_scan().splits)


@pytest.mark.parametrize("kind", ["pk", "append"])
def test_write_commits_once_and_a_replay_is_skipped(local_ray: None, catalog: strata.Catalog, kind: str) -> None:
    table = make_table(catalog, kind)
    before = table.snapshot_manager.latest_id()
    new_rows = rows(50_000, 4_000, null_dt=kind == "append").cast(SCHEMA)
    dataset = ray.data.from_arrow(new_rows).repartition(4)
    result = strata.ray.write(dataset, table, commit_user="nightly", identifier=7)
    snapshots = table.snapshots()
    assert [s.id for s in snapshots if s.id > before and s.commit_kind == "APPEND"] == result.snapshot_ids[:1]
    assert snapshots[-1].commit_user == "nightly" and snapshots[-1].commit_identifier == 7
    got = table.to_arrow(filter=col("id") >= 50_000)
    assert sorted_rows(got).equals(sorted_rows(new_rows).cast(got.schema))
    again = strata.ray.write(dataset, table, commit_user="nightly", identifier=7)
    assert again.skipped_as_duplicate and table.snapshot_manager.latest_id() == snapshots[-1].id


def test_an_identifier_without_a_commit_user_is_refused(local_ray: None, catalog: strata.Catalog) -> None:
    table = make_table(catalog, "append")
    with pytest.raises(ValueError, match="an identifier needs commit_user"):
        strata.ray.write(ray.data.from_arrow(rows(0, 3)), table, identifier=1)
