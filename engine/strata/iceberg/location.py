"""Where a table's Iceberg mirror lives (``metadata.iceberg.storage``), and whether it has one."""

from __future__ import annotations

from strata.iceberg import versions
from strata.store import FileStore, HasStore, store_of


def enabled(table: FileStore | HasStore) -> bool:
    """Mirrored: main of a table with ``metadata.iceberg.storage`` set (a branch's snapshots are not:
    its ids are main's; tags and unwritten branches become refs of main's metadata)."""
    store = store_of(table)
    return store.branch == "main" and str(store.core.get("metadata.iceberg.storage")) != "disabled"


def table_location(table: FileStore | HasStore) -> str:
    """Where the Iceberg table lives (its ``location``); metadata goes to ``<location>/metadata``."""
    store = store_of(table)
    if store.core.get("metadata.iceberg.storage") == "hadoop-catalog":
        warehouse = store.path.rsplit("/", 2)[0]
        return f"{warehouse}/iceberg/{store.identifier.database}/{store.identifier.table}"
    return store.path


def metadata_dir(table: FileStore | HasStore) -> str:
    """The mirror's metadata directory, as a URI (``file://`` for local paths)."""
    return uri(f"{table_location(table)}/metadata")


def latest_metadata_location(table: FileStore | HasStore) -> str | None:
    """The newest metadata file of the table (``v<N>.metadata.json``, or its statistics version),
    or None before the first sync."""
    return versions.current_location(store_of(table).file_io, metadata_dir(table))


def uri(path: str) -> str:
    return path if "://" in path else f"file://{path}"
