"""Branches of the simulated table: created from a snapshot, a tag or empty, written on, fast-
forwarded into main and deleted, each with a model of its own (rows, snapshots, tags), and
checked after every step like main: its reads, time travel on it, its tags. Expiry and orphan
cleanup run on main only, so these checks are what shows that they never break a branch.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

from strata.errors import CommitConflictError, SnapshotNotFoundError
from strata.testing.simulation.context import Branch, Context, OperationFailed, arrow_of, batch_rows, expect_refusal
from strata.testing.simulation.invariants import check_references, check_tags_listed, sync_snapshots
from strata.testing.simulation.readers import check_latest

TABLE = "sim.t"
MAX_BRANCHES = 2  # live branches at once: each is read after every step


def create_branch(ctx: Context, rng: random.Random) -> str:
    if len(ctx.branches) >= MAX_BRANCHES:
        return "enough"
    retained = ctx.model.checked_snapshots(s.id for s in ctx.table.snapshots())
    name = ctx.fresh_name("b")
    roll = rng.random()
    if roll < 0.25 and ctx.model.tags:
        tag = rng.choice(sorted(ctx.model.tags))
        sid = ctx.model.tags[tag][0]
        table = ctx.table.create_branch(name, from_tag=tag)
        model, label = ctx.model.branched(sid, tag), "from_tag"
    elif roll < 0.8 and retained:
        sid = rng.choice(retained)
        table = ctx.table.create_branch(name, from_snapshot=sid)
        model, label = ctx.model.branched(sid), "from_snapshot"
    else:
        table = ctx.table.create_branch(name)
        model, label = ctx.model.branched(None), "empty"
    ctx.branches[name] = Branch(name, table, model)
    if sorted(ctx.table.list_branches()) != sorted(ctx.branches):
        raise OperationFailed(f"branches listed {ctx.table.list_branches()}, created {sorted(ctx.branches)}")
    return label


def branch_write(ctx: Context, rng: random.Random) -> str:
    """A batch (upserts and deletes by row kind) written on a branch by its own writer."""
    if not ctx.branches:
        return "no_branch"
    branch = ctx.branches[rng.choice(sorted(ctx.branches))]
    view = dataclasses.replace(ctx, model=branch.model, table=branch.table)
    rows = batch_rows(view, rng, rng.randint(1, 30))
    ctx.next_row_id = view.next_row_id
    kinds = None
    if branch.model.is_primary and rng.random() < 0.5:
        kinds = [rng.choice(("-D", "-U")) if rng.random() < 0.2 else rng.choice(("+I", "+U")) for _ in rows]
    branch.identifier += 1
    result = branch.table.write(arrow_of(view, rows), row_kind=kinds, commit_user=branch.user,
                                identifier=branch.identifier)
    if result.skipped_as_duplicate or not result.snapshot_ids:
        raise OperationFailed(f"write of {len(rows)} rows on branch {branch.name} published nothing: {result}")
    branch.model.upsert(rows, kinds)
    branch.model.added[result.snapshot_ids[0]] = (rows, kinds)
    return "written"


def fast_forward(ctx: Context, rng: random.Random) -> str:
    """Main becomes the branch from its earliest snapshot on, where main's committers take a lock
    (the JDBC lock); by conditional PUT it is refused with a clear error, main unchanged."""
    if not ctx.branches:
        return "no_branch"
    branch = ctx.branches[rng.choice(sorted(ctx.branches))]
    if not branch.model.history:
        expect_refusal(lambda: ctx.table.fast_forward(branch.name), f"fast-forward to the empty branch "
                       f"{branch.name}", "snapshot")
        return "refused_empty"
    if not ctx.world.use_jdbc_lock:
        try:
            ctx.table.fast_forward(branch.name)
        except CommitConflictError as exc:
            if "lock" not in str(exc):
                raise OperationFailed(f"fast-forward without a commit lock refused unclearly: {exc!r}") from exc
            return "refused_without_lock"
        raise OperationFailed("fast-forward without a commit lock (conditional PUT) was accepted")
    if _main_left_the_fork(ctx, branch.name, min(branch.model.history)):
        expect_refusal(lambda: ctx.table.fast_forward(branch.name), f"fast-forward to {branch.name} after main "
                       "was rolled back below the branch point", "rolled back below")
        return "refused_diverged"
    latest = ctx.table.fast_forward(branch.name)
    if latest != max(branch.model.history):
        raise OperationFailed(f"fast-forward to {branch.name} returned snapshot {latest}, the branch's latest "
                              f"is {max(branch.model.history)}")
    ctx.model.fast_forwarded(branch.model)
    ctx.table = ctx.catalog.get_table(TABLE)
    return "forwarded"


def _main_left_the_fork(ctx: Context, name: str, first_id: int) -> bool:
    """Whether main keeps snapshots below the branch's first one but no longer that snapshot as the
    branch copied it (main was rolled back below the branch point): fast-forward must refuse then."""
    main = ctx.table.snapshot_manager
    earliest = main.earliest_id()
    if earliest is None or earliest >= first_id:
        return False
    first = ctx.table.on_branch(name).snapshot_manager.snapshot(first_id)
    try:
        return not main.snapshot(first_id).same_commit(first)
    except SnapshotNotFoundError:
        return True


def delete_branch(ctx: Context, rng: random.Random) -> str:
    if not ctx.branches:
        return "no_branch"
    name = rng.choice(sorted(ctx.branches))
    ctx.table.delete_branch(name)
    del ctx.branches[name]
    if sorted(ctx.table.list_branches()) != sorted(ctx.branches):
        raise OperationFailed(f"branches listed {ctx.table.list_branches()} after deleting {name}")
    return "deleted"


def check_branches(ctx: Context, rng: random.Random, every: bool, counters: Counter[str]) -> None:
    """Each branch against its model: its snapshots (none lost or from nowhere), a read of its
    latest snapshot, time travel to its snapshots and tags (all of them when `every`)."""
    for name in sorted(ctx.branches):
        branch = ctx.branches[name]
        sync_snapshots(branch.table, branch.model)
        counters[f"read:branch_{check_latest(branch.table, branch.model, rng)}"] += 1
        counters["read:branch_time_travel"] += check_references(branch.table, branch.model, rng, every)
        check_tags_listed(branch.table, branch.model)
