"""The maintenance subcommands of the `strata` CLI: tags, rollback, expiry, orphans, consumers."""

from __future__ import annotations

import pytest
from maintenance_helpers import PK_SCHEMA, advance_clock, exists, pk_batch, rows

import strata
from strata.cli import main


@pytest.fixture
def wh(warehouse: str, catalog: strata.Catalog) -> str:
    """The warehouse, with db.t (on MinIO the CLI finds the store through the AWS variables)."""
    # write-only: a one-shot write of a compacting writer may leave its unfinished background
    # compaction's output behind (an orphan), which would blur the orphan counts below
    table = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                                 options={"bucket": "1", "write-only": "true"})
    for i in range(1, 6):
        table.write(pk_batch("a", [i], i))
    return warehouse


def cli(capsys: pytest.CaptureFixture[str], wh: str, *args: str) -> tuple[int, str]:
    code = main(["--warehouse", wh, *args])
    out, err = capsys.readouterr()
    return code, out + err


def table(wh: str) -> strata.Table:
    return strata.load_catalog(wh).get_table("db.t")


def test_tags_and_rollback(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, wh, "create-tag", "db.t", "v2", "--snapshot", "2")[0] == 0
    code, out = cli(capsys, wh, "create-tag", "db.t", "last", "--time-retained", "7 d")
    assert code == 0 and "snapshot 5" in out
    code, out = cli(capsys, wh, "tags", "db.t")
    assert code == 0 and "v2" in out and "last" in out and "604800 s" in out
    code, out = cli(capsys, wh, "rollback", "db.t", "v2")
    assert code == 0 and "snapshot 2" in out and "3 snapshots and 1 tags deleted" in out
    assert rows(table(wh)) == [("a", 1, 1), ("a", 2, 2)]
    assert cli(capsys, wh, "delete-tag", "db.t", "v2")[0] == 0
    code, out = cli(capsys, wh, "delete-tag", "db.t", "v2")
    assert code == 2 and "no tag" in out
    code, out = cli(capsys, wh, "rollback", "db.t", "1")
    assert code == 0 and rows(table(wh)) == [("a", 1, 1)]
    code, out = cli(capsys, wh, "rollback", "db.t", "99")
    assert code == 2 and out.startswith("strata: error:")


def test_expire_and_orphans(wh: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = cli(capsys, wh, "expire-snapshots", "db.t")
    assert code == 0 and "no snapshot to expire" in out
    code, out = cli(capsys, wh, "expire-snapshots", "db.t", "--retain-min", "2", "--older-than", "0 s")
    assert code == 0 and "expired snapshots 1..3 (3)" in out
    assert [s.id for s in table(wh).snapshots()] == [4, 5]
    stray = table(wh).path + "/manifest/manifest-stray-0"
    table(wh).file_io.write_bytes(stray, b"x")
    code, out = cli(capsys, wh, "remove-orphan-files", "db.t")
    assert code == 0 and "deleted 0 orphan files" in out and "1 unreferenced" in out
    advance_clock(monkeypatch, 3 * 86400)
    code, out = cli(capsys, wh, "remove-orphan-files", "db.t", "--dry-run")
    assert code == 0 and "would delete 1" in out and exists(table(wh), stray)
    code, out = cli(capsys, wh, "remove-orphan-files", "db.t", "--older-than", "2 d")
    assert code == 0 and "deleted 1 orphan files" in out and not exists(table(wh), stray)


def test_consumers(wh: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = cli(capsys, wh, "consumers", "db.t")
    assert code == 0 and "no consumers" in out
    assert cli(capsys, wh, "consumers", "db.t", "--reset", "etl=3")[0] == 0
    assert cli(capsys, wh, "consumers", "db.t", "--reset", "bi=4")[0] == 0
    code, out = cli(capsys, wh, "consumers", "db.t")
    assert code == 0 and "etl" in out and "bi" in out
    code, out = cli(capsys, wh, "expire-snapshots", "db.t", "--retain-min", "1", "--older-than", "0 s")
    assert "expired snapshots 1..2" in out  # the consumer at 3 keeps 3 and later
    assert cli(capsys, wh, "consumers", "db.t", "--delete", "bi")[0] == 0
    code, out = cli(capsys, wh, "consumers", "db.t", "--clear")
    assert code == 0 and "cleared 1 consumers" in out and "etl" in out
    code, out = cli(capsys, wh, "consumers", "db.t", "--reset", "nonsense")
    assert code == 2


def test_expire_partitions(warehouse: str, catalog: strata.Catalog, capsys: pytest.CaptureFixture[str]) -> None:
    wh = warehouse
    t = catalog.create_table("db.t", PK_SCHEMA, partition_keys=["dt"], primary_keys=["dt", "id"],
                             options={"bucket": "1"})
    t.write(pk_batch("2020-01-01", [1], 1))
    t.write(pk_batch("2999-01-01", [2], 2))
    code, out = cli(capsys, wh, "expire-partitions", "db.t", "--expiration-time", "1 d", "--dry-run")
    assert code == 0 and "would drop 1 partitions" in out and "dt=2020-01-01" in out
    code, out = cli(capsys, wh, "expire-partitions", "db.t", "--expiration-time", "1 d")
    assert code == 0 and "dropped 1" in out
    assert rows(table(wh)) == [("2999-01-01", 2, 2)]
