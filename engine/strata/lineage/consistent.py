"""Consistent snapshot sets: snapshots of several tables of one pipeline that all derive from the
same point of the pipeline's roots (FLIP-276's consistent reads).

Every snapshot has a *point*: the root positions it derives from (``strata.lineage.root.*``; a
table that records no lineage is a root itself, at its data version). A set of snapshots, one per
table, is consistent when

* any two of them agree on every root they share, and
* they are connected: every table shares a root with the others (a manual write into a derived
  table starts a root of its own, which then matches nothing).

The newest consistent set is found by a search over each table's distinct points, newest first,
in the order the tables are given: for a pipeline with one root (a chain or a tree fed by one
source) that is simply the newest root position every table has reached. A join over the tables
read at these snapshots equals the same join computed from the roots at that point.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from strata.lineage.record import data_version, parse_lineage
from strata.snapshot.snapshot import CommitKind

if TYPE_CHECKING:
    from strata.table.table import Table

Point = tuple[tuple[str, str], ...]  # sorted (root, position) pairs
MAX_TAG_NAME = 120


@dataclass(frozen=True)
class ConsistentSet:
    point: dict[str, str]  # root -> position, the union over the tables
    snapshots: dict[str, int]  # "db.table" -> snapshot id

    def snapshot_of(self, table: Table | str) -> int:
        name = str(table.identifier) if not isinstance(table, str) else table
        if name not in self.snapshots:
            raise KeyError(f"table {name} is not in the consistent set ({', '.join(self.snapshots)})")
        return self.snapshots[name]

    def tag_name(self, prefix: str = "lineage") -> str:
        """One name for this point on every table: ``<prefix>-<root>-<position>...`` (hashed when
        long), so Trino reads all tables of a join at it with one ``scan_tag_name`` session setting."""
        body = "_".join(f"{_safe(root)}-{_safe(pos)}" for root, pos in sorted(self.point.items()))
        name = f"{prefix}-{body}"
        if len(name) > MAX_TAG_NAME:
            name = f"{prefix}-{hashlib.sha256(body.encode()).hexdigest()[:16]}"
        return name

    def spark_options(self, table: Table | str) -> dict[str, str]:
        """Read options of the ``strata`` Spark source that read `table` at this set."""
        return {"snapshot-id": str(self.snapshot_of(table))}

    def to_dict(self) -> dict[str, object]:
        return {"point": dict(self.point), "snapshots": dict(self.snapshots), "tag": self.tag_name()}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def _newest_points(table: Table) -> Iterator[tuple[Point | None, int]]:
    """(point, snapshot id) down the table's live snapshots, newest first; None where a snapshot
    mixes inconsistent upstream positions. A COMPACT snapshot without lineage has the point of the
    snapshot before it, so a run of them is yielded with that point, under the run's newest id."""
    manager = table.snapshot_manager
    latest = manager.latest_id()
    if latest is None:
        return
    compacted: list[int] = []  # the run of COMPACT snapshots without lineage just walked, newest first
    for snap in manager.newest_first(latest, (manager.earliest_id() or 1) - 1):
        lineage = parse_lineage(snap.properties)
        if lineage is None and snap.commit_kind == CommitKind.COMPACT:
            compacted.append(snap.id)
            continue
        if lineage is not None:
            point = _point(lineage.roots) if lineage.consistent else None
        else:
            point = _point({str(table.identifier): str(snap.id)})  # a root at its data version
        yield point, compacted[0] if compacted else snap.id
        compacted = []
    if compacted:  # the oldest live snapshots compacted data whose commit has expired
        yield _point({str(table.identifier): str(data_version(table, compacted[-1]))}), compacted[0]


class _Candidates:
    """A table's distinct points, newest first, each with its newest snapshot, walked lazily and
    remembered: the search stops at the newest consistent set, so when the tables' newest
    snapshots agree it reads one snapshot of each, and no snapshot is read twice. (Positions are
    opaque strings: proving that a table never reached a point still walks its whole history.)"""

    def __init__(self, table: Table):
        self._walk = _newest_points(table)
        self._seen: set[Point] = set()
        self._known: list[tuple[Point, int]] = []

    def __iter__(self) -> Iterator[tuple[Point, int]]:
        i = 0
        while i < len(self._known) or self._walk_to_next():
            yield self._known[i]
            i += 1

    def _walk_to_next(self) -> bool:
        for point, sid in self._walk:
            if point and point not in self._seen:
                self._seen.add(point)
                self._known.append((point, sid))
                return True
        return False


def _point(roots: Mapping[str, str]) -> Point:
    return tuple(sorted(roots.items()))


def consistent_set(tables: Sequence[Table]) -> ConsistentSet | None:
    """The newest consistent set of snapshots of `tables`; None if they have none (yet)."""
    if not tables:
        raise ValueError("a consistent set needs at least one table")
    names = [str(t.identifier) for t in tables]
    if len(set(names)) != len(names):
        raise ValueError(f"tables of a consistent set must be distinct, got {names}")
    candidates = [_Candidates(t) for t in tables]
    chosen = _search(candidates, [], {})
    if chosen is None:
        return None
    point: dict[str, str] = {}
    for p, _ in chosen:
        point.update(p)
    return ConsistentSet(point, {name: sid for name, (_, sid) in zip(names, chosen, strict=True)})


def _search(candidates: Sequence[_Candidates], chosen: list[tuple[Point, int]],
            fixed: dict[str, str]) -> list[tuple[Point, int]] | None:
    """Depth-first over the tables in order, newest point first; `fixed` is the roots chosen so far."""
    if len(chosen) == len(candidates):
        return chosen if _connected([p for p, _ in chosen]) else None
    for point, sid in candidates[len(chosen)]:
        if any(fixed.get(root, pos) != pos for root, pos in point):
            continue
        found = _search(candidates, [*chosen, (point, sid)], {**fixed, **dict(point)})
        if found is not None:
            return found
    return None


def _connected(points: list[Point]) -> bool:
    """Every point reachable from the first through shared roots."""
    roots = [{root for root, _ in p} for p in points]
    reached, frontier = {0}, [0]
    while frontier:
        i = frontier.pop()
        for j in range(len(points)):
            if j not in reached and roots[i] & roots[j]:
                reached.add(j)
                frontier.append(j)
    return len(reached) == len(points)


def read_consistent(tables: Sequence[Table], cset: ConsistentSet | None = None,
                    columns: Mapping[str, Sequence[str]] | None = None) -> dict[str, pa.Table]:
    """Each table read at the consistent set (computed now unless given), by "db.table"."""
    cset = cset or consistent_set(tables)
    if cset is None:
        raise ValueError(f"tables {', '.join(str(t.identifier) for t in tables)} have no consistent "
                         "snapshot set yet (does every stage record lineage, and has each committed?)")
    out = {}
    for table in tables:
        name = str(table.identifier)
        out[name] = table.to_arrow(columns=(columns or {}).get(name), snapshot_id=cset.snapshot_of(name))
    return out


def tag_consistent_set(tables: Sequence[Table], cset: ConsistentSet, prefix: str = "lineage",
                       time_retained: object = None) -> str:
    """Tag each table's snapshot of the set with the set's one tag name (kept if it exists), so any
    reader (Trino's ``scan_tag_name``, Spark's ``tag`` option) reads the set, and expiry keeps it."""
    name = cset.tag_name(prefix)
    for table in tables:
        table.create_tag(name, cset.snapshot_of(table), time_retained=time_retained, ignore_if_exists=True)
    return name
