"""Random operations, each applied to the table and to the model.

An operation is a small JSON dict, ``{"op": "write", "seed": 123}``, generated from the run's
seed before anything runs. What it does in detail (which rows, which snapshot to roll back to,
which column to rename) is drawn from its own seed and the state at the time it runs, so any
sub-list of operations still runs: that is what shrinking replays.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from typing import Any

from strata.testing.simulation import branching, changes
from strata.testing.simulation.context import Context, OperationFailed, arrow_of, batch_rows, expect_refusal
from strata.testing.simulation.model import Column
from strata.testing.simulation.readers import (
    Mismatch,
    actual_rows,
    matcher,
    random_filter,
    to_predicate,
)
from strata.testing.simulation.schemas import WIDENINGS, TableSpec, reserved_columns
from strata.testing.simulation.values import atomic_value, random_value

Op = dict[str, Any]
WRITER = "sim-writer"
TABLE = "sim.t"

# relative weights; writes dominate so that the other operations have something to act on
WEIGHTS = {"write": 30, "delete_keys": 5, "delete_where": 5, "overwrite": 4, "compact": 8, "sort_compact": 2,
           "create_tag": 5, "delete_tag": 2, "rollback": 4, "expire_snapshots": 4, "remove_orphans": 3,
           "add_column": 3, "drop_column": 2, "rename_column": 2, "widen_column": 2, "replay": 4,
           "concurrent_writes": 6}
# operations added later, drawn from a stream of each op's own (see random_ops): a share of a seed's
# operations become one of these, and the others stay what they were
LATER_WEIGHTS = {"create_branch": 3, "branch_write": 6, "fast_forward": 2, "delete_branch": 1, "reset_consumer": 3,
                 "read_incremental": 4, "expire_partitions": 2}
LATER_SHARE = 0.2
# the name of that stream: one under which the operations that the recorded regression runs and the
# planted-defect tests keep (engine/tests/simulation) stay what they were
LATER_STREAM = "later48"


def random_ops(rng: random.Random, spec: TableSpec, steps: int) -> list[Op]:
    """One op at a time, so that the first N ops of a seed are the same whatever the step count."""
    kinds = [k for k in WEIGHTS if _applies(k, spec)]
    weights = [WEIGHTS[k] for k in kinds]
    ops = [{"op": rng.choices(kinds, weights)[0], "seed": rng.randrange(2**31)} for _ in range(steps)]
    later = [k for k in LATER_WEIGHTS if _applies(k, spec)]
    for op in ops:
        own = random.Random(f"{LATER_STREAM}:{op['seed']}")
        if own.random() < LATER_SHARE:
            op["op"] = own.choices(later, [LATER_WEIGHTS[k] for k in later])[0]
    return ops


def _applies(kind: str, spec: TableSpec) -> bool:
    if kind == "delete_keys":
        return bool(spec.primary_keys)
    if kind == "sort_compact":
        return not spec.primary_keys and spec.options.get("bucket") == "-1"
    if kind == "expire_partitions":
        return bool(spec.partition_keys)
    return True


def apply(op: Op, ctx: Context) -> str:
    """Run one operation on the table and the model; returns a label for the counters."""
    rng = random.Random(op["seed"])
    label: str = _APPLY[op["op"]](ctx, rng)
    return label


# -- writes -----------------------------------------------------------------------------------------
def _write(ctx: Context, rng: random.Random) -> str:
    rows = batch_rows(ctx, rng, rng.randint(1, 40))
    kinds = None
    if ctx.model.is_primary and rng.random() < 0.5:
        kinds = [rng.choice(("-D", "-U")) if rng.random() < 0.2 else rng.choice(("+I", "+U")) for _ in rows]
    ctx.identifier += 1
    data = arrow_of(ctx, rows)
    result = ctx.table.write(data, row_kind=kinds, commit_user=WRITER, identifier=ctx.identifier)
    if result.skipped_as_duplicate or not result.snapshot_ids:
        raise OperationFailed(f"write of {len(rows)} rows (identifier {ctx.identifier}) published nothing: {result}")
    ctx.model.upsert(rows, kinds)
    for sid in result.snapshot_ids:
        ctx.model.identifiers[sid] = ctx.identifier
    ctx.model.added[result.snapshot_ids[0]] = (rows, kinds)
    ctx.last_write = (ctx.identifier, data, kinds, rows)
    return "with_deletes" if kinds and any(k[0] == "-" for k in kinds) else "upserts"


def _replay(ctx: Context, rng: random.Random) -> str:
    """The last write again with its commit user and identifier: skipped while a retained
    snapshot of this writer carries that identifier or a later one, committed again otherwise."""
    if ctx.last_write is None:
        return "nothing"
    identifier, _, kinds, written = ctx.last_write
    # the same rows under today's schema: an added column is null, and a column the schema no
    # longer has (a rollback or fast-forward took it away) is not written, even if a later
    # column takes its field id
    rows = [{c.field_id: r.get(c.field_id) for c in ctx.model.columns} for r in written]
    data = arrow_of(ctx, rows)
    lacking = [c.name for c in ctx.model.columns if not c.type.nullable and any(r[c.field_id] is None for r in rows)]
    if lacking:  # a NOT NULL column the rows were written without (a fast-forward brought it back)
        expect_refusal(lambda: ctx.table.write(data, row_kind=kinds, commit_user=WRITER, identifier=identifier),
                       f"replay of identifier {identifier} without NOT NULL column {lacking[0]}", lacking[0].lower())
        return "refused_not_null"
    retained = {s.id for s in ctx.table.snapshots()}
    published = [i for s, i in ctx.model.identifiers.items() if s in retained]
    expect_skip = bool(published) and max(published) >= identifier
    result = ctx.table.write(data, row_kind=kinds, commit_user=WRITER, identifier=identifier)
    if result.skipped_as_duplicate != expect_skip:
        raise OperationFailed(f"replay of identifier {identifier}: skipped={result.skipped_as_duplicate}, "
                              f"expected {expect_skip} (retained identifiers {sorted(published)})")
    if not expect_skip:
        ctx.model.upsert(rows, kinds)
        for sid in result.snapshot_ids:
            ctx.model.identifiers[sid] = identifier
        ctx.model.added[result.snapshot_ids[0]] = (rows, kinds)
    return "skipped" if expect_skip else "recommitted"


def _delete_keys(ctx: Context, rng: random.Random) -> str:
    model = ctx.model
    present = list(model.keyed.values())
    doomed = rng.sample(present, min(len(present), rng.randint(1, 5))) + batch_rows(ctx, rng, 1)
    data = arrow_of(ctx, doomed)
    keys_only = rng.random() < 0.5  # the other columns may be left out
    ctx.table.delete(data.select(list(model.primary_keys)) if keys_only else data)
    model.delete_keys([model.key_of(r) for r in doomed])
    return model.merge_engine


def _delete_where(ctx: Context, rng: random.Random) -> str:
    f = random_filter(rng, ctx.model)
    if f is None:
        return "no_filter"
    if not ctx.model.is_primary and ctx.spec.options.get("deletion-vectors.enabled") != "true":
        expect_refusal(lambda: ctx.table.delete_where(to_predicate(f)), "delete_where on an append table "
                        "without deletion vectors", "deletion")
        return "refused"
    ctx.table.delete_where(to_predicate(f))
    ctx.model.delete_matching(matcher(f, ctx.model.columns))
    return "deleted"


def _overwrite(ctx: Context, rng: random.Random) -> str:
    model = ctx.model
    if model.partition_keys:
        pcol = model.column(model.partition_keys[0])
        value = atomic_value(rng, pcol.type, rng.randrange(4))
        rows = batch_rows(ctx, rng, rng.randint(0, 20), partition=value)
        ctx.table.write(arrow_of(ctx, rows), mode="overwrite", partition={pcol.name: value})
        model.overwrite(lambda r: r.get(pcol.field_id) == value, rows)
        return "partition"
    rows = batch_rows(ctx, rng, rng.randint(0, 20))
    ctx.table.write(arrow_of(ctx, rows), mode="overwrite")
    model.overwrite(lambda r: True, rows)
    return "table"


# -- compaction -------------------------------------------------------------------------------------
def _compact(ctx: Context, rng: random.Random) -> str:
    full = rng.random() < 0.5
    ctx.table.compact(full=full)
    return "full" if full else "minor"


def _sort_compact(ctx: Context, rng: random.Random) -> str:
    candidates = [c.name for c in ctx.model.columns if not c.type.is_nested and c.name not in ctx.model.partition_keys]
    columns = rng.sample(candidates, min(len(candidates), rng.randint(1, 2)))
    strategy = rng.choice(("order", "zorder"))
    if not columns:
        return "no_columns"
    ctx.table.compact(sort_by=columns, sort_strategy=strategy)
    return strategy


# -- tags, rollback, expiry, orphans ------------------------------------------------------------------
def _create_tag(ctx: Context, rng: random.Random) -> str:
    retained = ctx.model.checked_snapshots(s.id for s in ctx.table.snapshots())
    if not retained:
        return "no_snapshot"
    sid = rng.choice(retained) if rng.random() < 0.4 else retained[-1]
    name = ctx.fresh_name("tag")
    ctx.table.create_tag(name, snapshot_id=sid)
    ctx.model.tags[name] = (sid, ctx.model.history[sid])
    return "latest" if sid == retained[-1] else "older"


def _delete_tag(ctx: Context, rng: random.Random) -> str:
    if not ctx.model.tags:
        return "no_tag"
    name = rng.choice(sorted(ctx.model.tags))
    if not ctx.table.delete_tag(name):
        raise OperationFailed(f"delete_tag({name!r}) found no such tag")
    del ctx.model.tags[name]
    return "deleted"


def _rollback(ctx: Context, rng: random.Random) -> str:
    retained = ctx.model.checked_snapshots(s.id for s in ctx.table.snapshots())
    if ctx.model.tags and (not retained or rng.random() < 0.4):
        name = rng.choice(sorted(ctx.model.tags))
        sid, version = ctx.model.tags[name]
        ctx.table.rollback_to(name)
        ctx.model.restore(sid, version)
        return "to_tag"
    if not retained:
        return "no_snapshot"
    sid = rng.choice(retained)
    ctx.table.rollback_to(sid)
    ctx.model.restore(sid, ctx.model.history[sid])
    return "to_snapshot"


def _expire_snapshots(ctx: Context, rng: random.Random) -> str:
    keep = rng.randint(1, 4)
    ctx.table.expire_snapshots(retain_min=1, retain_max=keep)
    return f"keep_{keep}"


def _remove_orphans(ctx: Context, rng: random.Random) -> str:
    """Every file no snapshot, tag or branch names goes (nothing runs concurrently here); no
    query changes: the latest snapshot and every tag read the same before and after."""
    before = _query_answers(ctx)
    result = ctx.table.remove_orphan_files(older_than=dt.datetime.now())
    try:
        after = _query_answers(ctx)
    except Exception as exc:  # a file a snapshot or tag names is gone
        raise OperationFailed(f"orphan cleanup broke a read that it must not change: {exc!r}") from exc
    changed = sorted(name for name in before if before[name] != after[name])
    if changed:
        raise OperationFailed(f"orphan cleanup changed what {changed} read (it deleted "
                              f"{len(getattr(result, 'deleted', []) or [])} files)")
    deleted = len(getattr(result, "deleted", []) or [])
    return "some" if deleted else "none"


def _query_answers(ctx: Context) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the latest snapshot and of each tag, in a comparable form."""
    reads = {"latest": ctx.table.to_arrow()}
    reads.update({f"tag {name}": ctx.table.to_arrow(tag=name) for name in sorted(ctx.model.tags)})
    return {name: actual_rows(table, table.column_names) for name, table in reads.items()}


# -- schema evolution -------------------------------------------------------------------------------
def _evolvable(ctx: Context) -> list[Column]:
    reserved = reserved_columns(ctx.spec)
    return [c for c in ctx.model.columns if c.name not in reserved]


def _refresh_columns(ctx: Context, table: Any) -> None:
    """The model takes the new schema's columns (their ids are Strata's to assign)."""
    ctx.table = table
    ctx.model.columns = [Column(f.id, f.name, f.type) for f in table.schema.fields]


def _add_column(ctx: Context, rng: random.Random) -> str:
    from strata.testing.simulation.schemas import ATOMIC, NOT_IN_ICEBERG

    iceberg = "metadata.iceberg.storage" in ctx.spec.options
    type_text = rng.choice([t for t in ATOMIC if not (iceberg and t in NOT_IN_ICEBERG)])
    first = rng.random() < 0.3
    table = ctx.table.add_column(ctx.fresh_name("a"), type_text, first=first)
    _refresh_columns(ctx, table)
    return "first" if first else "last"


def _drop_column(ctx: Context, rng: random.Random) -> str:
    candidates = _evolvable(ctx)
    if len(candidates) < 2:
        return "none_droppable"
    _refresh_columns(ctx, ctx.table.drop_column(rng.choice(candidates).name))
    return "dropped"


def _rename_column(ctx: Context, rng: random.Random) -> str:
    candidates = _evolvable(ctx)
    if not candidates:
        return "none_renamable"
    _refresh_columns(ctx, ctx.table.rename_column(rng.choice(candidates).name, ctx.fresh_name("r")))
    return "renamed"


def _widen_column(ctx: Context, rng: random.Random) -> str:
    candidates = [c for c in _evolvable(ctx) if c.type.root in WIDENINGS]
    if not candidates:
        return "none_widenable"
    column = rng.choice(candidates)
    _refresh_columns(ctx, ctx.table.update_column_type(column.name, WIDENINGS[column.type.root]))
    return f"{column.type.root.lower()}_widened"


# -- concurrent committers under faults (strata.testing.simulation.jobs) ----------------------------
def _concurrent_writes(ctx: Context, rng: random.Random) -> str:
    """Writers, a compaction job, a maintenance job and shared-user jobs, interleaved at every
    storage call under the run's faults (strata.testing.simulation.jobs)."""
    from strata.testing.simulation.jobs import concurrent_jobs

    if ctx.world is None:
        return "no_world"
    return concurrent_jobs(ctx, rng)


_APPLY: dict[str, Callable[[Context, random.Random], str]] = {
    "write": _write, "replay": _replay, "delete_keys": _delete_keys, "delete_where": _delete_where,
    "overwrite": _overwrite, "compact": _compact, "sort_compact": _sort_compact, "create_tag": _create_tag,
    "delete_tag": _delete_tag, "rollback": _rollback, "expire_snapshots": _expire_snapshots,
    "remove_orphans": _remove_orphans, "add_column": _add_column, "drop_column": _drop_column,
    "rename_column": _rename_column, "widen_column": _widen_column, "concurrent_writes": _concurrent_writes,
    "create_branch": branching.create_branch, "branch_write": branching.branch_write,
    "fast_forward": branching.fast_forward, "delete_branch": branching.delete_branch,
    "reset_consumer": changes.reset_consumer, "read_incremental": changes.read_incremental,
    "expire_partitions": changes.expire_partitions}

__all__ = ["WEIGHTS", "Context", "Mismatch", "Op", "OperationFailed", "apply", "arrow_of", "random_ops",
           "random_value"]
