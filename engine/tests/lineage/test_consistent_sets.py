"""Lineage recording, consistent snapshot sets, tags and the lineage graph (Python API pipeline)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata.errors import SnapshotNotFoundError
from strata.lineage import (
    consistent_set,
    effective_lineage,
    lineage_graph,
    lineage_properties,
    parse_lineage,
    read_consistent,
    tag_consistent_set,
)
from strata.lineage.record import CONFLICT_KEY, JOB_KEY, ROOT_PREFIX, SOURCE_PREFIX
from strata.snapshot.snapshot_manager import SnapshotManager

sys.path.insert(0, str(Path(__file__).parent))
from pipeline_model import (
    SOURCE,
    TOTALS,
    Pipeline,
    commit,
    expected_join,
    join_rows,
    source_events,
    totals_of,
)

pytestmark = pytest.mark.lineage


@pytest.fixture
def pipeline(catalog: strata.Catalog) -> Pipeline:
    return Pipeline(catalog)


def test_commit_records_job_sources_and_roots(pipeline: Pipeline) -> None:
    pipeline.step()
    pipeline.step()  # totals runs on the second tick
    props = pipeline.totals.latest_snapshot().properties
    assert props == {JOB_KEY: "totals-job", SOURCE_PREFIX + "db.orders": "2", ROOT_PREFIX + SOURCE: "10"}
    lineage = parse_lineage(props)
    assert lineage is not None and lineage.sources == {"db.orders": 2} and lineage.roots == {SOURCE: "10"}
    assert parse_lineage(pipeline.orders.latest_snapshot().properties).offsets == {SOURCE: "10"}


def test_consistent_join_equals_the_source_join_and_latest_differs(pipeline: Pipeline) -> None:
    latest_differed = 0
    for _ in range(13):
        pipeline.step()
        cset = consistent_set(pipeline.tables)
        if pipeline.step_no < pipeline.tiers_every:
            assert cset is None  # the slowest stage has not committed yet
            continue
        assert cset is not None
        point = int(cset.point[SOURCE])
        assert point <= pipeline.offset
        assert join_rows(*read_consistent(pipeline.tables, cset).values()) == expected_join(point)
        latest = join_rows(*(t.to_arrow() for t in pipeline.tables))
        latest_differed += latest != expected_join(pipeline.offset) and latest != expected_join(point)
    assert latest_differed > 0  # reading each table's latest snapshot mixes points


def test_consistent_point_is_the_newest_every_table_reached(pipeline: Pipeline) -> None:
    for _ in range(6):
        pipeline.step()
    # tiers ran at ticks 3 and 6, from totals of ticks 2 and 6 -> source offsets 10 and 30
    cset = consistent_set(pipeline.tables)
    assert cset is not None and cset.point == {SOURCE: "30"}
    assert cset.snapshots == {"db.orders": 6, "db.totals": 3, "db.tiers": 2}
    pipeline.step()  # orders moves on; the set stays
    assert consistent_set(pipeline.tables) == cset
    # a subset of the pipeline can be newer: orders + totals at offset 30 is also newest for them
    assert consistent_set([pipeline.orders, pipeline.totals]).point == {SOURCE: "30"}


def test_compaction_keeps_the_point(pipeline: Pipeline) -> None:
    for _ in range(6):
        pipeline.step()
    pipeline.totals.compact(full=True)
    assert pipeline.totals.latest_snapshot().commit_kind == "COMPACT"
    assert effective_lineage(pipeline.totals, pipeline.totals.snapshot_manager.latest_id()).roots == {SOURCE: "30"}
    cset = consistent_set(pipeline.tables)
    assert cset.snapshots["db.totals"] == pipeline.totals.snapshot_manager.latest_id()
    assert join_rows(*read_consistent(pipeline.tables, cset).values()) == expected_join(30)


def _reads_of_consistent_set(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> int:
    expected = consistent_set(pipeline.tables)
    reads: list[int] = []
    read = SnapshotManager.snapshot
    with monkeypatch.context() as patch:
        patch.setattr(SnapshotManager, "snapshot", lambda self, sid: reads.append(sid) or read(self, sid))
        assert consistent_set(pipeline.tables) == expected
    return len(reads)


@pytest.mark.local_storage_only(reason="counts snapshot reads; an object store reads a walk's snapshots 16 at a time")
def test_consistent_set_reads_down_to_the_set_not_the_whole_history(pipeline: Pipeline,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(12):  # every stage ran at the last step: the newest snapshots are the set
        pipeline.step()
    early = _reads_of_consistent_set(pipeline, monkeypatch)
    for _ in range(24):  # the same phase of the stages (every 2 and 3 steps), three times the history
        pipeline.step()
    assert _reads_of_consistent_set(pipeline, monkeypatch) == early == len(pipeline.tables)
    pipeline.step()  # orders ahead: proving that totals never reached its newest point walks totals
    live = sum(len(t.snapshots()) for t in pipeline.tables)
    assert _reads_of_consistent_set(pipeline, monkeypatch) <= live  # each snapshot read once at most


def test_manual_write_into_a_derived_table_is_not_consistent(pipeline: Pipeline) -> None:
    for _ in range(6):
        pipeline.step()
    before = consistent_set(pipeline.tables)
    pipeline.tiers.write(pa.table({"customer": ["c0"], "tier": ["platinum"]}))  # no lineage
    assert consistent_set(pipeline.tables) == before  # the older, consistent snapshot of tiers


def test_a_root_table_without_lineage(catalog: strata.Catalog) -> None:
    """A plain table is a root: a downstream commit that read its snapshot 2 matches it at 2."""
    orders = catalog.create_table("db.raw", source_events(0).schema, primary_keys=["id"], options={"bucket": "1"})
    totals = catalog.create_table("db.sums", TOTALS, primary_keys=["customer"], options={"bucket": "1"})
    orders.write(source_events(4))
    orders.write(source_events(8).slice(4))
    commit(totals, totals_of(orders.to_arrow(snapshot_id=2)), lineage_properties("sums", reads={orders: 2}))
    orders.write(source_events(9).slice(8))
    cset = consistent_set([orders, totals])
    assert cset.point == {"db.raw": "2"} and cset.snapshots == {"db.raw": 2, "db.sums": 1}


def test_fan_in_from_different_points_records_a_conflict(pipeline: Pipeline, catalog: strata.Catalog) -> None:
    for _ in range(4):
        pipeline.step()
    merged = catalog.create_table("db.merged", TOTALS, primary_keys=["customer"], options={"bucket": "1"})
    # totals@2 derives from orders@4 (offset 20); orders@3 is offset 15
    agreeing = lineage_properties("merge-job", reads={pipeline.orders: 4, pipeline.totals: 2})
    assert CONFLICT_KEY not in agreeing and agreeing[ROOT_PREFIX + SOURCE] == "20"
    props = lineage_properties("merge-job", reads={pipeline.orders: 3, pipeline.totals: 2})
    assert props[CONFLICT_KEY] == SOURCE and ROOT_PREFIX + SOURCE not in props
    commit(merged, totals_of(pipeline.orders.to_arrow()), props)
    assert consistent_set([pipeline.orders, merged]) is None
    with pytest.raises(ValueError, match=r"db.merged.*inconsistent upstream positions of kafka.orders"):
        lineage_properties("next", reads={merged: 1})


def test_tags_per_point_are_readable_and_survive_expiry(pipeline: Pipeline) -> None:
    for _ in range(6):
        pipeline.step()
    cset = consistent_set(pipeline.tables)
    name = tag_consistent_set(pipeline.tables, cset)
    assert name == "lineage-kafka.orders-30"
    assert tag_consistent_set(pipeline.tables, cset) == name  # idempotent
    for _ in range(6):
        pipeline.step()
    pipeline.orders.expire_snapshots(retain_min=1, retain_max=1)
    with pytest.raises(SnapshotNotFoundError):
        pipeline.orders.to_arrow(snapshot_id=cset.snapshots["db.orders"])
    tagged = [t.to_arrow(tag=name) for t in pipeline.tables]
    assert join_rows(*tagged) == expected_join(30)


def test_graph_shows_jobs_edges_and_lag(pipeline: Pipeline) -> None:
    for _ in range(7):
        pipeline.step()
    pipeline.orders.compact(full=True)  # snapshot 8: a compaction leaves nothing new to consume
    ingested = pipeline.orders.snapshot_manager.snapshot(7)
    graph = lineage_graph(pipeline.catalog, now_millis=ingested.time_millis + 5000)
    assert graph.jobs == {"ingest-job": ["db.orders"], "totals-job": ["db.totals"], "tiers-job": ["db.tiers"]}
    edges = {(e.source, e.target): e for e in graph.edges}
    assert set(edges) == {(SOURCE, "db.orders"), ("db.orders", "db.totals"), ("db.totals", "db.tiers")}
    assert edges[(SOURCE, "db.orders")].consumed == "35" and edges[(SOURCE, "db.orders")].source_kind == "external"
    totals_edge = edges[("db.orders", "db.totals")]
    assert (totals_edge.consumed, totals_edge.upstream_latest, totals_edge.behind_snapshots) == ("6", 8, 1)
    assert totals_edge.behind_millis == 5000  # the one unconsumed snapshot is orders' 7th
    tiers_edge = edges[("db.totals", "db.tiers")]
    assert (tiers_edge.behind_snapshots, tiers_edge.behind_millis) == (0, 0)


def test_bad_input_is_named(pipeline: Pipeline) -> None:
    with pytest.raises(ValueError, match="job name must not be blank"):
        lineage_properties(" ")
    with pytest.raises(ValueError, match="external source name 'a,b'"):
        lineage_properties("job", offsets={"a,b": 1})
    with pytest.raises(ValueError, match="must be distinct"):
        consistent_set([pipeline.orders, pipeline.orders])
    with pytest.raises(ValueError, match=r"db.orders, db.totals, db.tiers have no consistent snapshot set"):
        read_consistent(pipeline.tables)
    pipeline.step()
    with pytest.raises(KeyError, match=r"db.other is not in the consistent set"):
        consistent_set([pipeline.orders]).snapshot_of("db.other")
    with pytest.raises(SnapshotNotFoundError, match=r"snapshot 9 of db.orders does not exist"):
        lineage_properties("job", reads={pipeline.orders: 9})
