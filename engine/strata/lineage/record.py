"""Recording lineage in snapshot properties, and reading it back.

A commit of a pipeline stage records, as plain string properties of its snapshot (so every Paimon
reader still reads the table; they ignore unknown properties):

``strata.lineage.job``                  the job that wrote the commit
``strata.lineage.source.<db>.<table>``  per upstream table: the snapshot id consumed up to
``strata.lineage.offset.<name>``        per external source (a Kafka topic, a CDC stream): the
                                        offset consumed up to, as the job spells it
``strata.lineage.root.<name>``          derived: the position at the pipeline's roots this commit
                                        derives from (external offsets, or the snapshot of an
                                        upstream table that records no lineage itself)
``strata.lineage.conflict``             derived: roots whose upstreams disagreed (comma-separated)

The roots are copied forward from the upstream snapshots when the commit is made, so computing a
consistent set later never has to read upstream snapshots, which may have expired by then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strata.errors import SnapshotNotFoundError
from strata.snapshot.snapshot import CommitKind, Snapshot

if TYPE_CHECKING:
    from strata.table.table import Table

PREFIX = "strata.lineage."
JOB_KEY = PREFIX + "job"
SOURCE_PREFIX = PREFIX + "source."
OFFSET_PREFIX = PREFIX + "offset."
ROOT_PREFIX = PREFIX + "root."
CONFLICT_KEY = PREFIX + "conflict"


@dataclass(frozen=True)
class SnapshotLineage:
    """What one snapshot says about where its data came from."""

    job: str | None
    sources: dict[str, int] = field(default_factory=dict)  # "db.table" -> upstream snapshot id
    offsets: dict[str, str] = field(default_factory=dict)  # external source -> offset
    roots: dict[str, str] = field(default_factory=dict)  # root name -> position
    conflicts: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        return not self.conflicts


def lineage_properties(job: str, reads: Mapping[Table, int] | None = None,
                       offsets: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The snapshot properties of a commit by `job` that consumed each upstream table of `reads` up
    to the given snapshot id and each external source of `offsets` up to the given offset. Pass
    them as ``properties=`` of ``TableCommit.commit`` / ``overwrite``."""
    if not job or not job.strip():
        raise ValueError("lineage job name must not be blank")
    props = {JOB_KEY: job}
    roots: dict[str, str] = {}
    conflicts: set[str] = set()
    for name, offset in (offsets or {}).items():
        _check_name(name, "external source")
        props[OFFSET_PREFIX + name] = str(offset)
        _merge_roots(roots, conflicts, {name: str(offset)})
    for table, snapshot_id in (reads or {}).items():
        props[SOURCE_PREFIX + str(table.identifier)] = str(int(snapshot_id))
        _merge_roots(roots, conflicts, upstream_roots(table, int(snapshot_id)))
    props.update({ROOT_PREFIX + k: v for k, v in roots.items()})
    if conflicts:
        props[CONFLICT_KEY] = ",".join(sorted(conflicts))
    return props


def _check_name(name: str, what: str) -> None:
    if not name or "," in name or any(c.isspace() for c in name):
        raise ValueError(f"lineage {what} name {name!r} must be non-empty, without commas or spaces")


def _merge_roots(roots: dict[str, str], conflicts: set[str], more: Mapping[str, str]) -> None:
    """Two upstreams that derive from different positions of one root: the commit mixes them."""
    for name, position in more.items():
        if name in conflicts:
            continue
        if name in roots and roots[name] != position:
            conflicts.add(name)
            del roots[name]
        else:
            roots[name] = position


def upstream_roots(table: Table, snapshot_id: int) -> dict[str, str]:
    """The root positions snapshot `snapshot_id` of `table` derives from. A table without lineage
    is a root itself, at the snapshot that last changed its data (compactions change none)."""
    lineage = effective_lineage(table, snapshot_id)
    if lineage is not None:
        if not lineage.consistent:
            raise ValueError(f"snapshot {snapshot_id} of {table.identifier} mixes inconsistent upstream "
                             f"positions of {', '.join(lineage.conflicts)}; it cannot be a lineage source")
        return dict(lineage.roots)
    return {str(table.identifier): str(data_version(table, snapshot_id))}


def parse_lineage(properties: Mapping[str, str] | None) -> SnapshotLineage | None:
    """The lineage in a snapshot's properties; None if it records none."""
    props = properties or {}
    if JOB_KEY not in props:
        return None
    try:
        sources = {k[len(SOURCE_PREFIX):]: int(v) for k, v in props.items() if k.startswith(SOURCE_PREFIX)}
    except ValueError as exc:
        raise ValueError(f"snapshot property {SOURCE_PREFIX}<table> must be a snapshot id: {exc}") from None
    offsets = {k[len(OFFSET_PREFIX):]: v for k, v in props.items() if k.startswith(OFFSET_PREFIX)}
    roots = {k[len(ROOT_PREFIX):]: v for k, v in props.items() if k.startswith(ROOT_PREFIX)}
    conflicts = tuple(c for c in props.get(CONFLICT_KEY, "").split(",") if c)
    return SnapshotLineage(props[JOB_KEY], sources, offsets, roots, conflicts)


def effective_lineage(table: Table, snapshot_id: int) -> SnapshotLineage | None:
    """The lineage of a snapshot; a COMPACT snapshot (same data) has that of the commit before it."""
    for snap in _back_from(table, snapshot_id):
        lineage = parse_lineage(snap.properties)
        if lineage is not None or snap.commit_kind != CommitKind.COMPACT:
            return lineage
    return None


def data_version(table: Table, snapshot_id: int) -> int:
    """The newest snapshot at or before `snapshot_id` that changed data (skips COMPACT ones)."""
    for snap in _back_from(table, snapshot_id):
        if snap.commit_kind != CommitKind.COMPACT:
            return snap.id
    return snapshot_id


def _back_from(table: Table, snapshot_id: int) -> Iterable[Snapshot]:
    """Snapshots `snapshot_id`, `snapshot_id - 1`, ... while they exist."""
    sid = snapshot_id
    while sid >= 1:
        try:
            yield table.snapshot_manager.snapshot(sid)
        except SnapshotNotFoundError:
            if sid == snapshot_id:
                raise SnapshotNotFoundError(f"snapshot {snapshot_id} of {table.identifier} does not exist "
                                            "(expired?)") from None
            return
        sid -= 1
