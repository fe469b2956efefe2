"""Checks beside the model's reads, after every step: the table's snapshots are the ones the
model expects (none lost, none from nowhere), each retained snapshot and tag reads back what the
model recorded for it (so no file it names is missing and no batch is lost or counted twice),
and the system tables count what the model counts."""

from __future__ import annotations

import random
from typing import Any

from strata.testing.simulation.model import TableModel, Version
from strata.testing.simulation.readers import Mismatch, check_version


class InvariantBroken(AssertionError):
    """A table state the model rules out (the message names the invariant)."""


def sync_snapshots(table: Any, model: TableModel, intermediate_unchecked: bool = False) -> list[int]:
    """Record the snapshots the last operation published (each holds the model's current rows)
    and forget expired ones; anything else is a broken invariant. Returns the new ids."""
    snapshots = {s.id: s for s in table.snapshots()}
    ids = sorted(snapshots)
    known = sorted(model.history)
    newest_known = known[-1] if known else 0
    unexplained = [i for i in ids if i not in model.history and i <= newest_known]
    if unexplained:
        raise InvariantBroken(f"snapshots {unexplained} appeared below the newest known {newest_known}")
    gone = [i for i in known if i not in ids]
    if gone and ids and max(gone) > ids[0]:
        raise InvariantBroken(f"snapshots {gone} vanished while older snapshot {ids[0]} is retained")
    for i in gone:
        del model.history[i]
    new = [i for i in ids if i > newest_known]
    for i in new:
        if (model.level0_hidden or intermediate_unchecked) and i != new[-1]:
            # the APPEND before the writer's COMPACT: its level-0 files are not read yet, so what
            # it shows depends on the files; the operation's last snapshot must show everything
            # (so must the last of concurrent commits, whose earlier ones hold part of them)
            model.history[i] = Version(tuple(model.columns), None)
        else:
            model.record(i)
    return new


def check_references(table: Any, model: TableModel, rng: random.Random, every: bool) -> int:
    """Read retained snapshots and tags against the model: all of them when `every`, else a few.
    Returns how many reads were made."""
    ids = sorted(i for i, v in model.history.items() if v.rows is not None)
    tags = sorted(model.tags)
    if not every:
        ids = rng.sample(ids, min(2, len(ids)))
        tags = rng.sample(tags, min(1, len(tags)))
    for sid in ids:
        check_version(table, f"time travel to snapshot {sid}", model.history[sid], snapshot_id=sid)
    for name in tags:
        sid, version = model.tags[name]
        check_version(table, f"read of tag {name!r} (snapshot {sid})", version, tag=name)
    return len(ids) + len(tags)


def check_tags_listed(table: Any, model: TableModel) -> None:
    listed = {t.name: t.snapshot.id for t in table.list_tags()}
    expected = {name: sid for name, (sid, _) in model.tags.items()}
    if listed != expected:
        raise InvariantBroken(f"tags {listed}, the model has {expected}")


def check_system_tables(table: Any, model: TableModel) -> None:
    """The snapshots and tags system tables count what the model counts."""
    snapshots = table.system_table("snapshots").num_rows
    if snapshots != len(model.history):
        raise Mismatch(f"system table snapshots has {snapshots} rows, the model retains {len(model.history)}")
    tags = table.system_table("tags").num_rows
    if tags != len(model.tags):
        raise Mismatch(f"system table tags has {tags} rows, the model has {len(model.tags)}")
