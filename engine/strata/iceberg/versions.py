"""The files that make an Iceberg metadata version, and publishing one (ARCHITECTURE decision 9).

A version is named by its Paimon snapshot, as Paimon's Iceberg compatibility names it:
``v<N>.metadata.json`` for snapshot N, and ``version-hint.text`` holding N, while the table only
moves forward. After a rollback the numbers go on past the current version's (the snapshot a
version shows is its ``current-snapshot-id``): a version is written once (create-if-absent) and
never rewritten, and Iceberg's Hadoop-table readers, which probe for versions past the hint, never
find a stale one there. Statistics computed after a version was published
go into its *statistics version* ``v<N>.stats.metadata.json``: the same metadata plus the
statistics entries, also written once. Readers that go through Strata (its REST catalog,
``latest_metadata_location``) take the statistics version of N when it exists; Iceberg's own
Hadoop-table readers look for ``v<N>.metadata.json`` only, and so do Paimon's (whose listing reads
the number before the first dot, N for both names).

Publishing has three outcomes: ours is published (True), another writer's file holds the name
(False: nothing of ours is published, our files may go), or the outcome is unknown (a lost reply
and a failed read-back: ``CommitStateUnknownError``, every file is kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from strata.errors import CommitStateUnknownError
from strata.fs import FileIO
from strata.iceberg.manifests import FORMAT_VERSION

VERSION_HINT = "version-hint.text"
STATISTICS_SUFFIX = ".stats"  # v<N>.stats.metadata.json


def current_id(metadata: dict[str, Any] | None) -> int | None:
    """The metadata's current snapshot id (None: no metadata, or schema only)."""
    if metadata is None:
        return None
    current = metadata.get("current-snapshot-id")
    return None if current in (None, -1) else int(current)


def current_snapshot(metadata: dict[str, Any]) -> dict[str, Any]:
    current = metadata["current-snapshot-id"]
    return next(s for s in metadata["snapshots"] if s["snapshot-id"] == current)


def format_version_of(metadata: dict[str, Any]) -> int:
    return int(metadata.get("format-version", FORMAT_VERSION))


def metadata_file(metadata_dir: str, version: int) -> str:
    return f"{metadata_dir}/v{version}.metadata.json"


def statistics_file(metadata_dir: str, version: int) -> str:
    return f"{metadata_dir}/v{version}{STATISTICS_SUFFIX}.metadata.json"


def read_hint(file_io: FileIO, metadata_dir: str) -> int | None:
    try:
        return int(file_io.read_bytes(f"{metadata_dir}/{VERSION_HINT}").decode().strip())
    except (FileNotFoundError, ValueError):
        return None


@dataclass
class Version:
    """Metadata version `number` as readers see it: its statistics version when there is one."""

    number: int
    location: str
    raw: bytes

    @property
    def metadata(self) -> dict[str, Any]:
        return dict(json.loads(self.raw))

    @property
    def with_statistics(self) -> bool:
        return self.location.endswith(f"{STATISTICS_SUFFIX}.metadata.json")


def load(file_io: FileIO, metadata_dir: str, version: int | None) -> Version | None:
    """Version `version` (its statistics version first), or None when neither file exists."""
    if version is None:
        return None
    for location in (statistics_file(metadata_dir, version), metadata_file(metadata_dir, version)):
        try:
            return Version(version, location, file_io.read_bytes(location))
        except FileNotFoundError:
            continue
    return None


def current(file_io: FileIO, metadata_dir: str) -> Version | None:
    """The version ``version-hint.text`` names, as readers see it."""
    return load(file_io, metadata_dir, read_hint(file_io, metadata_dir))


def current_location(file_io: FileIO, metadata_dir: str) -> str | None:
    """Where the current version lives, read with two small requests (no file body)."""
    version = read_hint(file_io, metadata_dir)
    if version is None:
        return None
    with_stats = statistics_file(metadata_dir, version)
    return with_stats if file_io.exists(with_stats) else metadata_file(metadata_dir, version)


def publish(file_io: FileIO, location: str, data: bytes) -> bool:
    """Create `location` with `data` if absent. True: ours is there; False: another writer's is
    (definitely not ours). An error of the write is ambiguous (the request may have landed and
    lost its reply): the file is read back; if that fails too, CommitStateUnknownError. An error
    with the file absent afterwards is re-raised: nothing was published."""
    try:
        if file_io.write_new(location, data):
            return True
        write_error: BaseException | None = None
    except (OSError, CommitStateUnknownError) as exc:
        write_error = exc
    try:
        landed = file_io.read_bytes(location)
    except FileNotFoundError:
        if write_error is not None:
            raise write_error from None
        return False  # taken, then removed (a rollback's or an expiry's cleanup): not ours
    except OSError as exc:
        raise CommitStateUnknownError(
            f"Iceberg metadata {location}: the write {'failed' if write_error else 'found the file taken'} "
            f"({write_error or 'exists'}) and reading it back failed too ({exc}); it may or may not be ours. "
            "Every file is kept: the next sync (or `strata iceberg sync`) settles it") from exc
    return landed == data
