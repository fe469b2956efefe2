"""``Table.stream``: the changes of each snapshot, in order, as ``read_incremental`` gives them;
the consumer's position is saved, a restarted stream resumes there, and expiry keeps what the
consumer has not read."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from stack_tables import SCHEMA, rows

import strata
from strata.errors import SnapshotNotFoundError


def _changes(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[tuple]:
    table = pa.Table.from_batches(batches, schema=schema)
    return sorted(zip(table.column("_ROW_KIND").to_pylist(), table.column("id").to_pylist(), strict=True))


def test_the_stream_gives_each_snapshots_changes_as_read_incremental(table: strata.Table) -> None:
    latest = table.snapshot_manager.latest_id()
    assert latest is not None
    stream = table.stream(from_snapshot=1, follow=False)
    got = _changes(list(stream), stream.schema)
    expected = table.read_incremental(0, latest)
    assert got == sorted(zip(expected.column("_ROW_KIND").to_pylist(), expected.column("id").to_pylist(),
                             strict=True))
    if table.schema.primary_keys:
        assert any(kind == "-D" for kind, _ in got)


def test_a_consumer_resumes_where_it_stopped_and_expiry_keeps_its_snapshots(table: strata.Table) -> None:
    latest = table.snapshot_manager.latest_id()
    assert latest is not None and latest >= 3
    stream = iter(table.stream(from_snapshot=1, consumer_id="mirror", follow=False))
    first_batch = next(stream)
    assert first_batch.num_rows > 0
    assert table.consumers.consumer("mirror") is None  # snapshot 1 not finished: nothing saved
    del stream
    # the position is saved when a snapshot's batches are all handed out and the next is asked for
    stream2 = table.stream(consumer_id="mirror", from_snapshot=1, follow=False)
    it = iter(stream2)
    while stream2.next_snapshot == 1:
        next(it)
    saved = table.consumers.consumer("mirror")
    assert saved is not None and saved == stream2.next_snapshot >= 2  # snapshots without changes skipped
    table.expire_snapshots(retain_min=1, retain_max=1)
    assert table.snapshot_manager.earliest_id() == saved  # kept for the consumer
    resumed = table.stream(consumer_id="mirror", follow=False)
    assert resumed.next_snapshot == saved
    expected = table.read_incremental(saved - 1, latest)
    assert sum(b.num_rows for b in resumed) == expected.num_rows
    assert table.consumers.consumer("mirror") == latest + 1


def test_a_stream_follows_new_snapshots(table: strata.Table) -> None:
    stream = iter(table.stream(poll_interval=0.01))
    writer = threading.Thread(target=table.write, args=(rows(10**6, 5, null_dt=False).cast(SCHEMA),))
    writer.start()
    batches = [next(stream)]
    while sum(b.num_rows for b in batches) < 5:  # one batch per partition and bucket
        batches.append(next(stream))
    writer.join()
    got = pa.Table.from_batches(batches).sort_by("id")
    assert got.column("_ROW_KIND").to_pylist() == ["+I"] * 5
    assert got.column("id").to_pylist() == list(range(10**6, 10**6 + 5))


def test_a_stream_of_an_expired_snapshot_says_so(table: strata.Table) -> None:
    table.expire_snapshots(retain_min=1, retain_max=1)
    with pytest.raises(SnapshotNotFoundError, match="snapshot 1, which has expired"):
        list(table.stream(from_snapshot=1, follow=False))


def test_a_stream_of_the_log_of_a_table_without_one_says_so(table: strata.Table) -> None:
    with pytest.raises(ValueError, match=r"has no log store \(log.system=kafka\)"):
        table.stream(log=True)
    assert not table.stream(follow=False).reads_log
