"""How far a table's Iceberg mirror is behind, and the record of its last failed sync.

A failed sync never raises into the commit (ARCHITECTURE decision 9): it is counted, logged in one
warning line and left in the table's ERROR_FILE, where ``strata iceberg status`` finds it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from strata import metrics
from strata.errors import CommitStateUnknownError
from strata.iceberg import versions
from strata.iceberg.location import enabled, metadata_dir
from strata.store import FileStore, HasStore, store_of

log = logging.getLogger(__name__)

ERROR_FILE = "iceberg-sync-error.json"  # in the table's directory: the last failed sync (strata iceberg status)
_FAILED: set[str] = set()  # tables whose sync failed in this process (their error file is cleared on success)


@dataclass
class SyncStatus:
    """How far a table's Iceberg mirror is behind: `published` is the snapshot its newest metadata
    shows (0: schema only, None: no metadata), `behind` the snapshots not yet in it, `last_error`
    the failure that kept it there (``{"time-ms", "snapshot-id", "error"}``), if any."""

    enabled: bool
    latest_snapshot: int | None
    published: int | None
    behind: int
    last_error: dict[str, Any] | None


def sync_status(table: FileStore | HasStore) -> SyncStatus:
    store = store_of(table)
    latest = store.snapshot_manager.latest()
    latest_id = latest.id if latest is not None else None
    try:  # version numbers are not snapshot ids after a rollback: the current version tells
        current = versions.current(store.file_io, metadata_dir(store))
    except OSError:  # the metadata directory itself is unreadable: it shows nothing
        current = None
    published = None if current is None else versions.current_id(current.metadata) or 0
    behind = max(0, (latest_id or 0) - (published or 0))
    try:
        last_error = dict(json.loads(store.file_io.read_bytes(f"{store.path}/{ERROR_FILE}")))
    except (FileNotFoundError, ValueError):
        last_error = None
    return SyncStatus(enabled(store), latest_id, published, behind, last_error)


def report_failure(table: FileStore | HasStore, exc: BaseException, what: str = "Iceberg metadata sync failed") -> None:
    """Count a failed sync, leave its reason where `strata iceberg status` finds it (outside the
    Iceberg metadata, which may be what fails), and log one warning line. Never raises (what fails
    the sync may fail the bookkeeping too)."""
    store = store_of(table)
    name = str(store.identifier)
    _FAILED.add(name)
    try:
        status = sync_status(store)
        latest, behind = status.latest_snapshot, status.behind
    except Exception:  # the store is unreachable: at least the snapshot just committed is behind
        latest, behind = None, 1
    try:
        metrics.iceberg_sync_failed(name, max(behind, 1))
    except Exception:  # a metrics registry problem must not surface either
        log.debug("table %s: sync failure not counted", name, exc_info=True)
    record = {"time-ms": int(time.time() * 1000), "snapshot-id": latest, "error": f"{type(exc).__name__}: {exc}"}
    with contextlib.suppress(Exception):
        store.file_io.write_bytes(f"{store.path}/{ERROR_FILE}", json.dumps(record).encode())
    unknown = " (outcome unknown: every file kept)" if isinstance(exc, CommitStateUnknownError) else ""
    log.warning("table %s: %s%s (%s: %s); `strata iceberg status %s` tells how far the mirror is behind",
                name, what, unknown, type(exc).__name__, exc, name, exc_info=log.isEnabledFor(logging.DEBUG))


def report_success(table: FileStore | HasStore, clear_error: bool = False) -> None:
    """The mirror is up to date. A recorded failure stays until `clear_error` (an explicit sync)
    or the next failure replaces it: status shows it as past once a later snapshot is published,
    and commits pay no request for it."""
    store = store_of(table)
    name = str(store.identifier)
    metrics.iceberg_sync_succeeded(name)
    if clear_error or name in _FAILED:
        _FAILED.discard(name)
        with contextlib.suppress(FileNotFoundError):
            store.file_io.delete(f"{store.path}/{ERROR_FILE}")
