"""The data files Iceberg readers (Trino) scan of a deletion-vector table are laid out for scans:
a level-0 file that a compaction moves up a level unchanged keeps the pages it was written with,
and small pages cost every scan a decompression each."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import strata
from strata.io.page_index import PAGE_ROWS, _column_pages, file_pages

ROWS = 12 * PAGE_ROWS


def _table(tmp_path, options: dict[str, str]) -> strata.Table:
    catalog = strata.load_catalog(str(tmp_path / "wh"))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.float64())])
    table = catalog.create_table("db.t", schema, primary_keys=["id"], options={"bucket": "1", **options})
    ids = np.arange(ROWS)
    table.write(pa.table({"id": ids, "v": np.random.default_rng(1).random(ROWS)}, schema=schema))
    return table


def _largest_page_rows(table: strata.Table) -> list[int]:
    out = []
    for split in table.scan():
        for f in split.files:
            path = split.file_path(f)
            metadata = pq.ParquetFile(path).metadata
            with table.file_io.open_input_file(path) as source:
                pages = file_pages(source, path, metadata)
            assert pages is not None
            located = _column_pages(pages, 0, metadata.num_columns - 1)
            assert located is not None
            out.append(int(np.diff(np.append(located.first_rows, metadata.row_group(0).num_rows)).max()))
    return out


def test_deletion_vector_files_moved_up_unchanged_have_scan_sized_pages(tmp_path) -> None:
    table = _table(tmp_path, {"deletion-vectors.enabled": "true", "metadata.iceberg.storage": "table-location"})
    table.compact(full=True)  # one sorted run: moved up a level as it is
    [split] = table.scan()
    assert [f.level for f in split.files] == [5] and split.files[0].file_source == 0  # the appended file itself
    assert all(rows > PAGE_ROWS for rows in _largest_page_rows(table))


def test_other_primary_key_tables_keep_small_level0_pages(tmp_path) -> None:
    """Without deletion vectors readers merge level-0 files by key range: a few small pages each."""
    table = _table(tmp_path, {})
    assert _largest_page_rows(table) == [PAGE_ROWS]
