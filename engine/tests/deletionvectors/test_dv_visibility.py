"""When an acknowledged batch of a deletion-vector primary-key table becomes visible.

Readers of such a table skip level 0, so a commit publishes its batch (APPEND, level-0 files)
and then moves those files up (COMPACT). When the COMPACT fails after the APPEND published, the
commit still succeeds (the batch is durable); before, its rows then read as the previous values
until some later compaction of the bucket, and a writer kept for more commits went on from levels
the table did not have. Here the COMPACT snapshot's publish fails (a FileIO that refuses to write
it, as a store outage would) and the tests read the table as a user would, against a plain dict.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from storage_faults import CompactOutage

from strata import metrics
from strata.catalog.filesystem import FileSystemCatalog
from strata.format.bucket import bucket_ids
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("k", pa.int64(), nullable=False), pa.field("v", pa.string())])
KEYS = list(range(20))
# one publish attempt and one retry per COMPACT, with short back-offs
OPTIONS = {"bucket": "2", "deletion-vectors.enabled": "true", "commit.max-retries": "1",
           "commit.min-retry-wait": "1 ms", "commit.max-retry-wait": "5 ms"}


def dv_table(tmp_path: Path, io: CompactOutage, **options: str) -> Table:
    catalog = FileSystemCatalog(str(tmp_path / "warehouse"), file_io=io)
    catalog.create_database("db")
    return catalog.create_table("db.t", SCHEMA, primary_keys=["k"], options={**OPTIONS, **options})


def batch(values: dict[int, str]) -> pa.Table:
    return pa.table({"k": list(values), "v": list(values.values())}, schema=SCHEMA)


def read(table: Table, snapshot_id: int | None = None) -> dict[int, str]:
    data = table.to_arrow(snapshot_id=snapshot_id)
    return dict(zip(data.column("k").to_pylist(), data.column("v").to_pylist(), strict=True))


def abandoned(table: str, result: str) -> float:
    if not metrics.ENABLED:
        return 0.0
    import prometheus_client

    value = prometheus_client.REGISTRY.get_sample_value(
        "strata_commit_compactions_abandoned_total", {"table": table, "result": result})
    return value or 0.0


def test_a_batch_whose_compaction_failed_once_is_visible_when_write_returns(tmp_path: Path) -> None:
    io = CompactOutage()
    table = dv_table(tmp_path, io)
    table.write(batch(dict.fromkeys(KEYS, "old")))
    recovered = abandoned("db.t", "recovered")
    io.failures = 2  # both publish attempts of the commit's own COMPACT
    result = table.write(batch(dict.fromkeys(KEYS, "new")))
    assert io.failures == 0
    assert result.compaction_failure is not None  # the batch published, its compaction did not
    assert result.visible and result.retried_compaction_ids  # compacted again on the latest snapshot
    assert result.visible_from == result.retried_compaction_ids[-1]
    assert read(table) == read(table, result.visible_from) == dict.fromkeys(KEYS, "new")
    if metrics.ENABLED:
        assert abandoned("db.t", "recovered") == recovered + 1


def test_a_batch_left_at_level_0_becomes_visible_at_the_next_commit_to_its_bucket(tmp_path: Path) -> None:
    io = CompactOutage()
    table = dv_table(tmp_path, io, **{"commit.compaction-retry-timeout": "20 ms"})
    table.write(batch(dict.fromkeys(KEYS, "old")))
    io.failures = 1_000_000  # every COMPACT fails until the retries give up
    result = table.write(batch(dict.fromkeys(KEYS, "new")))
    assert result.snapshot_ids and not result.visible and result.visible_from is None
    assert result.not_yet_visible is not None and "durably" in result.not_yet_visible
    assert read(table) == dict.fromkeys(KEYS, "old")  # as the result says: durable, not yet visible

    io.failures = 0
    in_bucket = dict(zip(KEYS, bucket_ids([pa.array(KEYS, pa.int64())], 2).tolist(), strict=True))
    first = [k for k in KEYS if in_bucket[k] == in_bucket[0]]
    others = [k for k in KEYS if in_bucket[k] != in_bucket[0]]
    assert first and others
    third = table.write(batch({0: "third"}))  # a new writer of key 0's bucket moves its level 0 up
    assert third.visible and third.compaction_failure is None
    expected = {**dict.fromkeys(first, "new"), **dict.fromkeys(others, "old"), 0: "third"}
    assert read(table) == expected
    table.compact()  # the maintenance compaction moves the other bucket's level 0 up
    assert read(table) == {**dict.fromkeys(KEYS, "new"), 0: "third"}


class CompactedMeanwhile(CompactOutage):
    """A COMPACT outage during which another committer (a maintenance job with a FileIO of its
    own) compacts the table: after the last refusal, once the publish lock is released,
    `meanwhile` runs."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], object] = lambda: None
        self.due = False

    def write_new(self, path: str, data: bytes) -> bool:
        refusing = bool(self.failures)
        try:
            return super().write_new(path, data)
        finally:
            self.due = refusing and not self.failures

    @contextlib.contextmanager
    def exclusive_lock(self, path: str) -> Iterator[object]:
        try:
            with super().exclusive_lock(path) as handle:
                yield handle
        finally:
            if self.due:
                self.due = False
                self.meanwhile()


def test_a_batch_another_committer_compacted_is_visible_from_the_snapshot_it_names(tmp_path: Path) -> None:
    """The commit's COMPACT fails, and before it is done again a maintenance compaction moves the
    batch's level-0 files up: nothing is left to compact, and the batch is visible from that
    compaction's snapshot, not from the commit's APPEND (a read there, which skips level 0, showed
    the old values though the result said visible)."""
    io = CompactedMeanwhile()
    table = dv_table(tmp_path, io)
    table.write(batch(dict.fromkeys(KEYS, "old")))
    maintenance = FileSystemCatalog(str(tmp_path / "warehouse")).get_table("db.t")
    io.meanwhile = lambda: maintenance.compact(full=True, commit_user="maintenance")
    io.failures = 2
    result = table.write(batch(dict.fromkeys(KEYS, "new")))
    latest = table.latest_snapshot()
    assert result.compaction_failure is not None and not result.retried_compaction_ids
    assert latest is not None and latest.commit_user == "maintenance" and latest.id > max(result.snapshot_ids)
    assert result.visible and result.visible_from == latest.id
    assert read(table, result.visible_from) == dict.fromkeys(KEYS, "new")
    assert read(table, max(result.snapshot_ids)) == dict.fromkeys(KEYS, "old")  # its APPEND: level 0 skipped


def test_a_kept_writer_whose_compaction_was_abandoned_restores_its_buckets(tmp_path: Path) -> None:
    io = CompactOutage()
    table = dv_table(tmp_path, io)
    model: dict[int, str] = {}
    writer, commit = table.new_write("job"), table.new_commit("job")
    for identifier in range(1, 6):
        values = {k: f"v{identifier}" for k in KEYS[identifier - 1::identifier]}
        writer.write_arrow(batch(values))
        messages = writer.prepare_commit()
        late = {k: f"late{identifier}" for k in (3, 11)}
        writer.write_arrow(batch(late))  # buffered between prepare_commit and commit: the next commit's
        io.failures = 2 if identifier == 2 else 0
        result = commit.commit(messages, identifier)
        model.update(values)
        assert result.snapshot_ids
        assert (result.compaction_failure is not None) == (identifier == 2), result.compaction_failure
        assert read(table) == model
        model.update(late)
    result = commit.commit(writer.prepare_commit(), 6)
    assert result.compaction_failure is None
    assert read(table) == model
    writer.close()


def test_a_lookup_changelog_is_produced_when_the_compaction_is_done_again(tmp_path: Path) -> None:
    """The lookup changelog producer writes a batch's changelog when its level-0 files move up: an
    abandoned compaction lost it (a streaming reader of the changelog never saw the update)."""
    io = CompactOutage()
    table = dv_table(tmp_path, io, **{"deletion-vectors.enabled": "false", "changelog-producer": "lookup"})
    table.write(batch({1: "old", 2: "old"}))
    before = table.latest_snapshot()
    assert before is not None
    io.failures = 2
    result = table.write(batch({1: "new"}))
    assert result.compaction_failure is not None and result.visible
    changes = table.read_incremental(before.id, result.retried_compaction_ids[-1])
    assert sorted(zip(changes.column("_ROW_KIND").to_pylist(), changes.column("v").to_pylist(), strict=True)) \
        == [("+U", "new"), ("-U", "old")]


def test_a_table_without_deletion_vectors_needs_no_retry(tmp_path: Path) -> None:
    """Readers of a plain primary-key table merge level 0: the batch is visible without its
    compaction, so nothing is retried (and nothing else changes)."""
    io = CompactOutage()
    table = dv_table(tmp_path, io, **{"deletion-vectors.enabled": "false"})
    table.write(batch(dict.fromkeys(KEYS, "old")))
    with table.new_write() as writer:
        writer.write_arrow(batch(dict.fromkeys(KEYS, "new")))
        writer.compact(full=True)
        messages = writer.prepare_commit(wait_compaction=True)
    io.failures = 2
    result = table.new_commit().commit(messages)
    assert result.compaction_failure is not None and result.visible and not result.retried_compaction_ids
    assert read(table) == dict.fromkeys(KEYS, "new")


def test_a_replayed_write_says_whether_its_batch_is_visible_too(tmp_path: Path) -> None:
    table = dv_table(tmp_path, CompactOutage())
    table.write(batch({1: "a"}), commit_user="job", identifier=1)
    replay = table.write(batch({1: "a"}), commit_user="job", identifier=1)
    assert replay.skipped_as_duplicate and replay.visible
