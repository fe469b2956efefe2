"""The lineage graph of a warehouse: which job writes which table from which sources, and how far
behind its upstream each table is.

The graph is read from the newest snapshot of each table (its effective lineage: a compaction
keeps the lineage of the commit before it). Lag of an edge upstream -> table:

* ``behind_snapshots``: snapshots of the upstream after the one consumed that changed data
  (compactions do not count: a reader has nothing new to consume from them);
* ``behind_millis``: how long the oldest of those has been waiting (now - its commit time), 0 when
  the table is up to date.

External sources (``strata.lineage.offset.*``) appear as nodes with the offset consumed; their lag
is not known here (the source system holds the end offsets).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from strata.errors import SnapshotNotFoundError, TableNotFoundError
from strata.lineage.record import effective_lineage
from strata.snapshot.snapshot import CommitKind

if TYPE_CHECKING:
    from strata.catalog.base import Catalog
    from strata.table.table import Table


@dataclass
class LineageEdge:
    source: str  # "db.table", or the name of an external source
    source_kind: str  # "table" or "external"
    job: str
    target: str  # "db.table"
    consumed: str  # upstream snapshot id, or external offset
    target_snapshot: int
    upstream_latest: int | None = None
    behind_snapshots: int | None = None
    behind_millis: int | None = None


@dataclass
class LineageGraph:
    tables: list[str] = field(default_factory=list)
    jobs: dict[str, list[str]] = field(default_factory=dict)  # job -> tables it writes
    edges: list[LineageEdge] = field(default_factory=list)

    def upstream_of(self, table: str) -> list[LineageEdge]:
        return [e for e in self.edges if e.target == table]

    def to_dict(self) -> dict[str, object]:
        return {"tables": list(self.tables), "jobs": {k: list(v) for k, v in self.jobs.items()},
                "edges": [asdict(e) for e in self.edges]}


def lineage_graph(catalog: Catalog, tables: Iterable[str] | None = None,
                  now_millis: int | None = None) -> LineageGraph:
    """The graph of `tables` ("db.table"; default every table of the catalog)."""
    names = list(tables) if tables is not None else _all_tables(catalog)
    now = now_millis if now_millis is not None else int(time.time() * 1000)
    graph = LineageGraph(tables=sorted(names))
    for name in names:
        _add_table(graph, catalog, catalog.get_table(name), now)
    return graph


def _all_tables(catalog: Catalog) -> list[str]:
    return [f"{db}.{t}" for db in catalog.list_databases() for t in catalog.list_tables(db)]


def _add_table(graph: LineageGraph, catalog: Catalog, table: Table, now: int) -> None:
    latest = table.snapshot_manager.latest_id()
    if latest is None:
        return
    lineage = effective_lineage(table, latest)
    if lineage is None or lineage.job is None:
        return
    target = str(table.identifier)
    writes = graph.jobs.setdefault(lineage.job, [])
    if target not in writes:
        writes.append(target)
    for source, offset in sorted(lineage.offsets.items()):
        graph.edges.append(LineageEdge(source, "external", lineage.job, target, offset, latest))
    for source, consumed in sorted(lineage.sources.items()):
        edge = LineageEdge(source, "table", lineage.job, target, str(consumed), latest)
        with contextlib.suppress(TableNotFoundError):  # a dropped upstream: the edge stays, without lag
            _measure_lag(edge, catalog.get_table(source), consumed, now)
        graph.edges.append(edge)


def _measure_lag(edge: LineageEdge, upstream: Table, consumed: int, now: int) -> None:
    latest = upstream.snapshot_manager.latest_id()
    edge.upstream_latest = latest
    if latest is None:
        return
    earliest = upstream.snapshot_manager.earliest_id() or 1
    behind, oldest = 0, None
    for sid in range(max(consumed + 1, earliest), latest + 1):
        try:
            snap = upstream.snapshot_manager.snapshot(sid)
        except SnapshotNotFoundError:
            continue  # expired meanwhile
        if snap.commit_kind != CommitKind.COMPACT:
            behind += 1
            oldest = snap.time_millis if oldest is None else oldest
    edge.behind_snapshots = behind
    edge.behind_millis = max(0, now - oldest) if oldest is not None else 0
