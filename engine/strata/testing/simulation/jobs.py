"""Concurrent committers of one step, interleaved at every storage call under the run's faults
(strata.testing.simulation.concurrency): writers with their own commit users, a compaction job, a
maintenance job (snapshot expiry, orphan cleanup) and two jobs that share one commit user, each
with its own identifier sequence (a reused ``commit-user``; on primary-key tables whose batch reads
show level 0, with fresh keys).

The model accepts exactly what each committer reported, batch by batch: done (in the table, and
the snapshot the result names is the one that added it; a replay skipped as a duplicate: absent),
not done (absent), unknown or killed (either, decided by reading the table once). On primary-key
tables every writer owns its keys within the step, so whatever order the commits land in, the
model has one answer; a batch landed iff a snapshot carries its (commit user, identifier), except a
shared-user job's, whose identifiers the other job reuses: its keys are fresh, so it landed iff they
are in the table. On append tables every row has its own id, so a batch landed iff its ids are in
the table.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from strata.testing.simulation.concurrency import DONE, KILLED, NOT_DONE, UNKNOWN, Outcome
from strata.testing.simulation.context import arrow_of, batch_rows
from strata.testing.simulation.model import Row, TableModel, canonical
from strata.testing.simulation.readers import Mismatch, actual_rows, expected_rows
from strata.testing.simulation.values import atomic_value

TABLE = "sim.t"
SHARED_USER = "sim-shared"  # the commit user both shared-user jobs were configured with
GUARD = "sim-guard"  # a consumer that keeps the step's snapshots from expiring until it is decided
FRESH_KEYS = 1000  # shared-user batches' keys start here; the other batches' stay below 25


class OutcomeContradicted(AssertionError):
    """A committer's reported outcome that the table contradicts (the message says how)."""


@dataclass
class Batch:
    user: str
    identifier: int
    rows: list[Row]
    kinds: list[str] | None
    data: pa.Table
    # whether the batch's rows tell whether it landed (its own ids or fresh keys), rather than a
    # snapshot with its (commit user, identifier): two jobs sharing a user reuse identifiers
    by_content: bool = False


@dataclass
class Committer:
    """One actor's batches, committed in order, and the result of each one acknowledged."""

    name: str
    batches: list[Batch]
    latest: Callable[[], int]  # the table's latest snapshot id, read without faults
    results: list[Any] = field(default_factory=list)
    # the latest snapshot right after each acknowledged commit: what a plain read would have read
    read_after: list[int] = field(default_factory=list)

    def act(self, catalog: Any) -> int:
        table = catalog.get_table(TABLE)
        for batch in self.batches:
            self.results.append(table.write(batch.data, row_kind=batch.kinds, commit_user=batch.user,
                                            identifier=batch.identifier))
            self.read_after.append(self.latest())
        return len(self.results)


def concurrent_jobs(ctx: Any, rng: random.Random) -> str:
    """Plan the step's committers, run them interleaved, check every outcome against the table,
    and bring the model to what landed."""
    committers = _plan_writers(ctx, rng, arrow_of)
    if any(c.name == "s0" for c in committers):
        ctx.counters[f"jobs:shared_user:{'primary' if ctx.model.is_primary else 'append'}"] += 1
    actors: dict[str, Any] = {c.name: c.act for c in committers}
    if rng.random() < 0.4:
        full = rng.random() < 0.5
        actors["compactor"] = lambda catalog: catalog.get_table(TABLE).compact(full=full)
    if rng.random() < 0.4:
        actors["maintenance"] = _maintenance(rng, dt.datetime.now())
    latest = ctx.table.latest_snapshot()
    ctx.table.reset_consumer(GUARD, (latest.id if latest else 0) + 1)
    try:
        outcomes = ctx.world.run(actors)
        ctx.world.settle()
        landed = _decide(ctx, committers, outcomes)
        _check_visible(ctx, committers, landed)
    finally:
        ctx.table.reset_consumer(GUARD, None)
    for committer in committers:
        for batch, flag in zip(committer.batches, landed[committer.name], strict=True):
            if flag:
                ctx.model.upsert(batch.rows, batch.kinds)
    hidden = any(o.status in (UNKNOWN, KILLED) for o in outcomes.values()) or any(
        r.not_yet_visible for c in committers for r in c.results if hasattr(r, "not_yet_visible"))
    if hidden and ctx.model.level0_hidden:  # a batch whose compaction did not follow waits at level 0
        ctx.table.compact()
    ctx.intermediate_unchecked = True
    return "ambiguous" if any(o.status in (UNKNOWN, KILLED) for o in outcomes.values()) else "settled"


# -- planning -------------------------------------------------------------------------------------
def _plan_writers(ctx: Any, rng: random.Random, arrow_of: Any) -> list[Committer]:
    """Two or three writers of one or two batches; on append tables maybe two shared-user jobs.
    On primary-key tables a key belongs to the first writer that drew it."""
    owner: dict[tuple[Any, ...], str] = {}
    committers = []
    base = ctx.identifier
    for i in range(rng.randint(2, 3)):
        name = f"w{i}"
        batches = []
        for b in range(rng.randint(1, 2)):
            rows = [r for r in batch_rows(ctx, rng, rng.randint(1, 20)) if _claim(ctx.model, owner, r, name)]
            if rows:
                kinds = _row_kinds(ctx.model, rng, len(rows))
                batches.append(Batch(f"sim-{name}", base + b + 1, rows, kinds, arrow_of(ctx, rows)))
        committers.append(Committer(name, batches, _latest_of(ctx)))
    ctx.identifier = base + 2
    if ctx.model.is_primary and not ctx.model.level0_hidden:
        # a stream of its own: the draws of the steps planned before primary-key tables had shared jobs stay
        shared_rng = random.Random(f"shared:{ctx.identifier}:{ctx.next_row_id}")
        if shared_rng.random() < 0.5:
            committers += _shared_jobs(ctx, shared_rng, arrow_of)
    elif not ctx.model.is_primary and rng.random() < 0.5:
        committers += _shared_jobs(ctx, rng, arrow_of)
    return committers


def _shared_jobs(ctx: Any, rng: random.Random, arrow_of: Any) -> list[Committer]:
    """Two jobs configured with one commit user, each numbering its commits from where it left off."""
    jobs = []
    for job in ("s0", "s1"):
        start = ctx.shared_identifiers.get(job, 0)
        count = rng.randint(1, 3)
        batches = [_shared_batch(ctx, rng, arrow_of, start + n + 1) for n in range(count)]
        ctx.shared_identifiers[job] = start + count
        jobs.append(Committer(job, batches, _latest_of(ctx)))
    return jobs


def _latest_of(ctx: Any) -> Callable[[], int]:
    def latest() -> int:
        snapshot = ctx.table.latest_snapshot()
        return snapshot.id if snapshot else 0

    return latest


def _claim(model: TableModel, owner: dict[tuple[Any, ...], str], row: Row, name: str) -> bool:
    if not model.is_primary:
        return True
    return owner.setdefault(model.key_of(row), name) == name


def _row_kinds(model: TableModel, rng: random.Random, count: int) -> list[str] | None:
    if not model.is_primary or rng.random() < 0.5:
        return None
    return [rng.choice(("-D", "-U")) if rng.random() < 0.2 else rng.choice(("+I", "+U")) for _ in range(count)]


def _shared_batch(ctx: Any, rng: random.Random, arrow_of: Any, identifier: int) -> Batch:
    """On a primary-key table the batch's keys are fresh (none in the table or another batch), so
    its rows alone say whether it landed, whichever job's commit carries the identifier."""
    rows = batch_rows(ctx, rng, rng.randint(1, 10))
    if ctx.model.is_primary:
        rows = _with_fresh_keys(ctx, rows)
    return Batch(SHARED_USER, identifier, rows, None, arrow_of(ctx, rows), by_content=True)


def _with_fresh_keys(ctx: Any, rows: list[Row]) -> list[Row]:
    """Each row gets key values past the range other batches draw theirs from (the run's row counter)."""
    model = ctx.model
    keys = [model.column(k) for k in model.primary_keys if k not in model.partition_keys]
    for row in rows:
        ctx.next_row_id += 1
        for column in keys:
            row[column.field_id] = atomic_value(random.Random(0), column.type.with_nullable(False),
                                                FRESH_KEYS + ctx.next_row_id)
    return rows


def _maintenance(rng: random.Random, started: dt.datetime) -> Any:
    """Expiry, orphan cleanup or both. Orphan cleanup spares files newer than the step's start,
    which a committer of the step may still be about to publish (what its threshold is for)."""
    expire, orphans = rng.choice(((True, False), (False, True), (True, True)))
    keep = rng.randint(1, 3)

    def act(catalog: Any) -> None:
        table = catalog.get_table(TABLE)
        if expire:
            table.expire_snapshots(retain_min=1, retain_max=keep)
        if orphans:
            table.remove_orphan_files(older_than=started)

    return act


# -- deciding outcomes ------------------------------------------------------------------------------
def _decide(ctx: Any, committers: list[Committer], outcomes: dict[str, Outcome]) -> dict[str, list[bool]]:
    """Which of each committer's batches landed, checked against what it reported (a committer
    stops at its first failure: the batches after it were never tried)."""
    present = _present_ids(ctx, committers) if not ctx.model.is_primary else \
        _present_keys(ctx) if any(b.by_content for c in committers for b in c.batches) else None
    carried = _carried(ctx)
    landed: dict[str, list[bool]] = {}
    for committer in committers:
        outcome = outcomes[committer.name]
        flags = [_landed(ctx, batch, present, carried) for batch in committer.batches]
        for index, (batch, flag) in enumerate(zip(committer.batches, flags, strict=True)):
            _check_batch(ctx, committer, outcome, index, batch, flag, carried)
        landed[committer.name] = flags
    return landed


def _present_ids(ctx: Any, committers: list[Committer]) -> Counter[Any]:
    """The row ids a plain read of an append table shows. None of the step's rows may show twice
    (an earlier replay that the model recommitted may have put older rows in twice)."""
    ids = Counter(ctx.table.to_arrow(columns=["id"]).column("id").to_pylist())
    step = {i for c in committers for b in c.batches for i in _identities(ctx, b)}
    twice = sorted(i for i, n in ids.items() if n > 1 and i in step)
    if twice:
        raise OutcomeContradicted(f"rows counted twice after concurrent commits: ids {twice[:10]}")
    return ids


def _present_keys(ctx: Any) -> Counter[Any]:
    """The keys a plain read of a primary-key table shows (each once: the table merges them)."""
    return Counter(_key_rows(ctx, ctx.table.to_arrow(columns=list(ctx.model.primary_keys))))


def _key_rows(ctx: Any, read: pa.Table) -> list[tuple[Any, ...]]:
    columns = [read.column(k).to_pylist() for k in ctx.model.primary_keys]
    return [tuple(canonical(v) for v in values) for values in zip(*columns, strict=True)]


def _identities(ctx: Any, batch: Batch) -> list[Any]:
    """What tells the batch's rows apart in a read: ids on append tables, keys on primary-key tables."""
    if ctx.model.is_primary:
        return [ctx.model.key_of(r) for r in batch.rows]
    return [r[ctx.model.column("id").field_id] for r in batch.rows]


def _carried(ctx: Any) -> dict[tuple[str, int], int]:
    """(commit user, identifier) -> the first retained snapshot that carries it, not a compaction;
    a compaction only when no other does (a batch of retractions that ignore-delete drops writes no
    file: its commit publishes only the compaction of the bucket's leftover level-0 files)."""
    found: dict[tuple[str, int], int] = {}
    compactions: dict[tuple[str, int], int] = {}
    for snap in ctx.table.snapshots():
        into = compactions if snap.commit_kind == "COMPACT" else found
        into.setdefault((snap.commit_user, snap.commit_identifier), snap.id)
    return {**compactions, **found}


def _landed(ctx: Any, batch: Batch, present: Counter[Any] | None,
            carried: dict[tuple[str, int], int]) -> bool:
    if present is None or (ctx.model.is_primary and not batch.by_content):
        return (batch.user, batch.identifier) in carried
    ids = _identities(ctx, batch)
    found = [i for i in ids if present[i]]
    if found and found != ids:
        raise OutcomeContradicted(f"part of a batch of {batch.user} ({batch.identifier}) landed: {found} of {ids}")
    return bool(found)


def _check_batch(ctx: Any, committer: Committer, outcome: Outcome, index: int, batch: Batch, landed: bool,
                 carried: dict[tuple[str, int], int]) -> None:
    where = f"{committer.name} batch {index} ({batch.user}, identifier {batch.identifier}, {outcome.status}: " \
            f"{outcome.error!r})"
    if index < len(committer.results):
        result = committer.results[index]
        if result.skipped_as_duplicate:
            if landed:
                raise OutcomeContradicted(f"{where}: skipped as a duplicate, yet its rows are in the table")
            return
        if not landed:
            raise OutcomeContradicted(f"{where}: acknowledged (snapshots {result.snapshot_ids}), not in the table")
        _check_own_snapshot(ctx, where, batch, result.snapshot_ids, carried)
    elif landed and (index > len(committer.results) or outcome.status in (NOT_DONE, DONE)):
        raise OutcomeContradicted(f"{where}: never acknowledged, yet in the table")


def _check_own_snapshot(ctx: Any, where: str, batch: Batch, snapshot_ids: list[int],
                        carried: dict[tuple[str, int], int]) -> None:
    """The first snapshot a result names is the one that added the batch (not another job's)."""
    if not snapshot_ids:
        raise OutcomeContradicted(f"{where}: acknowledged without a snapshot")
    first = snapshot_ids[0]
    retained = {s.id for s in ctx.table.snapshots()}
    if first not in retained:
        return
    if ctx.model.is_primary and not batch.by_content:
        if carried.get((batch.user, batch.identifier)) != first:
            raise OutcomeContradicted(f"{where}: told snapshot {first}, but the batch is in "
                                      f"{carried.get((batch.user, batch.identifier))}")
        return
    ids = set(_identities(ctx, batch))
    if not ids <= _ids_at(ctx, first) or (first - 1 in retained and ids & _ids_at(ctx, first - 1)):
        raise OutcomeContradicted(f"{where}: told snapshot {first} added the batch, but it did not")


def _ids_at(ctx: Any, snapshot_id: int) -> set[Any]:
    """The ids (append tables) or keys (primary-key tables) snapshot `snapshot_id` shows."""
    if ctx.model.is_primary:
        return set(_key_rows(ctx, ctx.table.to_arrow(snapshot_id=snapshot_id, columns=list(ctx.model.primary_keys))))
    return set(ctx.table.to_arrow(snapshot_id=snapshot_id, columns=["id"]).column("id").to_pylist())


# -- visibility -----------------------------------------------------------------------------------
def _check_visible(ctx: Any, committers: list[Committer], landed: dict[str, list[bool]]) -> None:
    """After a writer's last acknowledged batch, a plain read (of the latest snapshot as the
    commit returned) and a read at the snapshot the result names as the first to show the batch
    (`visible_from`; a compactor may have moved its level-0 files up first) show the rows of that
    batch as the model has them, unless the result said `not_yet_visible`."""
    retained = {s.id for s in ctx.table.snapshots()}
    for committer in committers:
        if not committer.results or committer.results[-1].skipped_as_duplicate:
            continue
        result = committer.results[-1]
        if getattr(result, "not_yet_visible", None):
            continue
        last = committer.batches[len(committer.results) - 1]
        acknowledged = len(committer.results)  # a batch that landed after it is not in that snapshot
        batches = [b for b, flag in zip(committer.batches[:acknowledged], landed[committer.name], strict=False) if flag]
        expected = _expected_own_rows(ctx.model, batches, last)
        names = [c.name for c in ctx.model.columns]
        reads = {committer.read_after[-1]: "the latest as its last commit returned",
                 getattr(result, "visible_from", None): "the first its last commit says shows the batch"}
        for snapshot_id, which in reads.items():
            if snapshot_id not in retained:
                continue
            rows = actual_rows(ctx.table.to_arrow(snapshot_id=snapshot_id), names)
            got = [r for r in rows if _own(ctx.model, r, last)]
            if got != expected:
                missing, extra = [r for r in expected if r not in got], [r for r in got if r not in expected]
                raise Mismatch(f"{committer.name}: snapshot {snapshot_id}, {which}, shows {len(got)} rows of its "
                               f"last batch, the model {len(expected)}; missing {missing[:3]}, unexpected {extra[:3]}")


def _expected_own_rows(model: TableModel, batches: list[Batch], last: Batch) -> list[tuple[Any, ...]]:
    scratch = copy.copy(model)
    scratch.keyed, scratch.appended = copy.deepcopy(model.keyed), []
    for batch in batches:
        scratch.upsert(batch.rows, batch.kinds)
    rows = [r for r in scratch.rows() if _own_row(model, r, last)]
    return expected_rows(rows, model.columns, None)


def _own_row(model: TableModel, row: Row, last: Batch) -> bool:
    if model.is_primary:
        return model.key_of(row) in {model.key_of(r) for r in last.rows}
    field_id = model.column("id").field_id
    return row[field_id] in {r[field_id] for r in last.rows}


def _own(model: TableModel, values: tuple[Any, ...], last: Batch) -> bool:
    """Whether a read row (in the model's column order, canonical) is one of the last batch's."""
    row = {c.field_id: v for c, v in zip(model.columns, values, strict=True)}
    return _own_row(model, row, last)
