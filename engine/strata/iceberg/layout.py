"""What an Iceberg manifest says of a data file's layout, from its Parquet footer: the bytes each
column takes (``column_sizes``: Trino sizes VARCHAR columns from them when it orders joins) and
where a reader may cut the file into splits (``split_offsets``: row-group starts, see below).

Paimon's file metadata has neither, so the Iceberg sync reads the footers of the files it adds,
once: a footer is a ranged GET of the file's tail (after a HEAD), read in parallel, and the manifests carry the
result on from sync to sync (a rewrite takes the layouts of the files it carries from the
previous manifests, see strata.iceberg.sync).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow.parquet as pq

from strata.fs import FileIO

log = logging.getLogger(__name__)

READERS = 16  # footers read at once (each a GET of the file's tail)
# Consecutive row groups whose bytes add up to at most this are one split unit: the row-group
# size of Parquet's other writers (Trino's, Spark's, Paimon Java's parquet.block.size). A streamed
# merge writes smaller groups (it holds a group's rows in memory as Arrow data, about four times
# their size in the file). Planners cut splits only at listed offsets: with every group start
# listed, Trino planned 12 splits for TPC-H lineitem on Strata's files, 4 on its own.
SPLIT_UNIT_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class FileLayout:
    column_sizes: dict[int, int]  # field id -> compressed bytes of its column chunks
    split_offsets: list[int]  # the first byte of each split unit (a row group start), ascending


def file_layout(metadata: pq.FileMetaData) -> FileLayout:
    """The layout of a Parquet file from its footer. Sizes are given for top-level primitive
    columns with a field id (a nested column's leaves are not summed into it)."""
    ids: dict[str, int] = {}
    for f in metadata.schema.to_arrow_schema():
        field_id = (f.metadata or {}).get(b"PARQUET:field_id")
        if field_id is not None:
            ids[f.name] = int(field_id)
    sizes: dict[int, int] = {}
    groups: list[tuple[int, int]] = []  # (first byte, compressed bytes) of each row group
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        group_bytes = 0
        for c in range(group.num_columns):
            chunk = group.column(c)
            group_bytes += chunk.total_compressed_size
            field_id = ids.get(chunk.path_in_schema)
            if field_id is not None:
                sizes[field_id] = sizes.get(field_id, 0) + chunk.total_compressed_size
        if group.num_columns:
            first = group.column(0)
            dictionary = first.dictionary_page_offset
            start = (min(first.data_page_offset, dictionary) if first.has_dictionary_page and dictionary
                     else first.data_page_offset)
            groups.append((start, group_bytes))
    return FileLayout(sizes, split_units(sorted(groups)))


def split_units(groups: Sequence[tuple[int, int]]) -> list[int]:
    """The starts of split units: consecutive row groups (first byte, bytes), in file order,
    joined while their bytes stay within SPLIT_UNIT_BYTES; a larger group is a unit alone."""
    offsets: list[int] = []
    unit = 0
    for start, size in groups:
        if not offsets or unit + size > SPLIT_UNIT_BYTES:
            offsets.append(start)
            unit = 0
        unit += size
    return offsets


def read_layouts(file_io: FileIO, paths: Sequence[str]) -> dict[str, FileLayout]:
    """The layouts of the Parquet files at `paths`, by path. A footer that cannot be read is left out (the
    manifest then lacks these optional fields for that file) and logged once."""
    def read(path: str) -> FileLayout | None:
        try:
            with file_io.open_input_file(path) as f:
                return file_layout(pq.ParquetFile(f).metadata)
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            log.info("Iceberg sync: footer of %s not read (%s); its manifest entry has no column sizes", path, exc)
            return None

    if not paths:
        return {}
    with ThreadPoolExecutor(max_workers=min(READERS, len(paths)), thread_name_prefix="strata-footers") as pool:
        layouts = list(pool.map(read, paths))
    return {path: layout for path, layout in zip(paths, layouts, strict=True) if layout is not None}
