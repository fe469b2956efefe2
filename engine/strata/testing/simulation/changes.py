"""Consumers, incremental reads and partition expiry of the simulated table, against the model.

* A consumer (``reset_consumer``) keeps snapshot expiry from removing the snapshots it has not
  read: after every step, no retained range starts after a consumer's next snapshot.
* ``read_incremental(a, b)`` between retained snapshots, checked where the model knows what each
  snapshot of (a, b] wrote. Without a changelog producer only APPEND snapshots count (compactions
  and overwrites are no change). An append table's answer is exactly the rows written in (a, b].
  A primary-key table's (no producer, or ``input``) holds exactly the keys written in (a, b] (a
  batch is merged per key in the writer; deletes are dropped with ``ignore-delete``). With
  ``lookup`` or ``full-compaction`` what a range holds depends on when compactions ran, so only
  its columns and row kinds are checked.
* ``expire_partitions`` on a DATE partition drops exactly the partitions before the cutoff (up to
  its limit, in value order); other partition types never parse as a time and never expire.
"""

from __future__ import annotations

import datetime as dt
import os
import random
from typing import Any

from strata.testing.simulation.context import Context, OperationFailed
from strata.testing.simulation.invariants import InvariantBroken
from strata.testing.simulation.model import Row, TableModel, canonical, row_tuple, sorted_rows
from strata.testing.simulation.readers import Mismatch, actual_rows

ROW_KINDS = {"+I", "-U", "+U", "-D"}


# -- consumers ---------------------------------------------------------------------------------------
def reset_consumer(ctx: Context, rng: random.Random) -> str:
    """Move a consumer to a retained snapshot (or past the latest: it has read everything), or
    delete one."""
    ids = sorted(s.id for s in ctx.table.snapshots())
    if ctx.consumers and (not ids or rng.random() < 0.3):
        consumer = rng.choice(sorted(ctx.consumers))
        ctx.table.reset_consumer(consumer, None)
        del ctx.consumers[consumer]
        return "deleted"
    if not ids:
        return "no_snapshot"
    consumer = rng.choice(sorted(ctx.consumers)) if ctx.consumers and rng.random() < 0.5 else ctx.fresh_name("c")
    next_snapshot = ids[-1] + 1 if rng.random() < 0.2 else rng.choice(ids)
    ctx.table.reset_consumer(consumer, next_snapshot)
    ctx.consumers[consumer] = next_snapshot
    return "moved"


def check_consumers(ctx: Context) -> None:
    """The consumers listed are the model's (the concurrent step's guard aside), and expiry kept
    every snapshot from each one's next snapshot on."""
    listed = {c.consumer_id: c.next_snapshot for c in ctx.table.consumers.list_all() if c.consumer_id != "sim-guard"}
    if listed != ctx.consumers:
        raise InvariantBroken(f"consumers {listed}, the model has {ctx.consumers}")
    ids = sorted(s.id for s in ctx.table.snapshots())
    for consumer, next_snapshot in sorted(ctx.consumers.items()):
        if ids and next_snapshot <= ids[-1] and ids[0] > next_snapshot:
            raise InvariantBroken(f"consumer {consumer} has not read snapshot {next_snapshot}, but expiry removed "
                                  f"it (earliest retained {ids[0]})")


# -- incremental reads -------------------------------------------------------------------------------
def read_incremental(ctx: Context, rng: random.Random) -> str:
    snapshots = {s.id: s for s in ctx.table.snapshots()}
    if not snapshots:
        return "no_snapshot"
    ids = sorted(snapshots)
    end = rng.choice(ids)
    start = rng.choice([ids[0] - 1, *[i for i in ids if i <= end]])
    model = ctx.model
    names = [c.name for c in model.columns]
    result = ctx.table.read_incremental(start, end)
    what = f"read_incremental({start}, {end})"
    if list(result.column_names) != ["_ROW_KIND", *names]:
        raise Mismatch(f"{what}: columns {result.column_names}, the model has _ROW_KIND and {names}")
    kinds = set(result.column("_ROW_KIND").to_pylist())
    if not kinds <= ROW_KINDS:
        raise Mismatch(f"{what}: row kinds {sorted(kinds - ROW_KINDS)} are none of {sorted(ROW_KINDS)}")
    producer = ctx.spec.options.get("changelog-producer", "none")
    if producer not in ("none", "input"):
        return f"{producer}_unchecked"
    counted = [s for s in range(start + 1, end + 1) if _changes(snapshots[s].commit_kind, producer)]
    if any(s not in model.added for s in counted):
        return "unknown_snapshots"
    written = [model.added[s] for s in counted]
    if model.is_primary:
        _compare_keys(what, result, model, written, ctx.spec.options.get("ignore-delete") == "true")
        return "keys"
    expected = sorted_rows(row_tuple(r, model.ids(names)) for rows, _ in written for r in rows)
    got = actual_rows(result, names)
    if got != expected:
        raise Mismatch(f"{what}: {len(got)} rows, the model wrote {len(expected)} in those snapshots")
    if kinds - {"+I"}:
        raise Mismatch(f"{what}: an append table's changes are inserts, got row kinds {sorted(kinds)}")
    return "rows"


def _changes(commit_kind: str, producer: str) -> bool:
    """Whether a snapshot of this kind adds to an incremental read (without a producer only the
    APPEND snapshots do; with the input producer anything but a compaction may)."""
    return commit_kind == "APPEND" if producer == "none" else commit_kind != "COMPACT"


def _compare_keys(what: str, result: Any, model: TableModel, written: list[tuple[list[Row], list[str] | None]],
                  ignore_delete: bool) -> None:
    expected = set()
    for rows, kinds in written:
        for i, row in enumerate(rows):
            retract = kinds is not None and kinds[i] in ("-U", "-D")
            if not (retract and ignore_delete):
                expected.add(model.key_of(row))
    columns = [result.column(k).to_pylist() for k in model.primary_keys]
    got = {tuple(canonical(v) for v in values) for values in zip(*columns, strict=True)}
    if got != expected:
        missing, unexpected = sorted(expected - got, key=repr)[:3], sorted(got - expected, key=repr)[:3]
        raise Mismatch(f"{what}: keys {len(got)}, the model wrote {len(expected)} in those snapshots; "
                       f"missing {missing}, unexpected {unexpected}")


# -- partition expiry ------------------------------------------------------------------------------------
def expire_partitions(ctx: Context, rng: random.Random) -> str:
    """On a DATE partition, a cutoff between two of the model's days; else nothing may expire."""
    model = ctx.model
    column = model.column(model.partition_keys[0])
    days: list[dt.date] = sorted(v for v in {r.get(column.field_id) for r in model.rows()} if v is not None)
    if column.type.root != "DATE":
        dropped = ctx.table.expire_partitions(expiration_time="1 d")
        if dropped:
            raise OperationFailed(f"partitions {dropped} of a {column.type} partition expired: their values are "
                                  "no time")
        return f"{column.type.root.lower()}_never"
    if not days:
        # no live row: what may still expire are partitions of deleted rows (files whose rows
        # deletion vectors or retractions all mark), and dropping them loses nothing (reads check)
        ctx.table.expire_partitions(expiration_time="1 d")
        return "no_live_rows"
    cutoff = rng.choice(days)
    threshold = dt.datetime.combine(cutoff, dt.time(12))  # partition times are midnights: the cutoff's day is in
    limit = rng.choice((None, 1, 2))
    dropped = ctx.table.expire_partitions(expiration_time=dt.datetime.now() - threshold, max_expires=limit)
    gone = [d[column.name] for d in dropped]
    older = [d for d in days if d <= cutoff]
    if any(d > cutoff for d in gone) or gone != sorted(gone) or (limit is not None and len(gone) > limit):
        raise OperationFailed(f"expire_partitions (cutoff {cutoff}, limit {limit}) dropped {gone}")
    if (limit is None or len(gone) < limit) and not set(older) <= set(gone):
        raise OperationFailed(f"expire_partitions (cutoff {cutoff}, limit {limit}) dropped {gone}, not all of {older}")
    model.overwrite(lambda r: r.get(column.field_id) in gone, [])
    return "dropped" if gone else "none"


# -- files -------------------------------------------------------------------------------------------
def check_files_present(table: Any) -> int:
    """No file that a retained snapshot or tag of any branch names is missing; returns how many."""
    from strata.operation.orphan import used_files

    used = used_files(table.store)
    root = table.store.path.removeprefix("file://")
    present = {name for _, _, names in os.walk(root) for name in names}
    missing = sorted(used - present)
    if missing:
        raise InvariantBroken(f"{len(missing)} files that retained snapshots, tags or branches name are missing: "
                              f"{missing[:5]}")
    return len(used)
