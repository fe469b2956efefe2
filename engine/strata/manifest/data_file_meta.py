"""Metadata of one data file, the ``_FILE`` row of a manifest entry (``io/DataFileMeta.java``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from strata.manifest.simple_stats import SimpleStats


class FileSource(IntEnum):
    """Why the file was written (``manifest/FileSource.java``); stored as a TINYINT."""

    APPEND = 0
    COMPACT = 1


@dataclass(slots=True)
class DataFileMeta:
    """The 21 fields of Paimon's DataFileMeta, in schema order.

    ``min_key``/``max_key`` and the stats rows are serialized BinaryRows (4-byte BE arity first).
    ``creation_time`` is the raw ``_CREATION_TIME`` long: a TIMESTAMP(3) without time zone, which
    Paimon writers fill with the writer's *local* wall-clock time counted as epoch millis.
    """

    file_name: str
    file_size: int
    row_count: int  # added + deleted rows
    min_key: bytes
    max_key: bytes
    key_stats: SimpleStats
    value_stats: SimpleStats
    min_sequence_number: int
    max_sequence_number: int
    schema_id: int
    level: int
    extra_files: list[str] = field(default_factory=list)
    creation_time: int | None = None
    delete_row_count: int | None = None
    embedded_index: bytes | None = None
    file_source: FileSource | None = None
    value_stats_cols: list[str] | None = None  # None: stats cover every column
    external_path: str | None = None  # None: the file lives under the table path
    first_row_id: int | None = None
    write_cols: list[str] | None = None
    write_cols_sequences: list[int] | None = None

    def add_row_count(self) -> int | None:
        """Rows added by the file, when the writer recorded its delete count."""
        if self.delete_row_count is None:
            return None
        return self.row_count - self.delete_row_count
