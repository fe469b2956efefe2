"""The simulation's concurrency and fault layer: one seed gives one interleaving, one set of faults
and one set of outcomes; under those faults, the table holds exactly what the committers reported
(done: in, not done: absent, unknown or killed: all of the batch or none of it, never twice), in
both publish modes (conditional PUT, and check-then-put under the JDBC lock)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from strata.catalog.base import Catalog
from strata.testing.simulation.concurrency import DONE, KILLED, NOT_DONE, UNKNOWN, Outcome, World
from strata.testing.simulation.faults import FaultConfig
from strata.testing.simulation.invariants import InvariantBroken

SCHEMA = pa.schema([("id", pa.int64()), ("writer", pa.string())])
BATCHES = 2  # batches each writer commits, one identifier each
ROWS = 5  # rows of a batch
STORAGE_FAULTS = FaultConfig(lost_reply=0.03, unavailable_before=0.01, unavailable_after=0.01, error_before=0.01,
                             slow=0.1, kill=0.002, outage=0.5, reads=0.1)
LOCK_FAULTS = FaultConfig(lost_reply=0.03, unavailable_before=0.01, unavailable_after=0.01, error_before=0.01,
                          slow=0.1, kill=0.002, outage=0.5, reads=0.1, lock_timeout=0.05)
LEASE_FAULTS = FaultConfig(lease_expiry=0.2, slow=0.1)
SEEDS = range(12)
# the seeds of the outcome check: the first few, and ones found where a commit's outcome is unknown
# (an ambiguous snapshot write, then an outage through its read-back)
OUTCOME_SEEDS = {"conditional-put": [*SEEDS, 54, 73, 86], "jdbc-lock": list(SEEDS)}


@pytest.fixture(params=["conditional-put", "jdbc-lock"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def batch_ids(writer: int, batch: int) -> list[int]:
    start = (writer * BATCHES + batch) * ROWS
    return list(range(start, start + ROWS))


def new_world(root: Path, seed: int, mode: str, faults: FaultConfig, lapse_before_put: bool = True,
              **table_options: str) -> World:
    world = World(seed, str(root / f"{mode}-{seed}"), faults, use_jdbc_lock=mode == "jdbc-lock",
                  lapse_before_put=lapse_before_put)
    checker = world.catalog()
    checker.create_database("db")
    checker.create_table("db.t", SCHEMA, options={"bucket": "-1", **table_options})
    return world


def writer(number: int, acked: list[int]) -> Callable[[Catalog], object]:
    """Commits its batches in order under its own commit user; `acked` gets each batch the
    commit acknowledged. Stops at the first failure (the actor's outcome is that batch's)."""

    def act(catalog: Catalog) -> object:
        table = catalog.get_table("db.t")
        for batch in range(BATCHES):
            ids = batch_ids(number, batch)
            rows = pa.table({"id": pa.array(ids, pa.int64()), "writer": [f"w{number}"] * len(ids)})
            table.write(rows, commit_user=f"writer-{number}", identifier=batch + 1)
            acked.append(batch)
        return len(acked)

    return act


def run_writers(world: World, writers: int = 2) -> tuple[dict[str, Outcome], dict[int, list[int]]]:
    acked: dict[int, list[int]] = {n: [] for n in range(writers)}
    outcomes = world.run({f"w{n}": writer(n, acked[n]) for n in range(writers)})
    return outcomes, acked


def table_ids(world: World) -> Counter[int]:
    return Counter(world.catalog().get_table("db.t").to_arrow().column("id").to_pylist())


def check_against_outcomes(world: World, outcomes: dict[str, Outcome], acked: dict[int, list[int]]) -> None:
    """Acknowledged batches are in once; the batch an actor failed in is absent when the outcome
    is "not done", all or nothing when it is unknown or the actor died; later batches absent."""
    found = table_ids(world)
    twice = sorted(i for i, n in found.items() if n > 1)
    assert not twice, f"seed {world.seed}: rows counted twice: {twice}"
    for number, done in acked.items():
        outcome = outcomes[f"w{number}"]
        for batch in range(BATCHES):
            ids = batch_ids(number, batch)
            present = [i for i in ids if found[i]]
            where = f"seed {world.seed}, writer {number} batch {batch} ({outcome.status}: {outcome.error!r})"
            if batch in done:
                assert present == ids, f"{where}: an acknowledged batch lost rows {sorted(set(ids) - set(present))}"
            elif batch == len(done) and outcome.status in (UNKNOWN, KILLED):
                assert present in ([], ids), f"{where}: part of a batch landed: {present}"
            else:
                assert present == [], f"{where}: a batch reported not done is in the table: {present}"


def assert_every_snapshot_readable(world: World) -> None:
    table = world.catalog().get_table("db.t")
    for snapshot in table.snapshots():
        table.to_arrow(snapshot_id=snapshot.id)


def test_same_seed_gives_the_same_interleaving_faults_and_outcomes(tmp_path: Path, mode: str) -> None:
    faults = LOCK_FAULTS if mode == "jdbc-lock" else STORAGE_FAULTS

    def replay(run: str, seed: int) -> tuple[list, Counter, dict[str, str], Counter]:
        world = new_world(tmp_path / run, seed, mode, faults, bucket="2", **{"bucket-key": "id"})
        outcomes, _ = run_writers(world, writers=3)
        return world.trace, world.counters, {a: o.status for a, o in outcomes.items()}, table_ids(world)

    first, second = replay("first", 7), replay("second", 7)
    trace, counters, _, _ = first
    assert counters["switch"] > 0 and sum(n for k, n in counters.items() if k.startswith("fault:")) > 0, \
        "the run must interleave and inject faults for the comparison to mean anything"
    assert first == second  # the same steps, paths, faults, outcomes and rows
    assert replay("other", 8)[0] != trace  # and the seed is what decides them


def test_table_holds_exactly_what_the_committers_reported(tmp_path: Path, mode: str) -> None:
    faults = LOCK_FAULTS if mode == "jdbc-lock" else STORAGE_FAULTS
    seen: Counter[str] = Counter()
    for seed in OUTCOME_SEEDS[mode]:
        world = new_world(tmp_path, seed, mode, faults)
        outcomes, acked = run_writers(world)
        check_against_outcomes(world, outcomes, acked)
        assert_every_snapshot_readable(world)
        seen.update(o.status for o in outcomes.values())
    # the seeds reach every outcome, so each branch of the check above was exercised (under the
    # lock an ambiguous snapshot write is put again until it answers: unknown is rarer than a seed)
    assert set(seen) >= {DONE, NOT_DONE, KILLED} | ({UNKNOWN} if mode == "conditional-put" else set()), seen


def test_a_killed_writer_leaves_the_table_readable_and_writable(tmp_path: Path, mode: str) -> None:
    """A writer dies at a storage call (its files stay, under the JDBC lock possibly its lock row):
    the table still reads, every snapshot reads, and the next writer commits."""
    killed = 0
    for seed in SEEDS:
        world = new_world(tmp_path, seed, mode, FaultConfig(kill=0.05))
        outcomes, acked = run_writers(world)
        if KILLED not in {o.status for o in outcomes.values()}:
            continue
        killed += 1
        check_against_outcomes(world, outcomes, acked)
        assert_every_snapshot_readable(world)
        world.faults = FaultConfig()
        late: list[int] = []
        after = world.run({"w9": writer(9, late)})
        assert after["w9"].status == DONE, f"seed {seed}: {after['w9'].error!r}"
        assert set(batch_ids(9, 0)) <= set(table_ids(world))
    assert killed >= 3, "too few seeds killed a writer to check anything"


def test_a_dead_lock_holder_blocks_the_table_only_until_its_lease_expires(tmp_path: Path) -> None:
    """Killed while holding the JDBC lock, a writer never releases it; the next writer waits (on
    the virtual clock, not the wall's) for the lease to expire, takes the lock over and commits."""
    for seed in range(200):  # most kills come outside the lock's few calls
        world = new_world(tmp_path, seed, "jdbc-lock", FaultConfig(kill=0.02))
        run_writers(world, writers=1)
        if world.live_leases:  # the dead writer's lock row is still there
            break
    else:
        pytest.fail("no seed killed a writer while it held the lock")
    world.faults = FaultConfig()
    clock = world.clock
    after = world.run({"w9": writer(9, [])})
    assert after["w9"].status == DONE, repr(after["w9"].error)
    assert world.clock - clock >= 19  # it waited out the 20 s lease (second-granular rows: 1 s less)


def test_a_lapsed_lease_lets_another_writer_take_the_lock_over(tmp_path: Path) -> None:
    """The holder stalls past its lease: another writer takes the lock over meanwhile, and every
    snapshot stays readable."""
    takeovers = 0
    for seed in SEEDS:
        world = new_world(tmp_path, seed, "jdbc-lock", LEASE_FAULTS)
        run_writers(world, writers=3)
        assert_every_snapshot_readable(world)
        takeovers += sum(published_during_stall(world.trace, i) for i in range(len(world.trace)))
    assert takeovers > 0


def published_during_stall(trace: list[tuple[str, ...]], at: int) -> bool:
    """Whether the event at `at` is a holder's stall during which another actor wrote a snapshot
    (which takes the lock: the stalled holder's lease was taken over)."""
    event = trace[at]
    if event[0] != "call" or event[4] != "lease_expiry":
        return False
    stalled = event[1]
    for later in trace[at + 1:]:
        if later[0] == "call" and later[1] == stalled:
            return False
        if later[0] == "call" and later[2] == "write_new" and "/snapshot/snapshot-" in later[3]:
            return True
    return False


def test_lapses_outside_the_put_window_lose_no_acknowledged_batch(tmp_path: Path) -> None:
    """With the documented limit left out (no lapse from a holder's passing lease check to its
    snapshot's PUT, the check of a check-then-put included), leases still lapse elsewhere, and
    every acknowledged batch is in the table once."""
    lapses = 0
    for seed in SEEDS:
        world = new_world(tmp_path, seed, "jdbc-lock", LEASE_FAULTS, lapse_before_put=False)
        outcomes, acked = run_writers(world, writers=3)
        check_against_outcomes(world, outcomes, acked)
        assert_every_snapshot_readable(world)
        lapses += world.counters["fault:lease_expiry"]
    assert lapses > 0


@pytest.mark.xfail(strict=True, reason="documented limit of check-then-put under a lease (README, Commit "
                   "guarantees: the lease must outlast the write): a holder that stalls past its lease between "
                   "its check and its PUT writes snapshot-N over the one its successor published")
def test_a_holder_stalled_between_check_and_put_loses_no_acknowledged_batch(tmp_path: Path) -> None:
    # seed 3: a holder passes its lease check, stalls a lease long before its PUT; another takes
    # the lock over, publishes the same snapshot id and is acknowledged; the stalled PUT then
    # replaces it, and w0's second batch is gone (with lapse_before_put=False the seed passes)
    world = new_world(tmp_path, 3, "jdbc-lock", LEASE_FAULTS)
    outcomes, acked = run_writers(world, writers=3)
    check_against_outcomes(world, outcomes, acked)


def test_fault_rates_outside_zero_to_one_are_refused() -> None:
    with pytest.raises(ValueError, match="lost_reply"):
        FaultConfig(lost_reply=1.5)
    with pytest.raises(ValueError, match="add up to more than 1"):
        FaultConfig(lost_reply=0.6, kill=0.6)


def leaking_lock(act: Callable[[Catalog], object]) -> Callable[[Catalog], object]:
    """`act` with a catalog whose table lock skips its release (a committer that returns early
    and forgets it): the lease stays until it expires."""

    def leaking(catalog: Catalog) -> object:
        locks = catalog.locks  # type: ignore[attr-defined]
        new_lock = locks.lock

        def lock(database: str, table: str) -> object:
            held = new_lock(database, table)
            held.release = lambda: True  # the leak: the row stays
            return held

        locks.lock = lock
        return act(catalog)

    return leaking


def test_a_writer_that_returns_holding_the_lock_fails_the_run(tmp_path: Path) -> None:
    """Waiters take a leaked lock over once its lease expires, so every outcome stays right; only
    the world's check after the run sees that a live writer kept its lease."""
    world = new_world(tmp_path, 0, "jdbc-lock", FaultConfig())
    with pytest.raises(InvariantBroken, match=r"w0 returned \(done.*still holding the JDBC lock"):
        world.run({"w0": leaking_lock(writer(0, [])), "w1": writer(1, [])})

