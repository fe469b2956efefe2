"""One line of a manifest list: a manifest file and its summary (``ManifestFileMeta.java``)."""

from __future__ import annotations

from dataclasses import dataclass

from strata.manifest.simple_stats import SimpleStats


@dataclass(slots=True)
class ManifestFileMeta:
    """A manifest file's name, size, entry counts and pruning ranges.

    The bucket/level/row-id ranges are newer nullable fields; None means "unknown, do not prune".
    """

    file_name: str
    file_size: int
    num_added_files: int
    num_deleted_files: int
    partition_stats: SimpleStats
    schema_id: int
    min_bucket: int | None = None
    max_bucket: int | None = None
    min_level: int | None = None
    max_level: int | None = None
    min_row_id: int | None = None
    max_row_id: int | None = None
