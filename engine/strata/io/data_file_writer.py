"""Writing Arrow tables to rolling Parquet data files and describing them as DataFileMeta."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from strata.format import binary_row
from strata.fs import FileIO
from strata.io.stats import column_stats
from strata.manifest.data_file_meta import DataFileMeta, FileSource
from strata.manifest.simple_stats import SimpleStats
from strata.schema.table_schema import KEY_PREFIX, SEQUENCE_NUMBER, VALUE_KIND, TableSchema
from strata.table.paths import PathFactory

FILE_SOURCE_APPEND = 0
FILE_SOURCE_COMPACT = 1
ROW_GROUP_ROWS = 128 * 1024
# rows written between size checks when rolling; a file overshoots the target by at most this.
ROLL_CHECK_ROWS = 64 * 1024


@dataclass
class WriterConfig:
    schema: TableSchema
    target_file_size: int
    compression: str
    compression_level: int | None
    stats_truncate: int | None


class DataFileWriter:
    """Writes the rows of one (partition, bucket) into files of about target_file_size."""

    def __init__(self, file_io: FileIO, paths: PathFactory, bucket_dir: str, config: WriterConfig):
        self.file_io = file_io
        self.paths = paths
        self.bucket_dir = bucket_dir
        self.config = config
        self.has_key = bool(config.schema.primary_keys)
        self.file_schema = config.schema.file_arrow_schema()

    def write(self, table: pa.Table, level: int, file_source: int = FILE_SOURCE_APPEND,
              first_sequence: int = 0) -> list[DataFileMeta]:
        """Write `table` (already in file layout and, for PK tables, sorted by key)."""
        if table.num_rows == 0:
            return []
        table = table.cast(self.file_schema) if table.schema != self.file_schema else table
        metas: list[DataFileMeta] = []
        start = 0
        while start < table.num_rows:
            end = self._write_one(table, start, level, file_source, first_sequence, metas)
            start = end
        return metas

    def _write_one(self, table: pa.Table, start: int, level: int, file_source: int,
                   first_sequence: int, metas: list[DataFileMeta]) -> int:
        name = self.paths.new_data_file_name()
        path = f"{self.bucket_dir}/{name}"
        fs, _ = self.file_io.arrow_fs()
        self.file_io.mkdirs(self.bucket_dir)
        end = start
        with fs.open_output_stream(self.file_io.arrow_path(path)) as sink:
            writer = pq.ParquetWriter(sink, self.file_schema, compression=self.config.compression,
                                      compression_level=self.config.compression_level,
                                      write_statistics=True)
            while end < table.num_rows:
                chunk = table.slice(end, ROLL_CHECK_ROWS)
                writer.write_table(chunk, row_group_size=ROW_GROUP_ROWS)
                end += chunk.num_rows
                if sink.tell() >= self.config.target_file_size:
                    break
            writer.close()
        size = self.file_io.file_size(path)
        rows = table.slice(start, end - start)
        metas.append(self._meta(name, size, rows, level, file_source, first_sequence + start))
        return end

    def _meta(self, name: str, size: int, rows: pa.Table, level: int, file_source: int,
              first_sequence: int) -> DataFileMeta:
        schema = self.config.schema
        value_stats = column_stats([rows.column(f.name) for f in schema.fields], self.config.stats_truncate)
        if self.has_key:
            key_names = [KEY_PREFIX + f.name for f in schema.key_fields()]
            key_types = [rows.schema.field(k).type for k in key_names]
            min_key = binary_row.serialize([rows.column(k)[0].as_py() for k in key_names], key_types)
            max_key = binary_row.serialize([rows.column(k)[-1].as_py() for k in key_names], key_types)
            key_stats = column_stats([rows.column(k) for k in key_names], None)
            seq = pc.min_max(rows.column(SEQUENCE_NUMBER))
            min_seq, max_seq = int(seq["min"].as_py()), int(seq["max"].as_py())
            kinds = rows.column(VALUE_KIND)
            deletes = int(pc.sum(pc.is_in(kinds, pa.array([1, 3], pa.int8()))).as_py() or 0)
        else:
            min_key = max_key = binary_row.EMPTY_ROW
            key_stats = SimpleStats.EMPTY
            min_seq, max_seq = first_sequence, first_sequence + rows.num_rows - 1
            deletes = 0
        return DataFileMeta(
            file_name=name, file_size=size, row_count=rows.num_rows, min_key=min_key, max_key=max_key,
            key_stats=key_stats, value_stats=value_stats, min_sequence_number=min_seq,
            max_sequence_number=max_seq, schema_id=schema.id, level=level, extra_files=[],
            creation_time=int(time.time() * 1000), delete_row_count=deletes, embedded_index=None,
            file_source=FileSource(file_source), value_stats_cols=None, external_path=None, first_row_id=None,
            write_cols=None,
        )
