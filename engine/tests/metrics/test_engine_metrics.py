"""The engine's Prometheus metrics move when commits, compactions, writes and scans happen; their
names follow Prometheus conventions; the process exposes them over HTTP or as a textfile."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

import strata
from strata import metrics
from strata.errors import CommitConflictError
from strata.table.table import Table

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])
PART_SCHEMA = pa.schema([pa.field("day", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
                         pa.field("v", pa.int64())])
README = Path(__file__).resolve().parents[3] / "observability" / "README.md"


def value(name: str, **labels: str) -> float:
    """A sample of the default registry, 0 when the series does not exist yet."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


class Delta:
    """Samples before and after a block: ``d = Delta(); ...; d("strata_x_total", table=...)``."""

    def __init__(self) -> None:
        self.before = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for family in REGISTRY.collect() for s in family.samples}

    def __call__(self, name: str, **labels: str) -> float:
        return value(name, **labels) - self.before.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def catalog(warehouse: str, warehouse_options: dict[str, str]) -> Iterator[strata.Catalog]:
    cat = strata.load_catalog(warehouse, **warehouse_options)
    cat.create_database("m")
    yield cat


def rows(ids: range, v: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "v": pa.array([v] * len(ids), pa.int64())})


def pk_table(catalog: strata.Catalog, name: str, **options: str) -> Table:
    return catalog.create_table(f"m.{name}", SCHEMA, primary_keys=["id"], options={"bucket": "2", **options})


# -- commits -------------------------------------------------------------------------------------------
def test_a_commit_counts_its_snapshot_files_bytes_and_records(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "commits")
    d = Delta()
    result = table.write(rows(range(100)))
    labels = {"table": "m.commits", "kind": "append"}
    assert d("strata_commits_total", result="success", **labels) == 1
    assert d("strata_commit_attempts_total", **labels) == 1
    assert d("strata_commit_duration_seconds_count", **labels) == 1
    assert d("strata_commit_duration_seconds_sum", **labels) > 0
    files = [f for s in table.scan() for f in s.files]
    assert d("strata_files_added_total", **labels) == len(files) == 2  # one file per bucket
    assert d("strata_bytes_added_total", **labels) == sum(f.file_size for f in files)
    assert d("strata_files_deleted_total", **labels) == 0
    assert d("strata_records_appended_total", table="m.commits") == 100
    assert value("strata_snapshot_latest_id", table="m.commits") == result.snapshot_ids[0] == 1
    assert 0 <= value("strata_snapshot_latest_age_seconds", table="m.commits") < 60
    # the results that have not happened yet exist at zero, so rate() and alerts have a series
    for result_label in ("noop", "conflict", "failed"):
        assert REGISTRY.get_sample_value("strata_commits_total", {**labels, "result": result_label}) == 0


def table_series(table: str) -> list[str]:
    return [s.name for family in REGISTRY.collect() for s in family.samples if s.labels.get("table") == table]


def test_a_dropped_table_leaves_the_metrics_and_a_new_one_of_its_name_starts_at_zero(
        catalog: strata.Catalog) -> None:
    dropped, kept = pk_table(catalog, "dropped"), pk_table(catalog, "kept")
    for table in (dropped, kept):
        table.write(rows(range(10)))
        table.to_arrow()
    assert table_series("m.dropped") and table_series("m.kept")
    catalog.drop_table("m.dropped")
    assert table_series("m.dropped") == []
    assert value("strata_commits_total", table="m.kept", kind="append", result="success") >= 1
    again = pk_table(catalog, "dropped")
    again.write(rows(range(5)))
    labels = {"table": "m.dropped", "kind": "append"}
    assert value("strata_commits_total", result="success", **labels) == 1
    assert REGISTRY.get_sample_value("strata_commits_total", {**labels, "result": "conflict"}) == 0
    assert value("strata_snapshot_latest_id", table="m.dropped") == 1
    assert 0 <= value("strata_snapshot_latest_age_seconds", table="m.dropped") < 60


def test_a_replayed_commit_is_counted_as_a_duplicate(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "replay")
    table.write(rows(range(5)), commit_user="job", identifier=7)
    d = Delta()
    assert table.write(rows(range(5)), commit_user="job", identifier=7).skipped_as_duplicate
    assert d("strata_commit_duplicates_total", table="m.replay") == 1
    assert d("strata_commits_total", table="m.replay", kind="append", result="success") == 0


def test_a_lost_race_for_a_snapshot_id_is_a_retried_conflict(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "race")
    table.write(rows(range(3)))
    with table.new_write() as w:
        w.write_arrow(rows(range(100, 103)))
        theirs = w.prepare_commit()
    with table.new_write() as w:
        w.write_arrow(rows(range(200, 203)))
        ours_messages = w.prepare_commit()
    ours = table.new_commit("ours")
    inner = ours._commit.publish
    raced: list[int] = []

    def publish(manager, snapshot):  # another writer takes our snapshot id first
        if not raced:
            raced.append(snapshot.id)
            table.new_commit("theirs").commit(theirs)
        return inner(manager, snapshot)

    ours._commit.publish = publish
    d = Delta()
    assert ours.commit(ours_messages).attempts == 2
    labels = {"table": "m.race", "kind": "append"}
    assert d("strata_commit_conflicts_total", type="snapshot_id_taken", **labels) == 1
    assert d("strata_commit_attempts_total", **labels) == 3  # theirs 1, ours 2
    assert d("strata_commits_total", result="success", **labels) == 2


def test_conflicting_compactions_count_a_conflict(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "conflict", **{"write-only": "true", "bucket": "1"})
    for i in range(3):
        table.write(rows(range(i * 10, i * 10 + 20), v=i))
    first, second = table.new_write(), table.new_write()
    for writer in (first, second):
        writer.write_only = False
        writer.compact(full=True)
    table.new_commit("a").commit(first.prepare_commit())
    d = Delta()
    with pytest.raises(CommitConflictError):
        table.new_commit("b").commit(second.prepare_commit())
    labels = {"table": "m.conflict", "kind": "compact"}
    assert d("strata_commits_total", result="conflict", **labels) == 1
    assert d("strata_commit_conflicts_total", type="file_conflict", **labels) == 1
    assert d("strata_commits_total", result="success", **labels) == 0
    first.close()
    second.close()


# -- writing and compaction ----------------------------------------------------------------------------
def test_writer_buffer_flushes_when_full_and_lsm_shape(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "buffer", **{"write-buffer-size": "4 kb", "write-only": "true", "bucket": "1",
                                           "write-buffer-spillable": "false"})
    d = Delta()
    commit = table.new_commit("w")
    with table.new_write() as writer:
        for i in range(5):
            writer.write_arrow(rows(range(i * 1000, i * 1000 + 1000)))
            assert value("strata_write_buffer_bytes", table="m.buffer") <= 4096
        assert d("strata_write_flushes_total", table="m.buffer", reason="full") >= 5
        writer.write_arrow(rows(range(10)))
        assert value("strata_write_buffer_bytes", table="m.buffer") > 0
        commit.commit(writer.prepare_commit())
        assert value("strata_write_buffer_bytes", table="m.buffer") == 0
        assert d("strata_write_flushes_total", table="m.buffer", reason="commit") == 1
    assert d("strata_write_records_total", table="m.buffer") == 5010
    assert value("strata_write_buffer_limit_bytes", table="m.buffer") == 4096
    level0 = sum(1 for s in table.scan() for f in s.files if f.level == 0)
    assert level0 >= 6
    # a write-only writer has no LSM view: the compaction job below reports it
    table.compact(full=False)
    assert value("strata_lsm_sorted_runs_max", table="m.buffer") >= 1


def test_writer_buffer_spills_to_disk_and_flushes_one_run(catalog: strata.Catalog) -> None:
    # spillable by default here: the target file size (128 MB) is above the 4 kb buffer
    table = pk_table(catalog, "spills", **{"write-buffer-size": "4 kb", "write-only": "true", "bucket": "1"})
    d = Delta()
    with table.new_write() as writer:
        for i in range(5):
            writer.write_arrow(rows(range(i * 1000, i * 1000 + 1000)))
            assert value("strata_write_buffer_bytes", table="m.spills") <= 4096
        assert d("strata_write_spills_total", table="m.spills") >= 5
        assert d("strata_write_spill_bytes_total", table="m.spills") > 0
        assert d("strata_write_flushes_total", table="m.spills", reason="full") == 0
        assert value("strata_write_buffer_bytes", table="m.spills") == 0  # all of it spilled
        table.new_commit("w").commit(writer.prepare_commit())
        assert d("strata_write_flushes_total", table="m.spills", reason="commit") == 1  # the spilled runs
    assert [f.row_count for s in table.scan() for f in s.files] == [5000]  # one level-0 run


def test_compaction_counts_runs_bytes_and_files(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "compact", **{"write-only": "true"})
    for i in range(4):
        table.write(rows(range(i * 50, i * 50 + 100), v=i))
    live = [f for s in table.scan() for f in s.files]
    d = Delta()
    result = table.compact(full=True)
    assert len(result.snapshot_ids) == 1
    t = {"table": "m.compact"}
    assert d("strata_compactions_total", result="success", **t) == 2  # one per bucket
    assert d("strata_compaction_duration_seconds_count", **t) == 2
    assert d("strata_compaction_input_files_total", **t) == len(live)
    assert d("strata_compaction_input_bytes_total", **t) == sum(f.file_size for f in live)
    after = [f for s in table.scan() for f in s.files]
    assert d("strata_compaction_output_files_total", **t) == len(after)
    assert d("strata_compaction_output_bytes_total", **t) == sum(f.file_size for f in after)
    assert value("strata_compaction_queued", **t) == 0
    assert value("strata_compaction_running", **t) == 0
    assert d("strata_commits_total", kind="compact", result="success", **t) == 1
    assert d("strata_files_deleted_total", kind="compact", **t) == len(live)
    assert value("strata_lsm_level0_files_max", **t) == 0
    assert value("strata_lsm_sorted_runs_max", **t) == 1


def test_background_compaction_in_a_streaming_writer(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "stream", **{"num-sorted-run.compaction-trigger": "2", "bucket": "1"})
    d = Delta()
    commit = table.new_commit("s")
    with table.new_write() as writer:
        for i in range(8):
            writer.write_arrow(rows(range(i * 10, i * 10 + 40), v=i))
            commit.commit(writer.prepare_commit(), identifier=i)
    t = {"table": "m.stream"}
    assert d("strata_compactions_total", result="success", **t) >= 1
    assert d("strata_commits_total", kind="compact", result="success", **t) >= 1
    assert value("strata_compaction_queued", **t) == 0  # finished or cancelled at close: none left


def test_append_table_compaction_is_counted(catalog: strata.Catalog) -> None:
    table = catalog.create_table("m.append", SCHEMA)
    for i in range(6):
        table.write(rows(range(i, i + 1)))
    d = Delta()
    table.compact(full=True)
    assert d("strata_compactions_total", table="m.append", result="success") == 1
    assert d("strata_compaction_input_files_total", table="m.append") == 6
    assert d("strata_compaction_output_files_total", table="m.append") == 1


def test_write_stall_helper_times_the_wait() -> None:
    d = Delta()
    release = threading.Event()
    threading.Timer(0.05, release.set).start()
    with metrics.write_stall("m.stall"):
        release.wait(5)
    assert d("strata_write_stalls_total", table="m.stall") == 1
    assert d("strata_write_stall_seconds_total", table="m.stall") >= 0.04


# -- scans ---------------------------------------------------------------------------------------------
def test_a_scan_counts_files_scanned_and_pruned(catalog: strata.Catalog) -> None:
    table = catalog.create_table("m.days", PART_SCHEMA, partition_keys=["day"])
    for day in ("2026-01-01", "2026-01-02", "2026-01-03"):
        table.write(pa.table({"day": [day] * 3, "id": pa.array([1, 2, 3], pa.int64()),
                              "v": pa.array([0, 0, 0], pa.int64())}))
    d = Delta()
    assert table.to_arrow(filter=strata.col("day") == "2026-01-02").num_rows == 3
    t = {"table": "m.days"}
    assert d("strata_scan_duration_seconds_count", **t) == 1
    assert d("strata_scan_files_scanned_total", **t) == 1
    assert d("strata_scan_files_skipped_total", **t) == 2
    assert d("strata_scan_manifests_read_total", **t) + d("strata_scan_manifests_skipped_total", **t) >= 1


# -- maintenance ---------------------------------------------------------------------------------------
def test_snapshot_expiry_after_commits_is_counted(catalog: strata.Catalog) -> None:
    table = pk_table(catalog, "expiry", **{"snapshot.num-retained.min": "2", "snapshot.num-retained.max": "3"})
    d = Delta()
    for i in range(6):
        table.write(rows(range(i, i + 5), v=i))
    t = {"table": "m.expiry"}
    earliest = table.snapshot_manager.earliest_id()
    assert earliest is not None and earliest > 1
    assert d("strata_expire_snapshots_deleted_total", **t) == earliest - 1
    assert d("strata_expire_files_deleted_total", **t) > 0
    assert d("strata_expire_runs_total", result="success", **t) == 6  # one run after each commit
    assert d("strata_expire_duration_seconds_count", **t) == 6
    assert value("strata_expire_last_success_timestamp_seconds", **t) > 1.7e9


def test_orphan_cleanup_is_counted_but_not_its_dry_runs(catalog: strata.Catalog,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt
    import time
    from types import SimpleNamespace

    from strata.operation import orphan

    table = pk_table(catalog, "orphans", **{"bucket": "1"})
    table.write(rows(range(10)))
    table.file_io.write_bytes(f"{table.path}/bucket-0/data-stray-0.parquet", b"x" * 1234)
    # two hours later the stray is past the age guard (object stores set modification times themselves)
    monkeypatch.setattr(orphan, "time", SimpleNamespace(time=lambda: time.time() + 7200))
    d = Delta()
    assert len(table.remove_orphan_files(older_than=dt.timedelta(hours=1), dry_run=True).deleted) == 1
    assert d("strata_orphan_cleanup_runs_total", table="m.orphans", result="success") == 0
    result = table.remove_orphan_files(older_than=dt.timedelta(hours=1))
    assert [Path(p).name for p in result.deleted] == ["data-stray-0.parquet"]
    assert d("strata_orphan_cleanup_runs_total", table="m.orphans", result="success") == 1
    assert d("strata_orphan_files_deleted_total", table="m.orphans") == 1
    assert d("strata_orphan_bytes_deleted_total", table="m.orphans") == 1234
    assert value("strata_orphan_cleanup_last_success_timestamp_seconds", table="m.orphans") > 1.7e9


# -- pending components: the helpers they call -------------------------------------------------------
def test_log_store_spark_sink_and_maintenance_helpers() -> None:
    d = Delta()
    metrics.log_produced("m.log", 10, 0.004)
    metrics.log_transaction("m.log", committed=True)
    metrics.log_transaction("m.log", committed=False)
    metrics.log_consumer_lag("m.log", 3, 42)
    metrics.log_hybrid_fallback("m.log")
    metrics.spark_sink_batch("m.log", 500, 1.5)
    metrics.spark_sink_batch("m.log", 0, 0.1, result="duplicate")
    metrics.expire_finished("m.log", 0.2, snapshots_deleted=4, files_deleted=9)
    metrics.orphan_cleanup_finished("m.log", files_deleted=2, bytes_deleted=2048)
    t = {"table": "m.log"}
    assert d("strata_log_records_produced_total", **t) == 10
    assert d("strata_log_produce_latency_seconds_count", **t) == 1
    assert d("strata_log_transactions_total", result="commit", **t) == 1
    assert d("strata_log_transactions_total", result="abort", **t) == 1
    assert value("strata_log_consumer_lag_records", bucket="3", **t) == 42
    assert d("strata_log_hybrid_fallbacks_total", **t) == 1
    assert d("strata_spark_sink_batches_total", result="committed", **t) == 1
    assert d("strata_spark_sink_batches_total", result="duplicate", **t) == 1
    assert d("strata_spark_sink_batch_rows_sum", **t) == 500
    assert d("strata_expire_snapshots_deleted_total", **t) == 4
    assert d("strata_expire_runs_total", result="success", **t) == 1
    assert value("strata_expire_last_success_timestamp_seconds", **t) > 1.7e9
    assert d("strata_orphan_bytes_deleted_total", **t) == 2048


# -- names and exposure --------------------------------------------------------------------------------
ALLOWED_LABELS = {"table", "kind", "result", "type", "reason", "bucket", "version"}


def test_names_follow_prometheus_conventions() -> None:
    names = [m.name for m in metrics.DEFINITIONS]
    assert len(names) == len(set(names))
    for m in metrics.DEFINITIONS:
        assert re.fullmatch(r"strata_[a-z0-9_]+", m.name), m.name
        assert m.name.endswith("_total") == (m.type == "counter"), m.name
        assert not re.search(r"_(ms|millis|milliseconds|kb|mb|percent)(_|$)", m.name), m.name
        if m.type == "histogram":
            assert m.name.endswith(("_seconds", "_rows")), m.name
        assert set(m.labels) <= ALLOWED_LABELS, (m.name, m.labels)
        assert m.help.endswith("."), m.name


def test_every_metric_is_documented() -> None:
    documented = set(re.findall(r"`(strata_[a-z0-9_]+)`", README.read_text()))
    missing = [m.name for m in metrics.DEFINITIONS if m.name not in documented]
    assert not missing, f"add to observability/README.md: {missing}"


def test_serve_metrics_on_loopback(catalog: strata.Catalog, storage: str) -> None:
    name = f"served_{storage}"  # the registry is per process: one table name per variant
    pk_table(catalog, name).write(rows(range(3)))
    server = metrics.serve_metrics(0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = [s for s in families["strata_commits"].samples if s.labels.get("table") == f"m.{name}"]
    assert any(s.labels["result"] == "success" and s.value == 1 for s in samples)
    assert "process_cpu_seconds" in families  # a long-running job also shows its process
    assert not any(name.endswith("_created") for name in families)


def test_write_textfile_has_only_strata_metrics(catalog: strata.Catalog, tmp_path: Path) -> None:
    pk_table(catalog, "textfile").write(rows(range(3)))
    path = tmp_path / "not" / "yet" / "job.prom"  # its directory is created
    metrics.write_textfile(str(path))
    families = {f.name for f in text_string_to_metric_families(path.read_text())}
    assert "strata_commits" in families
    assert all(name.startswith("strata_") for name in families), families
    assert 'table="m.textfile"' in path.read_text()
