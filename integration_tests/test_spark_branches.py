"""Branches through the ``strata`` Spark data source, on a real local Spark: ``option("branch", ...)``
reads a branch, a batch write and a streaming sink write it exactly once (a replayed micro-batch
adds nothing), main stays untouched, and ``strata.spark.fast_forward`` publishes the branch from
the job's driver (write-audit-publish)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from strata.spark import fast_forward, write_table
from strata.spark.options import commit_user_for_checkpoint

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def ids(session: SparkSession, target: str, **options: str) -> list[tuple[int, str]]:
    df = session.read.format("strata").options(**options).load(target)
    return sorted((r["id"], r["v"]) for r in df.collect())


def engine_rows(table) -> list[tuple[int, str]]:
    data = table.to_arrow()
    return sorted(zip(data.column("id").to_pylist(), data.column("v").to_pylist(), strict=True))


def test_branch_read_write_stream_and_fast_forward(session: SparkSession, catalog, tmp_path: Path) -> None:
    table = catalog.create_table("db.t", SCHEMA, primary_keys=["id"], options={"bucket": "2"})
    table.write(pa.table({"id": [1, 2], "v": ["m1", "m2"]}, schema=SCHEMA))
    table.create_tag("base")
    table.create_branch("audit", from_tag="base")
    target = f"{catalog.warehouse}#db.t"
    main_rows = engine_rows(table)

    # batch: an upsert and an insert on the branch only
    df = session.createDataFrame([(2, "b2"), (3, "b3")], "id long, v string")
    write_table(df, target, branch="audit")
    assert engine_rows(catalog.get_table("db.t$branch_audit")) == [(1, "m1"), (2, "b2"), (3, "b3")]
    assert engine_rows(catalog.get_table("db.t")) == main_rows

    # streaming sink into the branch: one snapshot per micro-batch, a replay is skipped
    source = tmp_path / "src"
    source.mkdir()
    for n, rows in enumerate(([(4, "s4")], [(5, "s5")])):
        pq.write_table(pa.table({"id": [r[0] for r in rows], "v": [r[1] for r in rows]}, schema=SCHEMA),
                       source / f"part-{n}.parquet")
    checkpoint = tmp_path / "ck"
    stream = session.readStream.schema("id long, v string").option("maxFilesPerTrigger", 1).parquet(str(source))
    query = (stream.writeStream.format("strata").option("branch", "audit")
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(target))
    query.awaitTermination(300)
    assert query.exception() is None
    branch = catalog.get_table("db.t$branch_audit")
    user = commit_user_for_checkpoint(str(checkpoint))
    assert [s.commit_identifier for s in branch.snapshots() if s.commit_user == user] == [0, 1]
    # a replay of batch 1 (a driver restart between commit and checkpoint) is recognised
    replay = branch.new_commit(user).commit([], 1)
    assert replay.skipped_as_duplicate
    expected = [(1, "m1"), (2, "b2"), (3, "b3"), (4, "s4"), (5, "s5")]
    assert ids(session, target, branch="audit") == expected
    assert engine_rows(branch) == expected
    assert engine_rows(catalog.get_table("db.t")) == main_rows

    # publish from the driver: main becomes the branch
    latest = fast_forward(target, "audit")
    assert latest == branch.latest_snapshot().id
    assert engine_rows(catalog.get_table("db.t")) == expected
