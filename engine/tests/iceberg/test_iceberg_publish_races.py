"""The Iceberg mirror after a commit: its bookkeeping never raises, a metadata version has three
outcomes (published, a concurrent sync's, unknown), statistics publish their own version of the
metadata (never rewriting a published one) whichever way they race a sync, and an automatic
statistics refresh is bounded and backs off when it keeps failing."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata.fs.file_io import LocalFileIO
from strata.iceberg import IcebergSync, latest_metadata_location, sync_after_commit, versions
from strata.iceberg import statistics as stats_module
from strata.iceberg.statistics import BACKOFF_FILE, refresh
from strata.table.table import Table

pytestmark = pytest.mark.local_storage_only(reason="injects faults through a wrapper of the local FileIO")

datasketches = pytest.importorskip("datasketches")
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])
MANUAL = {"metadata.iceberg.storage": "table-location", "metadata.iceberg.statistics": "manual"}
AUTO = {"metadata.iceberg.storage": "table-location", "metadata.iceberg.statistics": "compaction"}


class FaultyIO(LocalFileIO):
    """The local FileIO with a hook before each operation: `hook(op, path)` may raise (a fault)
    or act (a concurrent writer). `lands` makes write_new land first and then raise (a lost
    reply). Reads are counted by path."""

    def __init__(self) -> None:
        super().__init__()
        self.hook: Callable[[str, str], None] = lambda op, path: None
        self.lands: Callable[[str], bool] = lambda path: False
        self.reads: list[str] = []

    def read_bytes(self, path: str) -> bytes:
        self.reads.append(path)
        self.hook("read", path)
        return super().read_bytes(path)

    def open_input_file(self, path: str) -> Any:
        self.reads.append(path)
        self.hook("read", path)
        return super().open_input_file(path)

    def write_new(self, path: str, data: bytes) -> bool:
        self.hook("write_new", path)
        created = super().write_new(path, data)
        if self.lands(path):
            raise ConnectionResetError(f"reply lost after writing {path}")
        return created

    def write_bytes(self, path: str, data: bytes) -> None:
        self.hook("write", path)
        super().write_bytes(path, data)


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"n{i % 7}" for i in range(start, start + n)]},
                    schema=SCHEMA)


def faulty(table: Table) -> tuple[Table, FaultyIO]:
    io = FaultyIO()
    return strata.Table(io, table.path, table.identifier, table.schema, catalog=table.catalog), io


def current(table: Table) -> dict[str, Any]:
    location = latest_metadata_location(table)
    assert location is not None
    return dict(json.loads(table.file_io.read_bytes(location)))


def metadata_dir(table: Table) -> str:
    return (latest_metadata_location(table) or "").rsplit("/", 1)[0]


def sample(name: str, table: str) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, {"table": table}) or 0.0


# -- 1. bookkeeping never raises ---------------------------------------------------------------------

def test_a_sync_whose_failure_report_fails_too_never_raises(catalog: strata.Catalog,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    table = catalog.create_table("db.down", SCHEMA, options=MANUAL)
    table.write(rows(0, 3))
    down, io = faulty(table)

    def outage(op: str, path: str) -> None:
        raise ConnectionResetError(f"store unreachable: {path}")

    io.hook = outage  # the sync fails, and so does every read its failure report makes
    failures = sample("strata_iceberg_sync_failures_total", "db.down")
    with caplog.at_level(logging.WARNING, logger="strata.iceberg.sync"):
        sync_after_commit(down)
    assert sample("strata_iceberg_sync_failures_total", "db.down") == failures + 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert "Iceberg metadata sync failed" in caplog.records[-1].getMessage()


# -- 4. three outcomes of a metadata version -----------------------------------------------------------

def test_a_lost_reply_of_a_landed_metadata_version_is_read_back_as_published(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.lost", SCHEMA, options=MANUAL)
    table.write(rows(0, 3))
    lossy, io = faulty(table)
    io.lands = lambda path: path.endswith("/v2.metadata.json")
    lossy.write(rows(3, 3))
    assert versions.read_hint(table.file_io, metadata_dir(table)) == 2
    assert current(table)["current-snapshot-id"] == 2


def test_an_unknown_outcome_keeps_every_file_and_the_next_sync_settles_it(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.unknown", SCHEMA, options=MANUAL)
    table.write(rows(0, 3))
    directory = metadata_dir(table)
    broken, io = faulty(table)
    io.lands = lambda path: path.endswith("/v2.metadata.json")

    def read_back_fails(op: str, path: str) -> None:
        if op == "read" and path.endswith("/v2.metadata.json"):
            raise ConnectionResetError("read-back failed too")

    io.hook = read_back_fails
    failures = sample("strata_iceberg_sync_failures_total", "db.unknown")
    assert broken.write(rows(3, 3)).snapshot_ids == [2]  # the commit stands
    assert sample("strata_iceberg_sync_failures_total", "db.unknown") == failures + 1
    assert "CommitStateUnknownError" in json.loads(table.file_io.read_bytes(f"{table.path}/iceberg-sync-error.json"))[
        "error"]
    landed = json.loads(table.file_io.read_bytes(versions.metadata_file(directory, 2)))
    assert table.file_io.exists(landed["snapshots"][-1]["manifest-list"]), "the files of an unknown outcome stay"
    assert versions.read_hint(table.file_io, directory) == 1
    assert IcebergSync(table).sync().up_to_date  # the next sync finds it published and moves the hint
    assert versions.read_hint(table.file_io, directory) == 2
    assert current(table) == landed


def test_a_sync_that_loses_to_a_concurrent_one_deletes_only_its_own_files(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.lose", SCHEMA, options=MANUAL)
    table.write(rows(0, 3))
    table.write(rows(3, 3))
    directory = metadata_dir(table)
    table.file_io.delete(versions.metadata_file(directory, 2))  # snapshot 2 not mirrored yet
    table.file_io.write_bytes(f"{directory}/{versions.VERSION_HINT}", b"1")
    racing, io = faulty(table)

    def other_sync_first(op: str, path: str) -> None:
        if op == "write_new" and path.endswith("/v2.metadata.json"):
            io.hook = lambda op, path: None
            IcebergSync(table).sync()  # wins snapshot 2's version

    io.hook = other_sync_first
    loser = IcebergSync(racing)
    assert loser.sync().up_to_date
    left = [s.path for s in table.file_io.list_status(directory) if loser.prefix in s.path]
    assert left == [], "the loser's manifests and manifest list are deleted"
    assert current(table)["current-snapshot-id"] == 2 and versions.read_hint(table.file_io, directory) == 2


# -- 2. statistics publish a version of their own ------------------------------------------------------

def test_statistics_published_while_a_sync_builds_the_next_version_are_carried_on(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.carry", SCHEMA, options=MANUAL)
    table.write(rows(0, 50))
    directory = metadata_dir(table)
    writer, io = faulty(table)
    published: list[str] = []

    def statistics_meanwhile(op: str, path: str) -> None:
        if op == "write_new" and path.endswith("/v2.metadata.json"):
            io.hook = lambda op, path: None
            published.append(refresh(table, directory).path or "")  # the sync has read v1 already

    io.hook = statistics_meanwhile
    writer.write(rows(50, 50))
    [path] = published
    metadata = current(table)
    assert latest_metadata_location(table) == versions.statistics_file(directory, 2)
    assert [e["statistics-path"] for e in metadata["statistics"]] == [path]
    assert table.file_io.exists(path)
    table.write(rows(100, 1))  # and on into the next version
    assert [e["statistics-path"] for e in current(table)["statistics"]] == [path]


def test_statistics_that_lose_the_race_go_into_the_next_version_without_rewriting_it(
        catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.follow", SCHEMA, options=MANUAL)
    table.write(rows(0, 50))
    directory = metadata_dir(table)
    stats_table, io = faulty(table)
    v2: list[bytes] = []

    def commit_meanwhile(op: str, path: str) -> None:
        if op == "write_new" and path.endswith("/v1.stats.metadata.json"):
            io.hook = lambda op, path: None
            table.write(rows(50, 50))  # its sync publishes v2 from v1, without statistics
            v2.append(table.file_io.read_bytes(versions.metadata_file(directory, 2)))

    io.hook = commit_meanwhile
    result = refresh(stats_table, directory)
    assert result.path is not None and result.snapshot_id == 1
    assert latest_metadata_location(table) == versions.statistics_file(directory, 2)
    assert [e["statistics-path"] for e in current(table)["statistics"]] == [result.path]
    assert table.file_io.read_bytes(versions.metadata_file(directory, 2)) == v2[0], "v2 itself is never rewritten"


# -- 3. automatic statistics: bounded, backing off ---------------------------------------------------------

def test_a_failing_automatic_refresh_backs_off_and_is_counted(catalog: strata.Catalog) -> None:
    table = catalog.create_table("db.backoff", SCHEMA, options=AUTO)
    writer, io = faulty(table)
    failing = [True]

    def data_unreadable(op: str, path: str) -> None:
        if failing[0] and op == "read" and path.endswith(".parquet"):
            raise ConnectionResetError(f"data file unreadable: {path}")

    io.hook = data_unreadable
    failures = sample("strata_iceberg_statistics_failures_total", "db.backoff")
    attempts = []
    for i in range(7):
        before = len([p for p in io.reads if p.endswith(".parquet")])
        failing[0] = i < 6
        writer.write(rows(i * 10, 10))  # snapshot i + 1; never raises
        # beyond the one read of the new file's footer (its column sizes, by the sync)
        attempts.append(len([p for p in io.reads if p.endswith(".parquet")]) > before + 1)
    # snapshot 1 fails (next at 1 + 2), 3 fails (next at 3 + 4), 7 succeeds
    assert attempts == [True, False, True, False, False, False, True]
    assert sample("strata_iceberg_statistics_failures_total", "db.backoff") == failures + 2
    assert [e["snapshot-id"] for e in current(table)["statistics"]] == [7]
    assert not table.file_io.exists(f"{table.path}/{BACKOFF_FILE}")


def test_automatic_statistics_skip_a_table_past_the_bound(catalog: strata.Catalog,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats_module, "AUTO_MAX_VALUES", 2 * 99)  # rows x columns
    table = catalog.create_table("db.large", SCHEMA, options=AUTO)
    writer, io = faulty(table)
    writer.write(rows(0, 100))
    assert current(table)["statistics"] == []
    # the sync reads the new file's footer (its column sizes), and nothing else of the data
    assert len([p for p in io.reads if p.endswith(".parquet")]) == 1, "no scan on the commit path"
    assert refresh(table, metadata_dir(table)).path is not None  # `strata iceberg stats` still computes them
