"""Manifest entries and the merge rules of ``manifest/FileEntry.java``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.errors import ManifestMergeError

# (partition, bucket, level, file_name, extra_files, embedded_index, external_path)
Identifier = tuple[bytes, int, int, str, tuple[str, ...], bytes | None, str | None]


class FileKind(IntEnum):
    """Whether an entry adds or deletes its file; stored as a TINYINT."""

    ADD = 0
    DELETE = 1


@dataclass(slots=True)
class ManifestEntry:
    """One line of a manifest file: a file added to, or deleted from, a (partition, bucket)."""

    kind: FileKind
    partition: bytes  # serialized BinaryRow
    bucket: int
    total_buckets: int
    file: DataFileMeta

    def identifier(self) -> Identifier:
        """The key that says two entries refer to the same file (``FileEntry.Identifier``)."""
        f = self.file
        extra = tuple(f.extra_files) if f.extra_files else ()  # most files have none: no new tuple
        return (self.partition, self.bucket, f.level, f.file_name, extra, f.embedded_index, f.external_path)


def _describe(entry: ManifestEntry) -> str:
    return (f"{entry.file.file_name!r} (partition {entry.partition.hex()}, bucket {entry.bucket}, "
            f"level {entry.file.level})")


def merge_entries(entries: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    """Fold ordered entries as ``FileEntry.mergeEntries`` does.

    An ADD of a file already present (added, or deleted without a prior add) is an error. A
    DELETE cancels an earlier ADD, since a file is added and deleted at most once; a DELETE of a
    file not seen is kept, because its ADD lives in an older manifest. The result keeps first
    insertion order, and a file re-added after a cancelled pair moves to the end.
    """
    entries = list(entries)
    repeated = _repeated_names(entries)
    if not repeated:  # each file named once: nothing cancels, nothing is added twice
        return entries
    merged: dict[Identifier | str, ManifestEntry] = {}
    for entry in entries:
        name = entry.file.file_name
        if name not in repeated:
            merged[name] = entry  # its only entry, kept in place
            continue
        key = entry.identifier()
        if entry.kind == FileKind.ADD:
            if key in merged:
                raise ManifestMergeError(f"Trying to add file {_describe(entry)} which is already "
                                         f"present as {merged[key].kind.name}")
            merged[key] = entry
        elif entry.kind == FileKind.DELETE:
            if merged.pop(key, None) is None:
                merged[key] = entry
        else:
            raise ManifestMergeError(f"Unknown file kind {entry.kind!r} for {_describe(entry)}")
    return list(merged.values())


def _repeated_names(entries: list[ManifestEntry]) -> set[str]:
    """File names that occur in more than one entry (only those can cancel or conflict)."""
    names = [e.file.file_name for e in entries]
    if len(set(names)) == len(names):
        return set()
    seen: set[str] = set()
    repeated: set[str] = set()
    for name in names:
        (repeated if name in seen else seen).add(name)
    return repeated


def live_files(entries: Iterable[ManifestEntry]) -> list[ManifestEntry]:
    """The ADD entries of files still live after all entries (base then delta) are applied.

    Stricter than ``merge_entries``: with the whole history at hand, a surviving DELETE names a
    file that was never added, which means the table metadata is inconsistent.
    """
    merged = merge_entries(entries)
    for entry in merged:
        if entry.kind == FileKind.DELETE:
            raise ManifestMergeError(
                f"Trying to delete file {_describe(entry)} which is not previously added")
    return merged
