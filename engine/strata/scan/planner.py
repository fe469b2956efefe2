"""TableScan: pick a snapshot, read its manifests, prune, and group live files into splits."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from strata import metrics
from strata.deletionvectors import DeletionFile, deletion_files
from strata.errors import SnapshotNotFoundError
from strata.expressions import ColumnStats, Predicate, equality_literals, only_fields
from strata.expressions.literals import bind
from strata.format import binary_row
from strata.format.bucket import bucket_ids
from strata.manifest.codec import gc_paused
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.manifest_entry import FileKind, ManifestEntry, live_files, merge_entries
from strata.manifest.manifest_file_meta import ManifestFileMeta
from strata.manifest.simple_stats import SimpleStats
from strata.options import POSTPONE_BUCKET
from strata.snapshot.snapshot import Snapshot
from strata.store import FileStore, HasStore, store_of


@dataclass
class DataSplit:
    """The files of one (partition, bucket) a reader merges together."""

    snapshot_id: int
    partition: bytes
    partition_values: tuple[Any, ...]
    bucket: int
    total_buckets: int
    files: list[DataFileMeta]
    bucket_path: str
    row_kinds: bool = False  # incremental/changelog reads keep -U/-D rows
    merged_files: list[DataFileMeta] = field(default_factory=list)
    # deletion-vector tables: data file name -> its vector; the files are read raw, without merging
    deletion_files: dict[str, DeletionFile] | None = None

    @property
    def row_count(self) -> int:
        return sum(f.row_count for f in self.files)

    def file_path(self, f: DataFileMeta) -> str:
        """Where one of the split's data files is (its external path, else in the bucket)."""
        return f.external_path or f"{self.bucket_path}/{f.file_name}"

    def raw_convertible(self) -> bool:
        """True when no merging is needed: one file, or no two files whose keys can overlap."""
        return self.deletion_files is not None or len(self.files) <= 1 or (all(f.level > 0 for f in self.files) and \
            len({f.level for f in self.files}) == 1)


@dataclass
class ScanStats:
    manifests_read: int = 0
    manifests_skipped: int = 0
    files_scanned: int = 0
    files_skipped: int = 0


@dataclass
class Plan:
    snapshot: Snapshot | None
    splits: list[DataSplit]
    stats: ScanStats


class TableScan:
    def __init__(self, table: FileStore | HasStore, snapshot_id: int | None = None,
                 timestamp_millis: int | None = None, tag: str | None = None, filter: Predicate | None = None,
                 read_optimized: bool = False):
        self.store = table = store_of(table)
        # $ro: primary-key tables read only their top level (fully merged, possibly stale), with
        # deletion vectors too (Paimon's ReadOptimizedTable)
        self.top_level = table.core.num_levels - 1 if read_optimized and table.schema.primary_keys else None
        schema = table.schema
        # bound once: partition, bucket and statistics pruning compare the same typed literals
        self.filter = filter = bind(filter, schema)
        self._snapshot_id = snapshot_id
        self._timestamp = timestamp_millis
        self._tag = tag
        self.partition_fields = schema.partition_fields()
        self.partition_filter = only_fields(filter, set(schema.partition_keys))
        stat_fields = set(schema.trimmed_primary_keys) if schema.primary_keys else set(schema.field_names)
        self.file_filter = only_fields(filter, stat_fields - set(schema.partition_keys))
        self.stats = ScanStats()
        self.deletion_vectors = bool(table.core.get("deletion-vectors.enabled"))

    # -- snapshot selection ---------------------------------------------------------------
    def snapshot(self) -> Snapshot | None:
        manager = self.store.snapshot_manager
        if self._tag is not None:
            return self.store.tags.get(self._tag)
        if self._snapshot_id is not None:
            return manager.snapshot(self._snapshot_id)
        if self._timestamp is not None:
            snap = manager.latest_at_or_before(self._timestamp)
            if snap is None:
                raise SnapshotNotFoundError(
                    f"no snapshot of table {self.store.identifier} at or before {self._timestamp}")
            return snap
        return manager.latest()

    # -- planning ----------------------------------------------------------------------------
    def plan_entries(self, snapshot: Snapshot | None = None) -> list[ManifestEntry]:
        """Live files of the snapshot that survive partition, bucket and stats pruning."""
        snapshot = snapshot if snapshot is not None else self.snapshot()
        if snapshot is None:
            return []
        store = self.store.manifest_store
        metas = (store.read_manifest_list(snapshot.base_manifest_list)
                 + store.read_manifest_list(snapshot.delta_manifest_list))
        # partition-filter before merging: a kept manifest may hold the DELETE of a file whose ADD
        # sits in a manifest pruned by partition stats
        entries = store.read_entries(self._prune_manifests(metas))
        if self.partition_filter is not None:
            entries = [e for e in entries if self._entry_partition_ok(e)]
        live = live_files(entries)
        if self.store.core.bucket == POSTPONE_BUCKET:
            # Paimon's onlyReadRealBuckets: bucket-postpone files wait for the postpone compaction
            live = [e for e in live if e.bucket != POSTPONE_BUCKET]
        if self._keeps_all():
            self.stats.files_scanned += len(live)
            return live
        return [e for e in live if self._keep(e)]

    def _keeps_all(self) -> bool:
        """No level filter and no filter (the partition, bucket and stats filters derive from
        it): every live file is planned."""
        return self.top_level is None and self.filter is None

    def _entry_partition_ok(self, entry: ManifestEntry) -> bool:
        if self._partition_ok(entry.partition):
            return True
        if entry.kind == FileKind.ADD:
            self.stats.files_skipped += 1
        return False

    def plan(self) -> Plan:
        started = time.monotonic()
        snapshot = self.snapshot()
        with gc_paused():  # every entry outlives the decode: a GC pass would only re-scan them
            entries = self.plan_entries(snapshot)
            if self._skips_level0():
                entries = [e for e in entries if e.file.level > 0]
            splits = self._splits(snapshot.id if snapshot else 0, entries)
        if self.deletion_vectors and snapshot is not None:
            self._attach_deletion_files(snapshot, splits)
        plan = Plan(snapshot, splits, self.stats)
        metrics.scan_finished(str(self.store.identifier), time.monotonic() - started, self.stats)
        return plan

    def _skips_level0(self) -> bool:
        """Batch reads of merge-on-write and first-row tables skip level 0 (Paimon's
        batchScanSkipLevel0): their writers compact it up at every commit, and until then (or
        until the compaction job runs, for write-only writers) its rows are not visible."""
        if not self.store.schema.primary_keys:
            return False
        return self.deletion_vectors or self.store.core.merge_engine == "first-row"

    def _attach_deletion_files(self, snapshot: Snapshot, splits: list[DataSplit]) -> None:
        index = self.store.manifest_store.read_index_manifest(snapshot.index_manifest)
        by_bucket = deletion_files(self.store.path, index)
        for split in splits:
            found = by_bucket.get((split.partition, split.bucket), {})
            split.deletion_files = {f.file_name: found[f.file_name] for f in split.files if f.file_name in found}

    def plan_delta(self, snapshot_id: int) -> list[DataSplit]:
        """The files a snapshot added (its delta), as splits that keep row kinds."""
        snapshot = self.store.snapshot_manager.snapshot(snapshot_id)
        store = self.store.manifest_store
        entries = merge_entries(store.read_entries(store.read_manifest_list(snapshot.delta_manifest_list)))
        added = [e for e in entries if e.kind == FileKind.ADD and self._keep(e)]
        splits = self._splits(snapshot.id, added)
        for s in splits:
            s.row_kinds = True
        return splits

    def plan_changelog(self, snapshot_id: int) -> list[DataSplit]:
        """The changelog files a snapshot added, as splits that keep row kinds."""
        snapshot = self.store.snapshot_manager.snapshot(snapshot_id)
        if snapshot.changelog_manifest_list is None:
            return []
        store = self.store.manifest_store
        entries = store.read_entries(store.read_manifest_list(snapshot.changelog_manifest_list))
        splits = self._splits(snapshot.id, [e for e in entries if self._keep(e)])
        for s in splits:
            s.row_kinds = True
        return splits

    def plan_changes(self, snapshot_id: int) -> list[DataSplit]:
        """What a streaming or incremental reader consumes for one snapshot: the changelog when
        the table has a changelog producer, else the delta of APPEND snapshots.

        With the input producer, an APPEND snapshot without a changelog lost it (a rollback to a
        tag whose snapshot had expired: a tag keeps data files, not the changelog) or predates the
        producer: its delta, the records the commit wrote merged per key, stands in, rather than
        no change at all."""
        producer = self.store.core.get("changelog-producer")
        snapshot = self.store.snapshot_manager.snapshot(snapshot_id)
        if producer != "none" and not (producer == "input" and snapshot.changelog_manifest_list is None):
            return self.plan_changelog(snapshot_id)
        if snapshot.commit_kind != "APPEND":
            return []  # like Java's delta mode: compactions rewrite rows, overwrites are no changelog
        return self.plan_delta(snapshot_id)

    def _splits(self, snapshot_id: int, entries: list[ManifestEntry]) -> list[DataSplit]:
        grouped: dict[tuple[bytes, int], list[ManifestEntry]] = defaultdict(list)
        for e in entries:
            grouped[(e.partition, e.bucket)].append(e)
        splits = []
        for (partition, bucket), group in sorted(grouped.items(), key=lambda kv: (kv[0][0], kv[0][1])):
            values = tuple(self._partition_values(partition))
            part_dir = self.store.partition_dir(values)
            files = sorted((e.file for e in group), key=lambda f: f.min_sequence_number)
            splits.append(DataSplit(snapshot_id, partition, values, bucket, group[0].total_buckets, files,
                                    self.store.paths.bucket_dir(part_dir, bucket)))
        return splits

    # -- pruning ----------------------------------------------------------------------------
    def _prune_manifests(self, metas: list[ManifestFileMeta]) -> list[ManifestFileMeta]:
        if self.partition_filter is None or not self.partition_fields:
            return metas
        kept = []
        for meta in metas:
            stats = self._decode_stats(meta.partition_stats, self.store.schema.partition_keys,
                                       [f.type.to_arrow() for f in self.partition_fields], None)
            if self.partition_filter.may_match(stats):
                kept.append(meta)
            else:
                self.stats.manifests_skipped += 1
                # the files of a pruned manifest are skipped too (Java counts them the same way)
                self.stats.files_skipped += max(0, meta.num_added_files - meta.num_deleted_files)
        self.stats.manifests_read += len(kept)
        return kept

    def _keep(self, entry: ManifestEntry) -> bool:
        if self.top_level is not None and entry.file.level != self.top_level:
            return False
        keep = self._partition_ok(entry.partition) and self._bucket_ok(entry) and self._file_ok(entry)
        if keep:
            self.stats.files_scanned += 1
        else:
            self.stats.files_skipped += 1
        return keep

    _partition_cache: dict[bytes, bool]

    def _partition_values(self, partition: bytes) -> list[Any]:
        if not self.partition_fields:
            return []
        return binary_row.deserialize(partition, [f.type.to_arrow() for f in self.partition_fields])

    def _partition_ok(self, partition: bytes) -> bool:
        if self.partition_filter is None:
            return True
        cache = self.__dict__.setdefault("_partition_cache", {})
        if partition not in cache:
            values = dict(zip(self.store.schema.partition_keys, self._partition_values(partition), strict=True))
            cache[partition] = self.partition_filter.may_match(
                lambda name: ColumnStats(values[name], values[name], int(values[name] is None), 1)
                if name in values else None)
        return bool(cache[partition])

    def _bucket_ok(self, entry: ManifestEntry) -> bool:
        schema = self.store.schema
        if entry.total_buckets <= 0 or self.filter is None:
            return True
        keys = schema.bucket_keys()
        if len(keys) != 1:
            return True
        literals = equality_literals(self.filter, keys[0])
        if not literals:
            return True
        cache = self.__dict__.setdefault("_bucket_cache", {})
        if entry.total_buckets not in cache:
            import pyarrow as pa

            arrow_type = schema.field(keys[0]).type.to_arrow()
            column = pa.array(literals, arrow_type)
            cache[entry.total_buckets] = set(bucket_ids([column], entry.total_buckets).tolist())
        return entry.bucket in cache[entry.total_buckets]

    def _file_ok(self, entry: ManifestEntry) -> bool:
        if self.file_filter is None:
            return True
        schema = self.store.schema_at(entry.file.schema_id)
        f = entry.file
        if schema.primary_keys:
            names = [k.name for k in schema.key_fields()]
            types = [k.type.to_arrow() for k in schema.key_fields()]
            stats = f.key_stats
        else:
            names = f.value_stats_cols or schema.field_names
            types = [schema.field(n).type.to_arrow() for n in names]
            stats = f.value_stats
        lookup = self._decode_stats(stats, names, types, f.row_count)
        if schema.id != self.store.schema.id:
            lookup = self._evolved_stats(lookup, schema, f.row_count)
        return self.file_filter.may_match(lookup)

    def _evolved_stats(self, lookup: Any, file_schema: Any, row_count: int) -> Any:
        """Stats of a file written under an older schema, looked up by the current column names:
        columns are matched by field id (renamed columns keep theirs); a column the file's schema
        lacks was added later and is all null in the file."""
        cache = self.__dict__.setdefault("_file_names_cache", {})
        names = cache.get(file_schema.id)
        if names is None:
            by_id = {fld.id: fld.name for fld in file_schema.fields}
            names = {fld.name: by_id.get(fld.id) for fld in self.store.schema.fields}
            cache[file_schema.id] = names

        def evolved(name: str) -> ColumnStats | None:
            if name not in names:
                return None
            file_name = names[name]
            if file_name is None:
                return ColumnStats(None, None, row_count, row_count)
            return lookup(file_name)
        return evolved

    @staticmethod
    def _decode_stats(stats: SimpleStats, names: list[str], types: list, row_count: int | None):
        if not stats.null_counts and len(stats.min_values) <= 12:
            return lambda name: None
        mins = binary_row.deserialize(stats.min_values, types)
        maxs = binary_row.deserialize(stats.max_values, types)
        table = {n: ColumnStats(mins[i], maxs[i], stats.null_counts[i] if i < len(stats.null_counts) else None,
                                row_count) for i, n in enumerate(names)}
        return table.get
