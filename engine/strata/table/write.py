"""TableWrite: routes rows to (partition, bucket) writers and bounds their buffered memory."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from strata import metrics
from strata.deletionvectors import BucketDeletionVectors
from strata.errors import WriterClosedError
from strata.format import binary_row
from strata.format.bucket import bucket_ids, hash_rows
from strata.index.bucket_assigner import DynamicBucketAssigner, HashClaim
from strata.index.hash_index import hash_index_entry, read_hashes, write_hash_index
from strata.io.data_file_reader import ColumnMapping, read_file
from strata.io.data_file_writer import DataFileWriter, WriterConfig
from strata.io.paths import PathFactory, partition_path
from strata.manifest.commit_message import CommitMessage
from strata.manifest.data_file_meta import DataFileMeta
from strata.manifest.index_manifest import IndexManifestEntry
from strata.mergetree.compact.manager import CompactManager
from strata.mergetree.compact.universal import UniversalCompaction
from strata.mergetree.levels import Levels
from strata.mergetree.merge_function import merge_function_for
from strata.mergetree.spill import SpilledRuns
from strata.mergetree.writer import AppendBucketWriter, BucketWriter, CompactionContext, KeyValueBucketWriter
from strata.operation.commit import key_decoder
from strata.options import POSTPONE_BUCKET, CoreOptions
from strata.scan.planner import TableScan
from strata.schema.evolution import check_rewritable
from strata.store import FileStore, HasStore, store_of
from strata.table.conform import conform, row_kinds, to_arrow_table

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import pandas as pd

    from strata.log.kafka import LogWriter

_VECTOR = object()  # a reader's `deleted` default: the positions the file's vector marks now
PURGE_NICENESS = 10  # added to the purge thread's nice value: purges take the CPU commits leave


def _background_priority() -> None:
    """Lower the calling thread's CPU priority (Linux: a thread's id is a process id to
    setpriority); elsewhere, or when refused, the thread keeps its priority."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + PURGE_NICENESS)
    except (AttributeError, OSError):
        pass


class CommitFeedback:
    """Shared by the messages of one prepare_commit (CommitMessage.feedback): the committer sets
    `compaction_abandoned` when it published their batch but not their compaction. The writer's
    levels and deletion vectors then hold files the table does not have, so the writer restores
    its buckets from the latest snapshot before it goes on."""

    __slots__ = ("compaction_abandoned",)

    def __init__(self) -> None:
        self.compaction_abandoned = False


def moves_level0_at_commit(core: CoreOptions, schema_has_keys: bool) -> bool:
    """Whether a commit's compaction must move its level-0 files up: readers of deletion-vector
    and first-row tables skip level 0, and the lookup changelog is produced by that move."""
    return schema_has_keys and (bool(core.get("deletion-vectors.enabled")) or core.merge_engine == "first-row"
                                or str(core.get("changelog-producer")) == "lookup")


def level0_compaction(store: FileStore, buckets: Iterable[tuple[bytes, int]]) -> list[CommitMessage]:
    """The messages of a compaction that moves the level-0 files of `buckets` (partition, bucket)
    up, as the latest snapshot holds them: a commit's abandoned compaction done again. Empty when
    none of them has level-0 files left."""
    with TableWrite(store, compaction=True) as writer:
        for partition, bucket in buckets:
            if any(f.level == 0 for f in writer._restored_files(partition, bucket)):
                writer._writer_for_existing(partition, bucket)
        return writer.prepare_commit(wait_compaction=True) if writer.writers else []


def write_messages(store: FileStore, data: pa.Table | pa.RecordBatch | pd.DataFrame, row_kind: Any = None,
                   commit_user: str | None = None, overwrite: bool = False) -> list[CommitMessage]:
    """Write `data` with a writer of its own and close it: the messages to commit. The writer
    keeps its compactions (Paimon's batch write waits too), e.g. a deletion-vector table's purge
    of files above the delete-ratio threshold."""
    with TableWrite(store, commit_user=commit_user, overwrite=overwrite) as writer:
        writer.write_arrow(data, row_kind=row_kind)
        return writer.prepare_commit(wait_compaction=True)


class TableWrite:
    """Accepts Arrow/pandas data for one table; `prepare_commit` returns the commit messages."""

    def __init__(self, table: FileStore | HasStore, compaction: bool | None = None, commit_user: str | None = None,
                 sequence_offset: int = 0, overwrite: bool = False):
        """`compaction` overrides `write-only` (True for the dedicated compaction job);
        `commit_user` names the writer for the log store's transactions (log.system=kafka);
        `sequence_offset` starts this writer's sequence numbers that far above the bucket's
        current maximum, so parallel writers of one commit (Spark tasks) never tie on a key;
        `overwrite`: the rows replace what their partitions hold, so the buckets start empty
        (Paimon's ignore-previous-files): no files, deletion vectors or hash index restored, and
        the writer's compaction involves only the new rows."""
        self.store = table = store_of(table)
        self.commit_user = commit_user
        self.sequence_offset = sequence_offset
        self._log: LogWriter | None = None
        self._log_enabled = not compaction and str(table.core.get("log.system")) == "kafka"
        self.schema = table.schema
        self.core = CoreOptions(self.schema.options)
        self.num_buckets = self.core.bucket
        self.paths = PathFactory(table.path)
        self.where = f"table {table.identifier}"
        self.buffer_limit = int(self.core.get("write-buffer-size"))
        self.spillable = self.core.write_buffer_spillable(bool(self.schema.primary_keys), table.file_io.is_object_store)
        max_disk = self.core.get("write-buffer-spill.max-disk-size")
        self.spill_disk_limit = int(max_disk) if max_disk is not None else None
        self.writers: dict[tuple[bytes, int], BucketWriter] = {}
        self.partition_dirs: dict[bytes, str] = {}
        # None until read from the latest snapshot; an overwrite restores nothing
        self._restored: dict[tuple[bytes, int], list[DataFileMeta]] | None = {} if overwrite else None
        self._restored_index: dict[tuple[bytes, int], list[IndexManifestEntry]] | None = {} if overwrite else None
        self.write_only = not compaction if compaction is not None else bool(self.core.get("write-only"))
        full_every = self.core.get("full-compaction.delta-commits")
        self.full_compaction_every = int(full_every) if full_every is not None else None
        self.commits_prepared = 0
        self._executor: ThreadPoolExecutor | None = None
        self._purge_executor: ThreadPoolExecutor | None = None  # deletion-vector purges, one at a time
        # flushes and per-bucket commit preparation, several buckets at once; its threads live as
        # long as the writer (see _bucket_pool)
        self._bucket_executor: ThreadPoolExecutor | None = None
        self.merge_function = merge_function_for(self.schema.options, self.schema) if self.schema.primary_keys else None
        level = self.core.get("file.compression.zstd-level")
        compression = str(self.core.get("file.compression"))
        self.config = WriterConfig(
            self.schema, self.core.target_file_size(bool(self.schema.primary_keys)),
            "none" if compression == "uncompressed" else compression,
            int(level) if compression == "zstd" else None, self.core.stats_truncate_length())
        self.assigner = self._new_assigner()
        self._feedback: CommitFeedback | None = None  # the last prepare_commit's (see CommitFeedback)
        self.closed = False
        self.write_metrics = metrics.WriteMetrics(str(table.identifier), self.buffer_limit)

    # -- writing -----------------------------------------------------------------------
    def write_arrow(self, data: pa.Table | pa.RecordBatch | pd.DataFrame,
                    row_kind: pa.Array | np.ndarray | list[str] | str | None = None) -> None:
        """Write rows; `row_kind` gives per-row (or one) kind: '+I', '-U', '+U', '-D' or 0..3."""
        if self.closed:
            raise WriterClosedError(f"writer of {self.where} is closed")
        self._restore_if_abandoned()
        if self.schema.primary_keys and self.num_buckets == POSTPONE_BUCKET:
            # postpone files wait in bucket-postpone for a compaction that assigns real buckets,
            # which only Paimon's Flink/Spark jobs run: rows written here would stay invisible
            raise NotImplementedError(
                f"writing to {self.where} with bucket=-2 (postpone bucket mode) is not supported: its rows "
                "stay invisible until Paimon's postpone compaction moves them into buckets; write it with "
                "Paimon, or recreate the table with bucket=-1 (dynamic) or a fixed bucket count")
        table = to_arrow_table(data)
        kinds = row_kinds(table, row_kind, self.core.get_str("rowkind.field"), self.where)
        if kinds is not None and not self.schema.primary_keys and (kinds != 0).any():
            raise ValueError(f"append {self.where} accepts only inserts (+I)")
        table = conform(table, self.schema, self.where)
        if kinds is not None and self.core.get("ignore-delete"):
            # Paimon's writer drops retractions before they reach files, changelog or log
            live = (kinds == 0) | (kinds == 2)  # +I, +U
            if not live.all():
                table, kinds = table.filter(pa.array(live)), kinds[live]
        if table.num_rows == 0:
            return
        for (partition, bucket), index in self._route(table):
            rows = table if index is None else table.take(index)
            part_kinds = kinds if index is None or kinds is None else kinds[index]
            if self._log_enabled:  # first: a refused log write leaves the file writers untouched
                self._log_writer().write(bucket, rows, part_kinds)
            self._writer(partition, bucket).write(rows, part_kinds)
        self._bound_memory()
        self.write_metrics.written(table.num_rows, self.writers.values())

    def _log_writer(self) -> LogWriter:
        if self._log is None:
            from strata.log.kafka import LogWriter

            self._log = LogWriter(self.store, self.commit_user)
        return self._log

    def write_pandas(self, df: pd.DataFrame) -> None:
        self.write_arrow(df)

    def delete(self, data: pa.Table | pd.DataFrame) -> None:
        """Delete the keys of the given rows (primary-key tables)."""
        self.write_arrow(data, row_kind="-D")

    def _route(self, table: pa.Table) -> list[tuple[tuple[bytes, int], np.ndarray | None]]:
        """Split row indices by (partition, bucket), vectorized."""
        part_codes, partitions = self._partition_codes(table)
        if self.num_buckets > 0:
            keys = [table.column(k).combine_chunks() for k in self.schema.bucket_keys()]
            buckets = bucket_ids(keys, self.num_buckets).astype(np.int64)
        elif self.assigner is not None:
            buckets = self._dynamic_buckets(table, part_codes, partitions)
        else:
            buckets = np.zeros(table.num_rows, dtype=np.int64)
        width = max(self.num_buckets, int(buckets.max()) + 1, 1)
        groups = part_codes * width + buckets
        first = groups[0]
        if (groups == first).all():
            return [((partitions[int(first) // width], int(first) % width), None)]
        # a stable sort of small non-negative codes: numpy radix-sorts 16-bit keys in linear time
        sort_keys = groups.astype(np.uint16) if int(groups.max()) < 2**16 else groups
        order = np.argsort(sort_keys, kind="stable")
        sorted_groups = groups[order]
        cuts = np.flatnonzero(np.diff(sorted_groups)) + 1
        out: list[tuple[tuple[bytes, int], np.ndarray | None]] = []
        for chunk in np.split(order, cuts):
            g = int(groups[chunk[0]])
            out.append(((partitions[g // width], g % width), chunk))
        return out

    def _dynamic_buckets(self, table: pa.Table, part_codes: np.ndarray, partitions: list[bytes]) -> np.ndarray:
        """Each row's bucket through its partition's hash index (dynamic bucket mode)."""
        assert self.assigner is not None
        hashes = hash_rows([table.column(k).combine_chunks() for k in self.schema.trimmed_primary_keys])
        if len(partitions) == 1:
            return self.assigner.assign(partitions[0], hashes)
        buckets = np.empty(table.num_rows, dtype=np.int64)
        # stable, so that each partition's rows keep their order; radix on 16-bit codes, as in _route
        order = np.argsort(part_codes.astype(np.uint16) if len(partitions) <= 1 << 16 else part_codes, kind="stable")
        cuts = np.flatnonzero(np.diff(part_codes[order])) + 1
        for rows in np.split(order, cuts):
            buckets[rows] = self.assigner.assign(partitions[int(part_codes[rows[0]])], hashes[rows])
        return buckets

    def _new_assigner(self) -> DynamicBucketAssigner | None:
        if not self.schema.primary_keys or self.num_buckets != -1:
            return None
        file_io, table_path = self.store.file_io, self.store.path
        return DynamicBucketAssigner(self._index_entries, lambda e: read_hashes(file_io, table_path, e),
                                     int(self.core.get("dynamic-bucket.target-row-num")),
                                     int(self.core.get("dynamic-bucket.max-buckets")), self.where)

    def _index_entries(self) -> list[IndexManifestEntry]:
        """The live index files of the latest snapshot, read once per writer (none for an overwrite)."""
        if self._restored_index is None:
            latest = self.store.snapshot_manager.latest()
            self._restored_index = {}
            for entry in self.store.manifest_store.read_index_manifest(latest.index_manifest if latest else None):
                self._restored_index.setdefault((entry.partition, entry.bucket), []).append(entry)
        return [e for entries in self._restored_index.values() for e in entries]

    def _partition_codes(self, table: pa.Table) -> tuple[np.ndarray, list[bytes]]:
        fields = self.schema.partition_fields()
        if not fields:
            return np.zeros(table.num_rows, dtype=np.int64), [binary_row.EMPTY_ROW]
        codes = np.zeros(table.num_rows, dtype=np.int64)
        dictionaries = []
        for f in fields:
            encoded = pc.dictionary_encode(table.column(f.name).combine_chunks(), null_encoding="encode")
            indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            dictionaries.append(encoded.dictionary)
            codes = codes * len(encoded.dictionary) + indices
        if len(fields) == 1:
            # the dictionary holds exactly the values present: its indices are already dense codes
            unique_codes, inverse = np.arange(len(dictionaries[0]), dtype=np.int64), codes
        else:
            unique_codes, inverse = np.unique(codes, return_inverse=True)
        types = [f.type.to_arrow() for f in fields]
        partitions = []
        for unique_code in unique_codes:
            values = []
            code = int(unique_code)
            for dictionary in reversed(dictionaries):
                code, idx = divmod(code, len(dictionary))
                values.append(dictionary[idx].as_py())
            values.reverse()
            key = binary_row.serialize(values, types)
            self.partition_dirs.setdefault(key, partition_path(
                fields, values, str(self.core.get("partition.default-name"))))
            partitions.append(key)
        return inverse.astype(np.int64), partitions

    def _writer(self, partition: bytes, bucket: int) -> BucketWriter:
        writer = self.writers.get((partition, bucket))
        if writer is None:
            bucket_dir = self.paths.bucket_dir(self.partition_dirs.get(partition, ""), bucket)
            file_writer = DataFileWriter(self.store.file_io, self.paths, bucket_dir, self.config)
            restored = self._restored_files(partition, bucket)
            next_seq = max((f.max_sequence_number for f in restored), default=-1) + 1 + self.sequence_offset
            total = self.num_buckets if self.num_buckets > 0 else -1
            if self.merge_function is not None:
                producer = str(self.core.get("changelog-producer"))
                vectors = self._deletion_vectors(partition, bucket)
                context = CompactionContext(
                    self._compact_manager(restored), self._file_reader(bucket_dir, vectors), producer,
                    DataFileWriter(self.store.file_io, self.paths, bucket_dir, self.config, name_prefix="changelog"),
                    bool(self.core.get("changelog-producer.row-deduplicate")),
                    compact_level0_at_commit=self.core.merge_engine == "first-row", deletion_vectors=vectors,
                    read_positioned=self._file_reader(bucket_dir, vectors, positions=True) if vectors else None,
                    delete_ratio_threshold=self.core.delete_ratio_threshold)
                writer = KeyValueBucketWriter(self.schema, partition, bucket, total, file_writer,
                                              next_seq, self.merge_function, context, self._spilled_runs())
            else:
                writer = AppendBucketWriter(self.schema, partition, bucket, total, file_writer, next_seq)
            self.writers[(partition, bucket)] = writer
        return writer

    def _spilled_runs(self) -> SpilledRuns | None:
        if not self.spillable:
            return None
        codec = str(self.core.get("spill-compression"))
        return SpilledRuns(None if codec == "none" else codec,
                           int(self.core.get("spill-compression.zstd-level")) if codec == "zstd" else None,
                           int(self.core.get("local-sort.max-num-file-handles")))

    def _restored_files(self, partition: bytes, bucket: int) -> list[DataFileMeta]:
        """Live files of a bucket in the latest snapshot (sequence numbers and LSM levels restore
        from them), read once per writer."""
        if self._restored is None:
            self._restored = {}
            for entry in TableScan(self.store).plan_entries():
                self._restored.setdefault((entry.partition, entry.bucket), []).append(entry.file)
        return self._restored.get((partition, bucket), [])

    def _compact_manager(self, restored: list[DataFileMeta]) -> CompactManager | None:
        if self.write_only:
            return None
        if self._executor is None:
            # one thread per core: buckets compact in parallel (merging and Parquet coding release the GIL)
            self._executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="strata-compact")
        levels = Levels(self.core.num_levels, key_decoder(self.schema), restored)
        strategy = UniversalCompaction(int(self.core.get("compaction.max-size-amplification-percent")),
                                       int(self.core.get("compaction.size-ratio")), self.core.compaction_trigger)
        if self._purge_executor is None and self.core.get("deletion-vectors.enabled"):
            # one thread for the whole writer: purges use spare CPU, never all of it
            self._purge_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-purge",
                                                      initializer=_background_priority)
        return CompactManager(levels, strategy, self._executor, lambda unit, drop: None,  # type: ignore[arg-type,return-value]
                              self.core.stop_trigger, table=self.write_metrics.table,
                              purge_executor=self._purge_executor)

    def _file_reader(self, bucket_dir: str, vectors: BucketDeletionVectors | None = None, positions: bool = False):
        """Reads a data file of the bucket in file layout; with `vectors`, without its deleted rows.
        Columns are decoded on the calling thread: the writer already runs the compactions of
        its buckets side by side, and beside its flushes and purges, so Arrow's nested decoding
        threads only contend for the same cores (W2dv burned about 20% more CPU with them)."""
        file_names = self.schema.file_arrow_schema().names

        def read(f: DataFileMeta, columns: Sequence[str] | None = None, deleted: Any = _VECTOR):
            """`columns`: only these file-layout columns (None: all of them); `deleted`: the
            positions left out (default: those the file's vector marks now)."""
            check_rewritable(self.schema, f.schema_id, f.file_name, str(self.store.identifier))
            mapping = ColumnMapping(self.schema, self.store.schema_at(f.schema_id),
                                    file_names if columns is None else columns)
            if deleted is _VECTOR:
                deleted = vectors.positions_of(f.file_name) if vectors is not None else None
            return read_file(self.store.file_io, f"{bucket_dir}/{f.file_name}", mapping, deleted=deleted,
                             positions=positions, use_threads=False)
        return read

    def _deletion_vectors(self, partition: bytes, bucket: int) -> BucketDeletionVectors | None:
        """The bucket's deletion vectors, restored from the latest snapshot (merge-on-write tables)."""
        if not self.core.get("deletion-vectors.enabled"):
            return None
        self._index_entries()
        assert self._restored_index is not None
        target = self.core.get("deletion-vectors.index-file.target-size") \
            or self.core.get("deletion-vector.index-file.target-size")
        return BucketDeletionVectors(self.store.file_io, self.paths, partition, max(bucket, 0),
                                     self._restored_index.get((partition, max(bucket, 0)), []),
                                     bool(self.core.get("deletion-vectors.bitmap64")),
                                     int(target) if not self.schema.primary_keys and self.num_buckets < 1 else None)

    def _bound_memory(self) -> None:
        """Spill or flush the largest buffers until the writer is back under half its budget."""
        total = sum(w.buffered_bytes for w in self.writers.values())
        if total <= self.buffer_limit:
            return
        for writer in sorted(self.writers.values(), key=lambda w: w.buffered_bytes, reverse=True):
            total -= writer.buffered_bytes
            spilling = self._spilling(writer)
            if spilling is not None:
                self.write_metrics.spilled(spilling.spill())
            else:
                writer.flush()
                self.write_metrics.flushed("full")
            if total <= self.buffer_limit // 2:
                break

    def _spilling(self, writer: BucketWriter) -> KeyValueBucketWriter | None:
        """`writer`, if it may spill its buffer now (spillable, under the disk limit)."""
        if not isinstance(writer, KeyValueBucketWriter) or writer.spilled is None:
            return None
        limit = self.spill_disk_limit
        return writer if limit is None or writer.spilled.disk_bytes < limit else None

    # -- committing ----------------------------------------------------------------------
    def prepare_commit(self, wait_compaction: bool = False) -> list[CommitMessage]:
        """`wait_compaction`: finish running compactions and report them now (a writer that is
        closed right after, e.g. a Spark task, would otherwise lose their work)."""
        if self.closed:
            raise WriterClosedError(f"writer of {self.where} is closed")
        self._restore_if_abandoned()
        self.commits_prepared += 1
        self.write_metrics.committing(self.writers.values())
        full = self.full_compaction_every is not None and self.commits_prepared % self.full_compaction_every == 0
        if full:
            self.compact(full=True)
        # the index files are written while the buckets flush; if a bucket fails, the partitions'
        # indexes go back to what they were, so that a retry writes those files again
        saved = self.assigner.checkpoint() if self.assigner is not None else None
        try:
            index_writes = self._start_hash_index_writes() if self.assigner is not None else []
            writers = list(self.writers.values())
            waits = any(w.waits_at_commit for w in writers)
            if not waits:
                self._flush_all()
            if len(writers) > 1 and waits:
                # each bucket flushes, moves its level 0 up and writes its deletion-vector index on
                # one thread, side by side with the other buckets
                messages = list(self._bucket_pool().map(lambda w: w.prepare_commit(wait_compaction), writers))
            else:
                messages = [w.prepare_commit(wait_compaction) for w in writers]
            if index_writes:
                messages = self._with_hash_index(messages, index_writes)
        except BaseException:
            if saved is not None:
                assert self.assigner is not None
                self.assigner.restore(saved)
            raise
        messages = [m for m in messages if not m.is_empty()]
        self.write_metrics.committed([w.compaction.manager.levels for w in self.writers.values()
                                      if isinstance(w, KeyValueBucketWriter) and w.compaction.manager])
        if self._log is not None:  # the log records of this commit travel with its messages
            committable = self._log.prepare()
            for m in messages:
                m.log = committable
        self._feedback = feedback = CommitFeedback()
        for m in messages:
            m.feedback = feedback
        return messages

    def _restore_if_abandoned(self) -> None:
        """After a commit abandoned this writer's compaction (its batch is in, its compaction is
        not), drop every bucket's levels and deletion vectors and restore the buckets from the
        latest snapshot: their level-0 files (that batch's, if still there) move up at the next
        commit, and rows written since carry over."""
        feedback = self._feedback
        if feedback is None or not feedback.compaction_abandoned:
            return
        self._feedback = None
        stale, self.writers = self.writers, {}
        self._restored = self._restored_index = None
        for (partition, bucket), old in stale.items():
            self._writer(partition, bucket).take_over(old)  # first: closing drops its spilled runs
            old.close()

    def _start_hash_index_writes(self) -> list[tuple[bytes, int, list[IndexManifestEntry], HashClaim, Future[Any]]]:
        """The new HASH index files of the buckets that got new keys, each written on the bucket
        pool (a file holds every hash of its bucket; the byte swap and the write release the GIL) while
        the buckets flush; their entries and claims, known before the files are."""
        assert self.assigner is not None
        file_io, table_path, pool = self.store.file_io, self.store.path, self._bucket_pool()
        out: list[tuple[bytes, int, list[IndexManifestEntry], HashClaim, Future[Any]]] = []
        for partition, index in self.assigner.partitions.items():
            started: list[Future[Any]] = []

            def write(bucket: int, hashes: np.ndarray, partition: bytes = partition,
                      started: list[Future[Any]] = started) -> IndexManifestEntry:
                name = self.paths.new_index_file_name()
                started.append(pool.submit(write_hash_index, file_io, table_path, name, partition, bucket, hashes))
                return hash_index_entry(name, partition, bucket, len(hashes))

            for (bucket, changes, claim), future in zip(index.prepare_commit(write), started, strict=True):
                out.append((partition, bucket, changes, claim, future))
        return out

    @staticmethod
    def _with_hash_index(messages: list[CommitMessage],
                         writes: list[tuple[bytes, int, list[IndexManifestEntry], HashClaim, Future[Any]]]
                         ) -> list[CommitMessage]:
        """Add the new HASH index files (once written) and their claims to the buckets' messages."""
        by_bucket = {(m.partition, m.bucket): m for m in messages}
        for partition, bucket, changes, claim, written in writes:
            written.result()
            message = by_bucket.get((partition, bucket))
            if message is None:
                message = by_bucket[(partition, bucket)] = CommitMessage(partition, bucket, -1)
                messages.append(message)
            message.index_changes.extend(changes)
            message.hash_claims.append(claim)
        return messages

    def _flush_all(self) -> None:
        """Flush every buffer for the commit, several buckets at once: Parquet encoding releases
        the GIL."""
        pending = [w for w in self.writers.values() if w.has_pending()]
        if len(pending) < 2:
            for writer in pending:
                writer.flush_for_commit()
            return
        for future in [self._bucket_pool().submit(w.flush_for_commit) for w in pending]:
            future.result()

    def _bucket_pool(self) -> ThreadPoolExecutor:
        """The writer's threads for work on several buckets at once, one per core, started once
        for the writer's life rather than at every commit."""
        if self._bucket_executor is None:
            self._bucket_executor = ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                                       thread_name_prefix="strata-bucket")
        return self._bucket_executor

    def compact(self, full: bool = False, partitions: list[bytes] | None = None,
                buckets: Mapping[tuple[bytes, int], list[DataFileMeta]] | None = None) -> None:
        """Compact every bucket this writer knows, plus every live bucket of the table (the
        dedicated compaction job); `full` rewrites each bucket into its top level. `buckets`:
        only these (partition, bucket)s, from these live files, as a distributed job's driver
        planned them (so a task does not scan the whole table)."""
        self._restore_if_abandoned()
        if buckets is not None:
            self._restored = {key: list(files) for key, files in buckets.items()}
        self._restored_files(b"", 0)
        assert self._restored is not None
        for partition, bucket in list(self._restored):
            if partitions is None or partition in partitions:
                self._writer_for_existing(partition, bucket)
        chosen = [w for (partition, _), w in self.writers.items() if partitions is None or partition in partitions]
        # start every bucket's compaction before waiting for any: they run side by side on the executor
        for writer in chosen:
            writer.compact(full, wait=False)
        for writer in chosen:
            writer.finish_compaction()

    def _writer_for_existing(self, partition: bytes, bucket: int) -> BucketWriter:
        if partition not in self.partition_dirs:
            fields = self.schema.partition_fields()
            values = binary_row.deserialize(partition, [f.type.to_arrow() for f in fields]) if fields else []
            default_name = str(self.core.get("partition.default-name"))
            self.partition_dirs[partition] = partition_path(fields, values, default_name)
        return self._writer(partition, bucket)

    def close(self) -> None:
        """Discard unflushed rows; files of uncommitted messages are left to orphan cleanup."""
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
        self.write_metrics.buffered(0)
        if self._log is not None:
            self._log.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._purge_executor is not None:
            self._purge_executor.shutdown(wait=True, cancel_futures=True)
            self._purge_executor = None
        if self._bucket_executor is not None:
            self._bucket_executor.shutdown(wait=True, cancel_futures=True)
            self._bucket_executor = None
        self.closed = True

    def __enter__(self) -> TableWrite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
