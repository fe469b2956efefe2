"""The simulation's concurrent step (strata.testing.simulation.jobs) judges each committer by what
it reported: planted defects of the commit path, of the kind the simulation is there to find,
fail the step with a message that names the committer and the contradiction."""

from __future__ import annotations

from typing import Any

import pytest

from strata.table.table import Table
from strata.testing.simulation import Scenario, run
from strata.testing.simulation.jobs import SHARED_USER
from strata.testing.simulation.runner import describe

# seed 0 (an append table, snapshots by conditional PUT): two writes, then a concurrent step with
# two writers and two jobs sharing one commit user, all of which commit
SHARED_STEP = Scenario(0, 40, (0, 1, 10))
# seed 43 (a deduplicate primary-key table with a full-compaction changelog, snapshots under the JDBC
# lock): two writes, then a concurrent step whose two shared-user jobs write fresh keys
SHARED_PK_STEP = Scenario(43, 20, (0, 3, 17))


def test_the_shared_user_step_passes_on_the_table_store_as_it_is() -> None:
    result = run(SHARED_STEP)
    assert result.failure is None, describe(result)
    assert result.counters["outcome:done"] >= 4


def test_a_job_told_another_jobs_snapshot_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared-user job whose commit result names the snapshot before its own (a retry that
    took the other job's snapshot for its own)."""
    real_write = Table.write

    def write_misattributing(self: Table, data: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_write(self, data, *args, **kwargs)
        if kwargs.get("commit_user") == SHARED_USER and result.snapshot_ids:
            result.snapshot_ids = [result.snapshot_ids[0] - 1]
        return result

    monkeypatch.setattr(Table, "write", write_misattributing)
    result = run(SHARED_STEP)
    assert result.failure is not None and result.failure.error == "OutcomeContradicted", describe(result)
    assert "added the batch, but it did not" in result.failure.message


def test_an_acknowledged_batch_that_is_not_in_the_table_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer told its batch is in (a snapshot id) while nothing was published."""
    real_write = Table.write

    def write_losing_w1(self: Table, data: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("commit_user") != "sim-w1":
            return real_write(self, data, *args, **kwargs)
        latest = self.latest_snapshot()
        result = real_write(self, data.slice(0, 0), *args, **kwargs)
        result.snapshot_ids = [latest.id if latest else 1]
        return result

    monkeypatch.setattr(Table, "write", write_losing_w1)
    result = run(SHARED_STEP)
    assert result.failure is not None and result.failure.error == "OutcomeContradicted", describe(result)
    assert "w1 batch 0" in result.failure.message and "not in the table" in result.failure.message


def test_the_shared_user_step_on_a_primary_key_table_passes() -> None:
    result = run(SHARED_PK_STEP)
    assert result.failure is None, describe(result)
    assert result.counters["jobs:shared_user:primary"] == 1 and result.counters["outcome:done"] >= 4


def test_a_primary_key_job_told_another_jobs_snapshot_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on append tables: the two jobs reuse each other's identifiers, so only the batch's
    (fresh) keys can tell which snapshot added it."""
    real_write = Table.write

    def write_misattributing(self: Table, data: Any, *args: Any, **kwargs: Any) -> Any:
        result = real_write(self, data, *args, **kwargs)
        if kwargs.get("commit_user") == SHARED_USER and result.snapshot_ids:
            result.snapshot_ids = [result.snapshot_ids[0] - 1]
        return result

    monkeypatch.setattr(Table, "write", write_misattributing)
    result = run(SHARED_PK_STEP)
    assert result.failure is not None and result.failure.error == "OutcomeContradicted", describe(result)
    assert "added the batch, but it did not" in result.failure.message
