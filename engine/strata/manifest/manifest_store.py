"""ManifestStore: the manifest files, manifest lists and index manifests of one table, with merging."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import pyarrow as pa

from strata.errors import CorruptMetadataError
from strata.format import binary_row
from strata.fs import FileIO
from strata.fs.decoded_cache import DecodedFileCache
from strata.io.paths import PathFactory
from strata.manifest import codec
from strata.manifest.index_manifest import IndexManifestEntry
from strata.manifest.manifest_entry import FileKind, ManifestEntry, merge_entries
from strata.manifest.manifest_file_meta import ManifestFileMeta
from strata.manifest.simple_stats import SimpleStats, in_bounds
from strata.schema.table_schema import TableSchema

# about 200 bytes a decoded entry: some 100 MB at most
DECODED_MANIFESTS = DecodedFileCache(max_weight=500_000)
PRUNING_PARTITIONS = 64  # partitions a commit looks for by the manifests' partition stats (read_entries_in)


class ManifestStore:
    """The manifest/ directory of a table. Manifest files and lists are immutable, so their
    decoded contents are cached process-wide (DECODED_MANIFESTS)."""

    def __init__(self, file_io: FileIO, table_path: str, schema: TableSchema,
                 target_file_size: int = 8 << 20, merge_min_count: int = 30,
                 compression: str = "zstandard"):
        self.file_io = file_io
        self.dir = f"{table_path.rstrip('/')}/manifest"
        self.schema = schema
        self.partition_types = [f.type.to_arrow() for f in schema.partition_fields()]
        self.target_file_size = target_file_size
        self.merge_min_count = merge_min_count
        self.compression = compression

    def path(self, name: str) -> str:
        return f"{self.dir}/{name}"

    # -- manifest files ---------------------------------------------------------------------
    def read_manifest(self, name: str) -> list[ManifestEntry]:
        entries: list[ManifestEntry] = self._read_decoded(name, "manifest file", codec.decode_manifest)
        return entries

    def write_manifests(self, entries: Sequence[ManifestEntry], paths: PathFactory) -> list[ManifestFileMeta]:
        """Write entries into one or more manifest files of about the target size."""
        if not entries:
            return []
        metas = []
        # a rough 400 bytes an entry keeps files near the target without re-encoding
        per_file = max(1000, self.target_file_size // 400)
        for start in range(0, len(entries), per_file):
            metas.append(self._write_one(list(entries[start:start + per_file]), paths))
        return metas

    def _write_one(self, entries: list[ManifestEntry], paths: PathFactory) -> ManifestFileMeta:
        name = paths.new_manifest_name()
        data = codec.encode_manifest(entries, compression=self.compression)
        self.file_io.write_bytes(self.path(name), data)
        DECODED_MANIFESTS.put(self.path(name), entries, len(entries))
        added = sum(1 for e in entries if e.kind == FileKind.ADD)
        return ManifestFileMeta(
            file_name=name, file_size=len(data), num_added_files=added,
            num_deleted_files=len(entries) - added, partition_stats=self._partition_stats(entries),
            schema_id=self.schema.id,
            min_bucket=min(e.bucket for e in entries), max_bucket=max(e.bucket for e in entries),
            min_level=min(e.file.level for e in entries), max_level=max(e.file.level for e in entries),
            min_row_id=None, max_row_id=None)

    def _partition_stats(self, entries: list[ManifestEntry]) -> SimpleStats:
        if not self.partition_types:
            return SimpleStats.EMPTY
        distinct = {e.partition for e in entries}
        rows = [binary_row.deserialize(p, self.partition_types) for p in distinct]
        columns = list(zip(*rows, strict=True))
        mins: list[object] = []
        maxs: list[object] = []
        nulls: list[int | None] = []
        for values in columns:
            present = [v for v in values if v is not None]
            mins.append(min(present) if present else None)
            maxs.append(max(present) if present else None)
            nulls.append(len(values) - len(present))
        return SimpleStats(binary_row.serialize(mins, self.partition_types),
                           binary_row.serialize(maxs, self.partition_types), nulls)

    # -- manifest lists ---------------------------------------------------------------------
    def write_manifest_list(self, metas: Sequence[ManifestFileMeta], paths: PathFactory) -> tuple[str, int]:
        name = paths.new_manifest_list_name()
        data = codec.encode_manifest_list(list(metas), compression=self.compression)
        self.file_io.write_bytes(self.path(name), data)
        DECODED_MANIFESTS.put(self.path(name), list(metas), len(metas))
        return name, len(data)

    def read_manifest_list(self, name: str) -> list[ManifestFileMeta]:
        metas: list[ManifestFileMeta] = self._read_decoded(name, "manifest list", codec.decode_manifest_list)
        return metas

    # -- index manifests ----------------------------------------------------------------------
    def read_index_manifest(self, name: str | None) -> list[IndexManifestEntry]:
        """The live index files a snapshot's index manifest lists (none for None)."""
        if name is None:
            return []
        entries: list[IndexManifestEntry] = self._read_decoded(name, "index manifest", codec.decode_index_manifest)
        return entries

    def _read_decoded(self, name: str, what: str, decode: Callable[[bytes], list[Any]]) -> list[Any]:
        """The decoded contents of an immutable metadata file, from DECODED_MANIFESTS when there;
        a copy, as callers may extend or sort what they get."""
        path = self.path(name)
        cached: list[Any] | None = DECODED_MANIFESTS.get(path)
        if cached is not None:
            return list(cached)
        try:
            data = self.file_io.read_bytes(path)
        except FileNotFoundError:
            raise CorruptMetadataError(f"{what} {path} is missing") from None
        try:
            decoded = decode(data)
        except Exception as exc:
            raise CorruptMetadataError(f"{what} {path} is corrupt: {exc}") from None
        DECODED_MANIFESTS.put(path, decoded, len(decoded))
        return decoded

    def write_index_manifest(self, entries: Sequence[IndexManifestEntry], paths: PathFactory) -> str:
        name = paths.new_index_manifest_name()
        data = codec.encode_index_manifest(list(entries), compression=self.compression)
        self.file_io.write_bytes(self.path(name), data)
        DECODED_MANIFESTS.put(self.path(name), list(entries), len(entries))
        return name

    def read_entries(self, metas: Iterable[ManifestFileMeta]) -> list[ManifestEntry]:
        out: list[ManifestEntry] = []
        for meta in metas:
            out.extend(self.read_manifest(meta.file_name))
        return out

    def read_entries_in(self, metas: Iterable[ManifestFileMeta], partitions: Collection[bytes]) -> list[ManifestEntry]:
        """The entries of `metas` in `partitions` (serialized BinaryRows), reading only the
        manifests whose partition stats may hold one of them (every manifest when there are
        more than PRUNING_PARTITIONS to look for: comparing would cost more than it saves)."""
        wanted = set(partitions)
        if self.partition_types and len(wanted) <= PRUNING_PARTITIONS:
            rows = [binary_row.deserialize(p, self.partition_types) for p in wanted]
            metas = [m for m in metas if self._may_hold(m.partition_stats, rows)]
        return [e for e in self.read_entries(metas) if e.partition in wanted]

    def _may_hold(self, stats: SimpleStats, rows: list[list[Any]]) -> bool:
        """Whether a manifest with these partition stats may hold a partition of `rows`."""
        if stats.is_empty():
            return True
        lows = binary_row.deserialize(stats.min_values, self.partition_types)
        highs = binary_row.deserialize(stats.max_values, self.partition_types)
        nulls = stats.null_counts
        return any(all(_may_hold_value(v, lows[i], highs[i], nulls[i] if i < len(nulls) else None)
                       for i, v in enumerate(row)) for row in rows)

    # -- merging (ManifestFileMerger) -----------------------------------------------------------
    def merge(self, metas: list[ManifestFileMeta], paths: PathFactory) -> list[ManifestFileMeta]:
        """Rewrite small manifests into bigger ones once there are merge_min_count of them.

        Entries of the small manifests are merged (ADD+DELETE of a file cancel), so base manifest
        lists do not grow without bound."""
        small = [m for m in metas if m.file_size < self.target_file_size]
        if len(small) < self.merge_min_count:
            return metas
        large = [m for m in metas if m.file_size >= self.target_file_size]
        # unmatched DELETEs must survive: their ADD may sit in a large manifest
        merged = merge_entries(self.read_entries(small))
        return large + self.write_manifests(merged, paths)


def _may_hold_value(value: Any, low: Any, high: Any, nulls: int | None) -> bool:
    if value is None:
        return nulls is None or nulls > 0
    if low is None or high is None:
        # partition stats cover every entry: no bounds with a null count means only nulls
        return nulls is None
    return in_bounds(value, low, high)


def partition_types(schema: TableSchema) -> list[pa.DataType]:
    return [f.type.to_arrow() for f in schema.partition_fields()]
