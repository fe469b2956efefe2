"""Writers of one (partition, bucket): a sorted LSM writer for primary-key tables, an appender
for append tables. Both buffer rows in memory and flush them to level-0 files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from strata.io.data_file_writer import DataFileWriter
from strata.manifest.data_file_meta import DataFileMeta
from strata.mergetree.merge_function import MergeFunction
from strata.mergetree.sorting import sort_by_key
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from strata.table.commit_message import CommitMessage


class BucketWriter:
    """Buffers the rows of one bucket; flush() turns the buffer into files."""

    def __init__(self, schema: TableSchema, partition: bytes, bucket: int, total_buckets: int,
                 file_writer: DataFileWriter, next_sequence: int):
        self.schema = schema
        self.partition = partition
        self.bucket = bucket
        self.total_buckets = total_buckets
        self.file_writer = file_writer
        self.next_sequence = next_sequence
        self.buffer: list[pa.Table] = []
        self.buffered_bytes = 0
        self.new_files: list[DataFileMeta] = []

    def write(self, rows: pa.Table, kinds: np.ndarray | None) -> None:
        table = self._to_file_layout(rows, kinds)
        self.buffer.append(table)
        self.buffered_bytes += table.nbytes
        self.next_sequence += rows.num_rows

    def _to_file_layout(self, rows: pa.Table, kinds: np.ndarray | None) -> pa.Table:
        return rows

    def flush(self) -> None:
        if not self.buffer:
            return
        table = pa.concat_tables(self.buffer) if len(self.buffer) > 1 else self.buffer[0]
        self.buffer, self.buffered_bytes = [], 0
        self.new_files.extend(self._flush_table(table))

    def _flush_table(self, table: pa.Table) -> list[DataFileMeta]:
        return self.file_writer.write(table, level=0, first_sequence=self.next_sequence - table.num_rows)

    def prepare_commit(self) -> CommitMessage:
        self.flush()
        message = CommitMessage(self.partition, self.bucket, self.total_buckets, new_files=self.new_files)
        self.new_files = []
        return message


class AppendBucketWriter(BucketWriter):
    """Append tables: rows keep their arrival order within the bucket."""


class KeyValueBucketWriter(BucketWriter):
    """Primary-key tables: each flush is one sorted, merged run at level 0."""

    def __init__(self, schema: TableSchema, partition: bytes, bucket: int, total_buckets: int,
                 file_writer: DataFileWriter, next_sequence: int, merge_function: MergeFunction):
        super().__init__(schema, partition, bucket, total_buckets, file_writer, next_sequence)
        self.merge_function = merge_function
        self.key_names = [KEY_PREFIX + f.name for f in schema.key_fields()]

    def _to_file_layout(self, rows: pa.Table, kinds: np.ndarray | None) -> pa.Table:
        n = rows.num_rows
        seq = pa.array(np.arange(self.next_sequence, self.next_sequence + n, dtype=np.int64))
        kind = pa.array(kinds if kinds is not None else np.zeros(n, dtype=np.int8), pa.int8())
        keys = [rows.column(f.name) for f in self.schema.key_fields()]
        columns = [*keys, seq, kind, *rows.columns]
        names = [*self.key_names, SEQUENCE_NUMBER, VALUE_KIND, *rows.column_names]
        return pa.Table.from_arrays(columns, names=names)

    def _flush_table(self, table: pa.Table) -> list[DataFileMeta]:
        # rows are buffered in sequence order and the sort is stable, so ties keep that order
        order = sort_by_key(table, self.key_names, None)
        merged = self.merge_function.merge(table.take(order), self.key_names)
        return self.file_writer.write(merged, level=0)
