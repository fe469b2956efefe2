"""The simulation's Iceberg check and its oracles tier: the Iceberg metadata readers pick (the version
hint's, its .stats variant, the newest past the hint) names files that exist, the files the mirror
promises, and yields the model's rows, after each rollback and at the end of every seed, and with
``--oracles`` after every step that changes the table, read by pyiceberg and pypaimon too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from strata.testing.simulation import Scenario, run
from strata.testing.simulation.runner import describe

# seed 23: an append table with deletion vectors, its mirror in a Hadoop catalog at Iceberg format 3,
# snapshots published under the JDBC lock; in 16 steps tags, a rollback, a concurrent step and a dropped column
ORACLE_SEED = Scenario(23, 16, oracles=True)
# seed 197: a partial-update primary-key table with deletion vectors, mirrored at format 3; its
# rollbacks (steps 3 and 14) go back past the latest snapshot
ROLLBACK_SEED = Scenario(197, 16)
# seed 1140104840, five of its steps: a column added, a rollback to the snapshot before it (the
# Iceberg metadata is rewritten with the latest schema, which a rollback keeps, as Paimon does),
# then that column dropped: no commit follows, so the metadata still shows it
SCHEMA_LAG_SEED = Scenario(1140104840, 60, only=(50, 51, 52, 56, 59), oracles=True)


@pytest.mark.pyiceberg
@pytest.mark.pypaimon
def test_a_short_seed_matches_the_model_through_iceberg_pyiceberg_and_pypaimon() -> None:
    result = run(ORACLE_SEED)
    assert result.failure is None, describe(result)
    counters = result.counters
    assert counters["iceberg:current"] >= 8, counters  # every step that moved the table, checked current
    reads = sum(n for k, n in counters.items() if k.startswith("op:rollback:")) + 1  # each rollback and the end
    assert reads >= 2 and counters["oracle:pyiceberg:read"] == counters["oracle:pypaimon:read"] == reads, counters
    print(f"seed {ORACLE_SEED.seed}: " + ", ".join(f"{k} {n}" for k, n in sorted(counters.items())
                                                   if k.startswith(("iceberg:", "oracle:", "outcome:"))))


@pytest.mark.pyiceberg
@pytest.mark.pypaimon
def test_pyiceberg_may_read_a_schema_that_a_change_since_the_last_commit_replaced() -> None:
    """The metadata's current schema is the Paimon schema of the same id, not the latest: a column
    dropped since the last commit is still read (all nulls) until the next commit syncs."""
    result = run(SCHEMA_LAG_SEED)
    assert result.failure is None, describe(result)
    counters = result.counters
    assert counters["op:rollback:to_snapshot"] == 1 and counters["op:drop_column:dropped"] == 1, counters
    assert counters["oracle:pyiceberg:read"] >= 2, counters


def test_a_rollback_that_leaves_the_iceberg_metadata_behind_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollback whose Iceberg sync is left out: Iceberg readers still see the snapshot rolled
    back past. The default tier (no oracles) checks the mirror after each rollback and says so."""
    from strata.operation import rollback

    monkeypatch.setattr(rollback, "sync_after_commit", lambda table: None)
    result = run(ROLLBACK_SEED)
    assert result.failure is not None and result.failure.op == "rollback", describe(result)
    assert result.failure.error == "MirrorBroken", describe(result)
    assert "a commit without faults must leave the mirror current" in result.failure.message


def test_a_data_file_missing_under_the_iceberg_metadata_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Iceberg metadata of the current snapshot names a data file that is gone (a cleanup that
    took a file only the mirror still named): the check names the missing file."""
    from strata.testing.simulation import oracles

    real_check = oracles.check_iceberg

    def check_after_losing_a_file(table: Any, model: Any, must_be_current: bool) -> str:
        names = {e.file.file_name for e in oracles.TableScan(table.store).plan_entries()}
        table_dir = Path(table.store.path.removeprefix("file://"))
        doomed = sorted(p for p in table_dir.rglob("data-*.parquet") if p.name in names)
        if doomed:
            doomed[0].unlink()
        return real_check(table, model, must_be_current)

    monkeypatch.setattr("strata.testing.simulation.runner.check_iceberg", check_after_losing_a_file)
    result = run(Scenario(ORACLE_SEED.seed, ORACLE_SEED.steps))
    assert result.failure is not None and result.failure.error == "IcebergMetadataBroken", describe(result)
    assert "that the Iceberg metadata names is missing" in result.failure.message


def test_metadata_naming_a_schema_it_does_not_define_is_a_clear_error() -> None:
    """A snapshot whose schema id the metadata's schemas lack (a mirror that wrote the snapshot but
    not its schema) is reported as broken metadata naming the file and the id."""
    from strata.fs.file_io import LocalFileIO
    from strata.testing.simulation.iceberg import IcebergMetadataBroken, MetadataVersion, read_snapshot

    metadata = {"current-schema-id": 0, "schemas": [{"schema-id": 0, "fields": []}],
                "snapshots": [{"snapshot-id": 5, "schema-id": 3, "manifest-list": "never-read.avro"}]}
    version = MetadataVersion(4, "metadata/v4.metadata.json", "hint", metadata)
    message = r"metadata/v4\.metadata\.json names schema id 3 it does not define"
    with pytest.raises(IcebergMetadataBroken, match=message):
        read_snapshot(LocalFileIO(), version, 5)
