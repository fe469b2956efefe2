"""Per-partition statistics of each table's latest snapshot, kept from what commits send.

Java Paimon and pypaimon send, with every commit, the change it makes per partition (Paimon's
``PartitionStatistics``: record, file and size counts, the newest file's creation time). Paimon's
own REST server adds them up and answers ``GET .../snapshot`` and ``GET .../partitions`` from the
sums; so does this. The sums are known for a snapshot only when the server saw the commit that
made it on top of a snapshot whose sums it knew; for any other snapshot (a commit that did not pass
through this server, a restart) they are computed once from the manifests and kept from then on.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Any

from strata.snapshot.snapshot import Snapshot
from strata.table.table import Table

SpecKey = tuple[tuple[str, str], ...]
COUNTS = ("recordCount", "fileSizeInBytes", "fileCount")
KEPT_TABLES = 4096  # tables whose sums are kept, least recently used dropped first


class MalformedStatistics(ValueError):
    """A commit's ``statistics`` that are not a list of Paimon PartitionStatistics."""


@dataclass
class PartitionSums:
    spec: dict[str, str]
    recordCount: int = 0  # Paimon's JSON names
    fileSizeInBytes: int = 0
    fileCount: int = 0
    lastFileCreationTime: int = 0

    def add(self, delta: PartitionSums) -> None:
        self.recordCount += delta.recordCount
        self.fileSizeInBytes += delta.fileSizeInBytes
        self.fileCount += delta.fileCount
        self.lastFileCreationTime = max(self.lastFileCreationTime, delta.lastFileCreationTime)

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec, "recordCount": self.recordCount, "fileSizeInBytes": self.fileSizeInBytes,
                "fileCount": self.fileCount, "lastFileCreationTime": self.lastFileCreationTime, "done": False}


@dataclass
class SnapshotSums:
    """The sums of one snapshot, by partition spec (one entry with an empty spec if unpartitioned)."""

    identity: tuple[int, str | None, int]
    partitions: dict[SpecKey, PartitionSums] = field(default_factory=dict)

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions.values())

    def newest_file_time(self) -> int:
        return max((p.lastFileCreationTime for p in self.partitions.values()), default=0)

    def after(self, snapshot: Snapshot, deltas: list[PartitionSums]) -> SnapshotSums:
        partitions = {key: PartitionSums(**vars(p)) for key, p in self.partitions.items()}
        for delta in deltas:
            key = spec_key(delta.spec)
            partitions.setdefault(key, PartitionSums(dict(delta.spec))).add(delta)
            if partitions[key].fileCount <= 0:  # every file of the partition deleted
                del partitions[key]
        return SnapshotSums(identity(snapshot), partitions)


def identity(snapshot: Snapshot) -> tuple[int, str | None, int]:
    """What tells a snapshot from another of the same id (after a rollback, a fast-forward)."""
    return snapshot.id, snapshot.uuid, snapshot.time_millis


def spec_key(spec: dict[str, str]) -> SpecKey:
    return tuple(sorted(spec.items()))


def parse_deltas(raw: Any) -> list[PartitionSums] | None:
    """A commit request's ``statistics``; None when the client sent none."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise MalformedStatistics("statistics must be a list of partition statistics")
    deltas = []
    for item in raw:
        spec = item.get("spec") if isinstance(item, dict) else None
        if not isinstance(spec, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in spec.items()):
            raise MalformedStatistics(f"partition statistics need a 'spec' object of strings, got {item!r}")
        counts = {name: item.get(name, 0) for name in (*COUNTS, "lastFileCreationTime")}
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values()):
            raise MalformedStatistics(f"partition statistics counts must be integers, got {item!r}")
        deltas.append(PartitionSums(dict(spec), **counts))
    return deltas


def computed(table: Table, snapshot: Snapshot) -> SnapshotSums:
    """The sums of `snapshot` from its manifests: its live files grouped by partition."""
    from strata.format import binary_row
    from strata.table.system_tables import java_string

    fields = table.schema.partition_fields()
    types = [f.type.to_arrow() for f in fields]
    default_name = str(table.core.get("partition.default-name"))
    grouped: dict[bytes, list[Any]] = defaultdict(list)
    for entry in table.new_scan().plan_entries(snapshot):
        grouped[entry.partition].append(entry.file)
    sums = SnapshotSums(identity(snapshot))
    for partition, files in grouped.items():
        values = binary_row.deserialize(partition, types) if fields else []
        spec = {f.name: default_name if v is None else java_string(v, f.type)
                for f, v in zip(fields, values, strict=True)}
        created = [f.creation_time for f in files if f.creation_time is not None]
        sums.partitions[spec_key(spec)] = PartitionSums(
            spec, sum(f.row_count for f in files), sum(f.file_size for f in files), len(files),
            max(created) if created else 0)
    return sums


class StatisticsStore:
    """The sums of each table's newest snapshot this server knows, by table directory."""

    def __init__(self) -> None:
        self._sums: OrderedDict[str, SnapshotSums] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, path: str) -> SnapshotSums | None:
        with self._lock:
            sums = self._sums.get(path)
            if sums is not None:
                self._sums.move_to_end(path)
            return sums

    def _put(self, path: str, sums: SnapshotSums) -> None:
        with self._lock:
            self._sums[path] = sums
            self._sums.move_to_end(path)
            while len(self._sums) > KEPT_TABLES:
                self._sums.popitem(last=False)

    def committed(self, table: Table, snapshot: Snapshot, deltas: list[PartitionSums] | None) -> None:
        """After `snapshot` was published: its sums are its parent's plus what the commit sent, if
        the parent's are known (the parent read again: a rollback may have replaced it)."""
        if deltas is None:
            return
        known = SnapshotSums((0, None, 0)) if snapshot.id == 1 else self._get(table.path)
        if known is None or known.identity[0] != snapshot.id - 1:
            return
        if snapshot.id == 1:
            self._put(table.path, known.after(snapshot, deltas))
            return
        try:
            parent = table.snapshot_manager.snapshot(snapshot.id - 1)
        except (OSError, LookupError):
            return  # unreadable or expired: computed when asked
        if identity(parent) == known.identity:
            self._put(table.path, known.after(snapshot, deltas))

    def known(self, path: str, snapshot: Snapshot) -> SnapshotSums | None:
        """The kept sums of `snapshot` of the table at `path`, or None (not kept: `of` computes them)."""
        kept = self._get(path)
        return kept if kept is not None and kept.identity == identity(snapshot) else None

    def of(self, table: Table, snapshot: Snapshot) -> SnapshotSums:
        """The sums of `snapshot`: kept, or computed from its manifests and kept."""
        known = self.known(table.path, snapshot)
        if known is not None:
            return known
        sums = computed(table, snapshot)
        self._put(table.path, sums)
        return sums
