"""Options of the ``strata`` streaming sink for pipelines, on a real local Spark:

* ``watermark.column``: each micro-batch commit records the event-time maximum as the snapshot
  watermark, and a downstream stream with ``scan.bounded.watermark`` ends at the right snapshot;
* ``lineage.job``: a plain ``readStream.format("strata") -> writeStream.format("strata")`` stage
  records lineage that ``consistent_set`` and ``lineage_graph`` pick up.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from strata.lineage import consistent_set, lineage_graph
from strata.lineage.record import JOB_KEY, ROOT_PREFIX, SOURCE_PREFIX

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark
EVENTS = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("ts", pa.timestamp("ms")),
                    pa.field("v", pa.string())])
EPOCH = datetime.datetime(1970, 1, 1)


def events(ids: list[int], millis: list[int], tag: str) -> pa.Table:
    stamps = [EPOCH + datetime.timedelta(milliseconds=m) for m in millis]
    return pa.table({"id": ids, "ts": stamps, "v": [f"{tag}{i}" for i in ids]}, schema=EVENTS)


def run_stage(session: SparkSession, source: str, target: str, checkpoint: Path, **sink_options: str) -> None:
    """One AvailableNow run of source -> target, one upstream snapshot per micro-batch."""
    stream = (session.readStream.format("strata").option("scan.mode", "from-snapshot")
              .option("scan.snapshot-id", "1").option("max-rows-per-trigger", "1").load(source))
    query = (stream.writeStream.format("strata").options(**sink_options)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(target))
    query.awaitTermination(300)
    assert query.exception() is None


def read_ids(session: SparkSession, source: str, **options: str) -> list[int]:
    got: list[int] = []

    def collect(df: DataFrame, _batch: int) -> None:
        got.extend(r["id"] for r in df.collect())

    query = (session.readStream.format("strata").options(**options).load(source).writeStream.foreachBatch(collect)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    return sorted(got)


def test_watermark_column_ends_a_bounded_downstream_stream(session: SparkSession, catalog, tmp_path: Path) -> None:
    upstream = catalog.create_table("db.raw", EVENTS)
    catalog.create_table("db.clean", EVENTS)
    upstream.write(events([1, 2], [500, 1000], "a"))
    upstream.write(events([3], [2000], "b"))
    upstream.write(events([4], [1500], "c"))  # late: the watermark does not move back
    upstream.write(events([5, 6], [4000, 3000], "d"))
    source, target = f"{catalog.warehouse}#db.raw", f"{catalog.warehouse}#db.clean"
    run_stage(session, source, target, tmp_path / "ck", **{"watermark.column": "ts"})

    clean = catalog.get_table("db.clean")
    assert [s.watermark for s in clean.snapshots()] == [1000, 2000, 2000, 4000]
    bounded = {"scan.mode": "from-snapshot", "scan.snapshot-id": "1", "scan.bounded.watermark": "2000"}
    assert read_ids(session, target, **bounded) == [1, 2, 3, 4]  # ends before snapshot 4 (watermark 4000)
    assert read_ids(session, target, **{**bounded, "scan.bounded.watermark": "1999"}) == [1, 2]


def test_watermark_column_must_be_an_event_time(session: SparkSession, catalog, tmp_path: Path) -> None:
    catalog.create_table("db.raw", EVENTS).write(events([1], [1], "a"))
    catalog.create_table("db.clean", EVENTS)
    source, target = f"{catalog.warehouse}#db.raw", f"{catalog.warehouse}#db.clean"
    with pytest.raises(Exception, match=r"watermark\.column: column 'v' of db\.clean is string"):
        run_stage(session, source, target, tmp_path / "ck1", **{"watermark.column": "v"})
    with pytest.raises(Exception, match=r"watermark\.column='nope' is not a column of db\.clean"):
        run_stage(session, source, target, tmp_path / "ck2", **{"watermark.column": "nope"})


def test_lineage_option_records_the_consumed_upstream_snapshot(session: SparkSession, catalog,
                                                               tmp_path: Path) -> None:
    upstream = catalog.create_table("db.raw", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    catalog.create_table("db.copy", EVENTS, primary_keys=["id"], options={"bucket": "2"})
    upstream.write(events([1, 2, 3], [1, 2, 3], "a"))
    upstream.write(events([2, 4], [4, 5], "b"))
    source, target = f"{catalog.warehouse}#db.raw", f"{catalog.warehouse}#db.copy"
    checkpoint = tmp_path / "ck"
    run_stage(session, source, target, checkpoint, **{"lineage.job": "copy-job"})

    copy = catalog.get_table("db.copy")
    props = copy.latest_snapshot().properties
    assert props[JOB_KEY] == "copy-job" and props[SOURCE_PREFIX + "db.raw"] == "2"
    assert props[ROOT_PREFIX + "db.raw"] == "2"  # the upstream records no lineage: it is the root

    upstream.write(events([5], [6], "c"))  # not consumed yet: the consistent set stays at snapshot 2
    cset = consistent_set([upstream, copy])
    assert cset is not None and cset.snapshot_of(upstream) == 2
    at_set = copy.to_arrow(snapshot_id=cset.snapshot_of(copy)).sort_by("id")
    assert at_set == upstream.to_arrow(snapshot_id=2).sort_by("id")
    edge = lineage_graph(catalog).upstream_of("db.copy")[0]
    assert (edge.source, edge.job, edge.consumed, edge.behind_snapshots) == ("db.raw", "copy-job", "2", 1)

    run_stage(session, source, target, checkpoint, **{"lineage.job": "copy-job"})
    cset = consistent_set([upstream, copy])
    assert cset is not None and cset.snapshots == {"db.raw": 3, "db.copy": copy.latest_snapshot().id}
    assert copy.to_arrow().sort_by("id") == upstream.to_arrow().sort_by("id")
    edge = lineage_graph(catalog).upstream_of("db.copy")[0]
    assert (edge.consumed, edge.behind_snapshots) == ("3", 0)
