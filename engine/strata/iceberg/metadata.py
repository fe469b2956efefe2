"""Iceberg table metadata (``v<N>.metadata.json``) of a Paimon table: schema, partition spec,
snapshots, refs and the logs, built from the table's store and the previous version."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from typing import Any

from strata.errors import SnapshotNotFoundError
from strata.iceberg import manifests as im
from strata.iceberg import statistics
from strata.iceberg.location import metadata_dir, table_location, uri
from strata.iceberg.types import highest_field_id, iceberg_type, name_mapping, schema_json
from strata.iceberg.versions import current_id
from strata.snapshot.branches import branch_path, without_changelog
from strata.snapshot.snapshot import CommitKind, Snapshot
from strata.snapshot.snapshot_manager import SnapshotManager
from strata.store import FileStore

SCHEMA_ONLY_VERSION = 0  # v0.metadata.json: the schema before the first snapshot
# the summary key naming the Paimon commit an Iceberg snapshot mirrors (its delta manifest list,
# unique per commit): a snapshot of the same id that a rollback or a fast-forward put in its place
# is another commit, even where its commit time is older
COMMIT_MARKER = "paimon.delta-manifest-list"
_OPERATIONS = {CommitKind.APPEND: "append", CommitKind.COMPACT: "replace", CommitKind.OVERWRITE: "overwrite"}


class MetadataBuilder:
    """Builds one table's Iceberg metadata versions: its location, spec and schema are fixed when
    made (from the store's current schema and options)."""

    def __init__(self, store: FileStore):
        self.store = store
        self.location = table_location(store)
        self.dir = metadata_dir(store)
        self.schema = store.schema
        self.format_version = int(str(store.core.get("metadata.iceberg.format-version")))
        self.spec = [im.PartitionField(f.name, f.id, 1000 + i, iceberg_type(f.type, f.name))
                     for i, f in enumerate(store.schema.partition_fields())]
        self.iceberg_schema = schema_json(store.schema)

    def spec_json(self) -> list[dict[str, Any]]:
        return [{"name": p.name, "transform": "identity", "source-id": p.source_id, "field-id": p.field_id}
                for p in self.spec]

    def schema_only(self, previous: dict[str, Any] | None) -> dict[str, Any]:
        """The metadata of a table without snapshots: its schema, spec and properties."""
        return {
            **self._table(previous, 0, int(time.time() * 1000), 0 if self.format_version >= 3 else None,
                          [self.iceberg_schema]),
            "properties": self._properties(None),
            "current-snapshot-id": -1,
            "refs": {},
            "snapshots": [],
            "snapshot-log": [],
            "metadata-log": [],
            "statistics": [],
            "partition-statistics": [],
        }

    def table_metadata(self, snapshot: Snapshot, previous: dict[str, Any] | None, manifest_list: str,
                       counts: dict[str, int], lineage: tuple[int, int] | None,
                       previous_file: str | None) -> dict[str, Any]:
        """The metadata of `snapshot` (its manifest list written), carrying on the snapshots of
        `previous` the table still has, its other schemas and its metadata log (to which
        `previous_file`, the file `previous` was read from, is added)."""
        earliest = self.store.snapshot_manager.earliest_id() or snapshot.id
        kept = [s for s in (previous or {}).get("snapshots", []) if earliest <= s["snapshot-id"] < snapshot.id]
        summary = {"operation": _OPERATIONS.get(snapshot.commit_kind, "overwrite"),
                   **{k: str(v) for k, v in counts.items()}, COMMIT_MARKER: snapshot.delta_manifest_list}
        parent = current_id(previous)
        new = {"snapshot-id": snapshot.id, "sequence-number": snapshot.id, "timestamp-ms": snapshot.time_millis,
               "manifest-list": manifest_list, "summary": summary, "schema-id": snapshot.schema_id}
        if lineage is not None:
            new["first-row-id"], new["added-rows"] = lineage
        if parent is not None and any(s["snapshot-id"] == parent for s in kept):
            new["parent-snapshot-id"] = parent
        snapshots = [*kept, new]
        schemas = [s for s in (previous or {}).get("schemas", []) if s["schema-id"] != self.schema.id]
        if snapshot.schema_id != self.schema.id and all(s["schema-id"] != snapshot.schema_id for s in schemas):
            # a snapshot older than the table's schema (a rollback to it starts a new chain)
            schemas.append(schema_json(self.store.schema_at(snapshot.schema_id)))
        metadata_log = list((previous or {}).get("metadata-log", []))
        if previous is not None and previous_file is not None:
            metadata_log.append({"timestamp-ms": previous["last-updated-ms"], "metadata-file": previous_file})
        keep_versions = int(self.store.core.get("metadata.iceberg.previous-versions-max"))
        metadata_log = metadata_log[len(metadata_log) - keep_versions:] if keep_versions else []
        return {
            **self._table(previous, snapshot.id, snapshot.time_millis, sum(lineage) if lineage is not None else None,
                          [*schemas, self.iceberg_schema]),
            "properties": self._properties(snapshot),
            "current-snapshot-id": snapshot.id,
            "refs": {"main": {"snapshot-id": snapshot.id, "type": "branch"}, **self._refs(snapshots)},
            "snapshots": snapshots,
            "snapshot-log": [{"timestamp-ms": s["timestamp-ms"], "snapshot-id": s["snapshot-id"]} for s in snapshots],
            "metadata-log": metadata_log,
            "statistics": statistics.carried(previous, snapshots),  # until the next refresh
            "partition-statistics": [],
        }

    def _table(self, previous: dict[str, Any] | None, sequence_number: int, updated_ms: int,
               next_row_id: int | None, schemas: list[dict[str, Any]]) -> dict[str, Any]:
        """The fields every version has: identity, location, sequence, schemas, spec and sort order."""
        return {
            "format-version": self.format_version,
            "table-uuid": (previous or {}).get("table-uuid") or str(uuid.uuid4()),
            "location": uri(self.location),
            "last-sequence-number": sequence_number,
            **({"next-row-id": next_row_id} if next_row_id is not None else {}),
            "last-updated-ms": updated_ms,
            "last-column-id": highest_field_id(self.schema),
            "current-schema-id": self.schema.id,
            "schemas": schemas,
            "default-spec-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": self.spec_json()}],
            "last-partition-id": 999 + len(self.spec),
            "default-sort-order-id": 0,
            "sort-orders": [{"order-id": 0, "fields": []}],
        }

    def _properties(self, snapshot: Snapshot | None) -> dict[str, str]:
        """Table properties: Paimon's snapshot id, and a name mapping for tables with collections
        (data files written before their nested fields carried ids are then read by name)."""
        out = {"write.format.default": "parquet"}
        if snapshot is not None:
            out["paimon.snapshot-id"] = str(snapshot.id)
        if any(f.type.is_nested for f in self.schema.fields):
            out["schema.name-mapping.default"] = json.dumps(name_mapping(self.schema))
        return out

    def _refs(self, snapshots: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Tags as Iceberg tag refs (as Paimon's mirror does), and branches as branch refs when their
        head is one of main's mirrored snapshots (a branch not written since it was created); a
        written branch's snapshots are not mirrored (their ids are main's ids), so it is left out."""
        store = self.store
        mirrored = {s["snapshot-id"] for s in snapshots}
        refs = {t.name: {"snapshot-id": t.snapshot.id, "type": "tag"}
                for t in store.tags.list_all() if t.snapshot.id in mirrored and t.name != "main"}
        for name in store.branches.names():
            head = SnapshotManager(store.file_io, branch_path(store.path, name)).latest()
            if name in refs or head is None or head.id not in mirrored:
                continue
            with contextlib.suppress(SnapshotNotFoundError):
                if without_changelog(store.snapshot_manager.snapshot(head.id)) == without_changelog(head):
                    refs[name] = {"snapshot-id": head.id, "type": "branch"}
        return refs
