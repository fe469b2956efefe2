"""The deterministic simulation's fixed seeds (the ``make test`` tier) and its own guarantees:
a seed replays the same run, a failure shrinks to a shorter run that fails the same way.

KNOWN_FAILURES are seeds whose failure is a Strata bug found by the simulation and not fixed yet;
each is expected to fail (strictly: once the bug is fixed the test says so, and the seed moves to
SEEDS as a regression test).
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from strata.testing.simulation import Scenario, operations, run, shrink
from strata.testing.simulation.runner import describe

STEPS = 40
SEEDS = (0, 2, 12, 14, 15, 60, 68)  # 40 steps each
# outcomes of concurrent committers a fixed seed must reach, so that each branch of the judgement
# runs in this tier (seeds 12, 60 and 68 publish under the JDBC lock, the others by conditional PUT)
REACHES = {2: {"done", "not_done"}, 12: {"killed", "not_done"}, 68: {"killed", "not_done"}}
# operations a fixed seed must reach (counter labels): a branch fast-forwarded into main under the lock,
# and refused by conditional PUT
OPERATIONS = {60: {"op:fast_forward:forwarded", "op:create_branch:from_snapshot"},
              14: {"op:fast_forward:refused_without_lock"}}
# a seed under the fault mix that loses the snapshot PUT's reply and fails its read-back: the
# committers' outcome-unknown path (CommitStateUnknownError, then the harness reads the table once)
UNKNOWN_SEED = Scenario(2, 20, faults="snapshot-unknown")
# a seed under the fault mix of lock timeouts, frequent once a committer has published a snapshot: its
# commits' COMPACT times out after their APPEND is out (the half-published commit must report done)
LOCK_TIMEOUT_SEED = Scenario(5, 16, faults="lock-timeout")
# seed 60: a write, a branch from its snapshot, main rewritten and its snapshots expired
BRANCH_EXPIRY = Scenario(60, 40, (0, 11, 31, 33, 36))

# seed -> (steps, the shrunk operations (None: all of them), the bug)
KNOWN_FAILURES: dict[int, tuple[int, tuple[int, ...] | None, str]] = {
}


# seed -> (steps, the shrunk operations, the bug it found, since fixed): each replays its shrunk sequence
REGRESSIONS = {
    5024: (60, (7, 11, 12, 13, 14, 30, 35, 57, 59), "a branch's first snapshot kept the changelog of main's commit, "
                                                    "which main's expiry deleted (the branch named missing files)"),
    5000: (60, (19, 20, 21, 31, 39, 43, 44, 46, 48, 54), "fast-forward after main was rolled back below the "
                                                        "branch point and written under a newer schema deleted "
                                                        "that schema (main unreadable); it is now refused"),
    133: (40, (2, 3, 5, 6, 21, 29), "a rollback to a tag whose snapshot had expired published the tag's snapshot "
                                    "with its changelog manifest list, which expiry had deleted (the retained "
                                    "snapshot named missing files); it is now published without it. Since the "
                                    "ignore-delete fix (seed 4) this sequence no longer reaches the bug"),
    4: (40, (17, 19, 25), "ignore-delete kept retractions in the written records (they were dropped only when "
                          "merging): read_incremental of an aggregation table with changelog-producer=input showed "
                          "-D/-U rows of keys the table keeps; the writer now drops them, as Paimon's does"),
    3014: (60, (40, 41, 42), "(the harness) a concurrent writer's batch of one retraction on an ignore-delete table "
                             "writes no file, so its commit publishes only a compaction of leftover level-0 files; "
                             "the judge looked for the batch's (user, identifier) on non-compaction snapshots only"),
    148: (60, (4,), "partial-update merge of a nullable ROW column whose inner field is NOT NULL: the merge left "
                    "nulls in a null row's NOT NULL field, which Arrow's cast and Parquet's writer refused; the data "
                    "file writer now empties them (strata.io.empty_values.fill_under_null_rows)"),
    11: (40, (0, 2), "Table.delete(keys) on a table with a NOT NULL ARRAY/MAP column failed: the filler of "
                     "the missing columns was null for nested types (strata.table.conform._filler)"),
    8: (40, (6,), "write(mode='overwrite') on a deletion-vector (or first-row) primary-key table read empty: "
                  "its OVERWRITE left the rows in level 0, which those readers skip; the commit now publishes "
                  "the writer's compaction after it (a COMPACT, as Paimon) and the overwrite's writer starts "
                  "from empty buckets"),
    1918006184: (80, (25, 26, 27), "(the harness) expire_partitions on a DATE partition whose rows a delete_where "
                                   "had all marked: the model held no live row, so the judge expected nothing to "
                                   "expire, but the partition's files still aged out; dropping them loses nothing"),
    1077022468: (80, None, "(the harness) two concurrent writers published snapshot 35 under the JDBC lock and "
                           "both were acknowledged: sim-w1's lease lapsed at the check of its check-then-put, "
                           "after its lease check, and its PUT replaced sim-w2's snapshot. That is the documented "
                           "limit, which runs leave out, but the harness left out only a lapse at the PUT itself; "
                           "it now leaves out the whole window from a passing lease check to the PUT, and the "
                           "commit checks its lease after its reads, right before the write"),
    34: (40, (8, 9), "changelog-producer=full-compaction on a table with a MAP (or ROW of LIST) column failed "
                     "(ArrowInvalid): the changelog joined whole rows with Arrow's hash join, which refuses nested "
                     "non-key columns; rows are now matched on the key columns alone (strata.mergetree.key_sets)"),
}


@pytest.mark.parametrize("seed", sorted(REGRESSIONS))
def test_regression_seed_passes(seed: int) -> None:
    steps, only, bug = REGRESSIONS[seed]
    result = run(Scenario(seed, steps, only))
    assert result.failure is None, f"regression of: {bug}\n{describe(result)}"


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_matches_the_model(seed: int) -> None:
    result = run(Scenario(seed, STEPS))
    assert result.failure is None, describe(result)
    assert result.steps_run == STEPS
    reached = {k.removeprefix("outcome:") for k, n in result.counters.items() if k.startswith("outcome:") and n}
    assert reached >= REACHES.get(seed, set()), f"seed {seed} reached outcomes {sorted(reached)}"
    assert {k for k, n in result.counters.items() if n} >= OPERATIONS.get(seed, set()), sorted(result.counters)
    print(f"seed {seed}: " + ", ".join(f"{k} {n}" for k, n in sorted(result.counters.items())
                                      if k.startswith(("outcome:", "fault:", "publish:"))))


@pytest.mark.parametrize("seed", sorted(KNOWN_FAILURES))
def test_known_failure_still_fails(seed: int) -> None:
    steps, only, bug = KNOWN_FAILURES[seed]
    result = run(Scenario(seed, steps, only))
    if result.failure is None:
        pytest.fail(f"seed {seed} passes now: the bug ({bug}) looks fixed; move the seed to the regression seeds")
    pytest.xfail(f"known bug: {bug}\n{describe(result)}")


def test_the_snapshot_fault_mix_reaches_the_unknown_outcome() -> None:
    result = run(UNKNOWN_SEED)
    assert result.failure is None, describe(result)
    assert result.counters["outcome:unknown"] >= 1 and result.counters["fault:lost_reply"] >= 1, result.counters
    print(f"seed {UNKNOWN_SEED.seed} ({UNKNOWN_SEED.faults}): " + ", ".join(
        f"{k} {n}" for k, n in sorted(result.counters.items()) if k.startswith(("outcome:", "fault:"))))


def test_a_seed_replays_the_same_run() -> None:
    """Seed 60's first 14 steps: two concurrent steps under faults, a branch, a rollback."""
    first, second = run(Scenario(60, 14)), run(Scenario(60, 14))
    assert first.failure is None and second.failure is None
    assert first.counters == second.counters and first.counters["fault:switch"] > 0
    assert Scenario(60, 14).ops() == Scenario(60, 40).ops()[:14]  # more steps extend, never change, a run


class PlantedBug(AssertionError):
    """A fault planted in the harness, in place of a bug of the table store."""


def test_a_failure_shrinks_to_the_operations_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug that breaks any table holding a tag once it is compacted: of seed 6's first
    six operations the shrunk run keeps a commit (a tag needs a snapshot), the tag and the
    compaction, and replays to the same failure."""
    real_compact = operations._APPLY["compact"]

    def compact_breaking_tagged_tables(ctx: operations.Context, rng: random.Random) -> str:
        if ctx.model.tags:
            raise PlantedBug("compaction of a tagged table")
        return real_compact(ctx, rng)

    monkeypatch.setitem(operations._APPLY, "compact", compact_breaking_tagged_tables)
    failing = run(Scenario(6, 14))
    assert failing.failure is not None and failing.failure.error == "PlantedBug", describe(failing)
    shrunk = shrink(failing)
    kept = [op["op"] for _, op in shrunk.scenario.ops()]
    assert len(kept) == 3 and kept[1:] == ["create_tag", "compact"], describe(shrunk)
    assert shrunk.failure is not None and shrunk.failure.signature == failing.failure.signature
    replayed = run(shrunk.scenario)
    assert replayed.failure is not None and replayed.failure.signature == failing.failure.signature
    assert "make simulate SEED=6 STEPS=14 ONLY=" in describe(shrunk)


def test_orphan_cleanup_that_deletes_a_live_file_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted orphan cleanup that also deletes a data file the latest snapshot names: the
    query run before it no longer runs after it, and the step fails saying so."""
    from strata.operation import orphan
    from strata.table.table import Table

    real_remove = Table.remove_orphan_files

    def remove_with_a_live_file(self: Table, *args: object, **kwargs: object) -> object:
        result = real_remove(self, *args, **kwargs)
        used = orphan.used_files(self.store)
        table_dir = Path(self.store.path.removeprefix("file://"))
        live = sorted(p for p in table_dir.rglob("data-*.parquet") if p.name in used)
        live[0].unlink()
        return result

    monkeypatch.setattr(Table, "remove_orphan_files", remove_with_a_live_file)
    result = run(Scenario(6, STEPS, (0, 1)))  # a write, then orphan cleanup
    assert result.failure is not None and result.failure.op == "remove_orphans", describe(result)
    assert result.failure.error == "OperationFailed", describe(result)
    assert "orphan cleanup broke a read that it must not change" in result.failure.message


def test_expiry_that_deletes_a_branchs_files_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted snapshot expiry on main that ignores the other branches: it deletes files that
    only the branch's snapshot still names, and the branch's reads after the step say so."""
    from strata.operation import expire

    monkeypatch.setattr(expire, "other_branches_files", lambda table, files: expire.SharedFiles())
    result = run(BRANCH_EXPIRY)
    assert result.failure is not None and result.failure.op == "expire_snapshots", describe(result)


def test_the_branch_expiry_run_passes_on_the_table_store_as_it_is() -> None:
    result = run(BRANCH_EXPIRY)
    assert result.failure is None, describe(result)
    assert result.counters["op:create_branch:from_snapshot"] == 1 and result.counters["read:branch_time_travel"]


def test_the_lock_timeout_mix_times_out_a_committer_after_it_published() -> None:
    """Under the JDBC lock, a lock timeout after the committer's own snapshot went out: a commit
    whose APPEND is published and whose COMPACT cannot get the lock must still report done."""
    result = run(LOCK_TIMEOUT_SEED)
    assert result.failure is None, describe(result)
    assert result.counters["publish:jdbc-lock"] == 1, result.counters
    assert result.counters["fault:lock_timeout_after_publish"] >= 1, result.counters
