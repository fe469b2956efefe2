"""The snapshot JSON of Paimon (Snapshot.java, version 3)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from strata.errors import CorruptMetadataError

SNAPSHOT_VERSION = 3
BATCH_COMMIT_IDENTIFIER = 2**63 - 1  # Long.MAX_VALUE: a batch write's identifier
NO_WATERMARK = -(2**63)


class CommitKind:
    APPEND = "APPEND"
    COMPACT = "COMPACT"
    OVERWRITE = "OVERWRITE"
    ANALYZE = "ANALYZE"


@dataclass
class Snapshot:
    id: int
    schema_id: int
    base_manifest_list: str
    delta_manifest_list: str
    commit_user: str
    commit_identifier: int
    commit_kind: str
    time_millis: int
    total_record_count: int
    delta_record_count: int
    base_manifest_list_size: int | None = None
    delta_manifest_list_size: int | None = None
    changelog_manifest_list: str | None = None
    changelog_manifest_list_size: int | None = None
    index_manifest: str | None = None
    changelog_record_count: int | None = None
    watermark: int | None = None
    statistics: str | None = None
    properties: dict[str, str] | None = None
    next_row_id: int | None = None
    uuid: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    _JSON = [
        ("version", None), ("uuid", "uuid"), ("id", "id"), ("schemaId", "schema_id"),
        ("baseManifestList", "base_manifest_list"), ("baseManifestListSize", "base_manifest_list_size"),
        ("deltaManifestList", "delta_manifest_list"), ("deltaManifestListSize", "delta_manifest_list_size"),
        ("changelogManifestList", "changelog_manifest_list"),
        ("changelogManifestListSize", "changelog_manifest_list_size"),
        ("indexManifest", "index_manifest"), ("commitUser", "commit_user"),
        ("commitIdentifier", "commit_identifier"), ("commitKind", "commit_kind"),
        ("timeMillis", "time_millis"), ("totalRecordCount", "total_record_count"),
        ("deltaRecordCount", "delta_record_count"), ("changelogRecordCount", "changelog_record_count"),
        ("watermark", "watermark"), ("statistics", "statistics"), ("properties", "properties"),
        ("nextRowId", "next_row_id"),
    ]

    def to_json(self) -> str:
        obj: dict[str, Any] = {}
        for key, attr in self._JSON:
            value = SNAPSHOT_VERSION if attr is None else getattr(self, attr)
            if value is not None:
                obj[key] = value
        obj.update(self.extra)
        return json.dumps(obj, indent=2)

    @staticmethod
    def from_json(text: str | bytes, where: str = "snapshot") -> Snapshot:
        try:
            obj = json.loads(text)
            known = {k for k, _ in Snapshot._JSON}
            kwargs = {attr: obj.get(key) for key, attr in Snapshot._JSON if attr is not None}
            for required in ("id", "schema_id", "base_manifest_list", "delta_manifest_list",
                             "commit_kind"):
                if kwargs.get(required) is None:
                    raise KeyError(required)
            kwargs["commit_user"] = kwargs.get("commit_user") or ""
            kwargs["commit_identifier"] = int(kwargs.get("commit_identifier") or 0)
            kwargs["time_millis"] = int(kwargs.get("time_millis") or 0)
            kwargs["total_record_count"] = int(kwargs.get("total_record_count") or 0)
            kwargs["delta_record_count"] = int(kwargs.get("delta_record_count") or 0)
            extra = {k: v for k, v in obj.items() if k not in known}
            return Snapshot(**kwargs, extra=extra)
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptMetadataError(f"cannot parse {where}: missing or invalid {exc}") from None

    def same_commit(self, other: Snapshot) -> bool:
        """True if `other` is the same logical commit (used after an ambiguous publish)."""
        return (self.commit_user == other.commit_user
                and self.commit_identifier == other.commit_identifier
                and self.commit_kind == other.commit_kind
                and self.delta_manifest_list == other.delta_manifest_list)
