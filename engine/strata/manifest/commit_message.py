"""CommitMessage: what one writer of one (partition, bucket) hands to the committer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.index_manifest import IndexManifestEntry


@dataclass
class CommitMessage:
    partition: bytes  # serialized BinaryRow of the partition values
    bucket: int
    total_buckets: int
    new_files: list[DataFileMeta] = field(default_factory=list)
    compact_before: list[DataFileMeta] = field(default_factory=list)
    compact_after: list[DataFileMeta] = field(default_factory=list)
    changelog_files: list[DataFileMeta] = field(default_factory=list)  # with new_files (input producer)
    compact_changelog_files: list[DataFileMeta] = field(default_factory=list)  # from compaction
    # index files (deletion vectors) added or removed, with the new files / with the compaction
    index_changes: list[IndexManifestEntry] = field(default_factory=list)
    compact_index_changes: list[IndexManifestEntry] = field(default_factory=list)
    # dynamic-bucket tables: the new keys each new HASH index file places (strata.index.HashClaim)
    hash_claims: list[Any] = field(default_factory=list, compare=False, repr=False)
    # the log store's records of this commit (strata.log.kafka.LogCommittable), if any
    log: Any = field(default=None, compare=False, repr=False)
    # the writer that prepared the message learns through this whether the commit abandoned its
    # compaction (strata.table.write.CommitFeedback); None for messages made elsewhere
    feedback: Any = field(default=None, compare=False, repr=False)

    def is_empty(self) -> bool:
        return not (self.new_files or self.compact_before or self.compact_after or self.changelog_files
                    or self.compact_changelog_files or self.index_changes or self.compact_index_changes)
