"""A table read as an Arrow stream any engine takes: the Arrow PyCapsule stream protocol.

    scan = table.arrow_scan(columns=["id", "v"], filter=col("dt") == "2024-01-01")
    pa.RecordBatchReader.from_stream(scan)      # pyarrow
    duckdb.sql("SELECT count(*) FROM scan")     # DuckDB's replacement scan
    polars.from_arrow(scan)                     # Polars

The scan is planned once (its snapshot is pinned) and may be consumed many times; each
consumer gets a fresh stream of the same rows. Batches come split after split from
``TableRead.to_batches`` (at most two splits in flight), handed over without copies.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import pyarrow as pa

from strata.expressions import Predicate
from strata.io.data_file_reader import ReadStats
from strata.scan.planner import DataSplit, Plan
from strata.store import FileStore, HasStore, store_of
from strata.table.read import TableRead, scan_as_of

if TYPE_CHECKING:
    from strata.schema.table_schema import TableSchema
    from strata.snapshot.snapshot_manager import SnapshotManager
    from strata.store.identifier import Identifier


class TableLike(HasStore, Protocol):
    """What the data-stack adapters (strata.polars, strata.duckdb) need of a table; the ``Table``
    facade is one. A protocol, so that the adapters, which the facade's methods call, do not
    import the facade back."""

    @property
    def identifier(self) -> Identifier: ...

    @property
    def schema(self) -> TableSchema: ...

    @property
    def snapshot_manager(self) -> SnapshotManager: ...

    def on_branch(self, name: str) -> TableLike: ...


class ArrowScan:
    """One planned read of a table (projection, filter, row limit, time travel) as Arrow."""

    def __init__(self, table: FileStore | HasStore, columns: Sequence[str] | None = None,
                 filter: Predicate | None = None, snapshot_id: int | None = None, tag: str | None = None,
                 timestamp_millis: int | None = None, limit: int | None = None):
        if limit is not None and limit < 0:
            raise ValueError(f"the row limit of a scan of {store_of(table).identifier} must be >= 0, got {limit}")
        self.table_scan, self.store = scan_as_of(store_of(table), filter, snapshot_id, timestamp_millis, tag)
        self.read = TableRead(self.store, columns, filter)
        self.limit = limit
        self._plan: Plan | None = None

    @property
    def schema(self) -> pa.Schema:
        return self.read.output_schema

    def plan(self) -> Plan:
        """The splits (and pruning statistics, ``plan().stats``) of the scanned snapshot, planned once."""
        if self._plan is None:
            self._plan = self.table_scan.plan()
        return self._plan

    @property
    def read_stats(self) -> ReadStats:
        """The data files and row groups (of them, and decoded) the scan's reads opened so far."""
        return self.read.stats

    @property
    def splits(self) -> list[DataSplit]:
        return self.plan().splits

    def to_batches(self, splits: Sequence[DataSplit] | None = None) -> Iterator[pa.RecordBatch]:
        """The rows of `splits` (default: all planned), stopping once the row limit is reached."""
        batches = self.read.to_batches(self.splits if splits is None else splits)
        if self.limit is None:
            yield from batches
            return
        left = self.limit
        if left == 0:
            return
        for batch in batches:
            yield batch if batch.num_rows <= left else batch.slice(0, left)
            left -= batch.num_rows
            if left <= 0:
                return

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        return self.to_reader().read_all()

    def __arrow_c_schema__(self) -> object:
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """A fresh stream of the scan's rows (the Arrow PyCapsule protocol)."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def __repr__(self) -> str:
        return f"ArrowScan({self.store.identifier}, columns={self.read.columns}, filter={self.read.filter})"


def native_files(planned: ArrowScan) -> list[tuple[str, int]] | None:
    """The data files of the plan (path, row count) when an engine's own Parquet reader can read
    them as they are: files of an append table on local disk, all written under the scan's
    schema (same names and types), whole (not a column subset), Parquet, with no deletion
    vectors. Else None: Strata reads them (a merge, a deletion vector, an older schema, an
    object store's settings to carry over)."""
    if planned.store.file_io.is_object_store or planned.read.schema.primary_keys:
        return None
    schema_id = planned.read.schema.id
    files = []
    for split in planned.splits:
        if split.deletion_files is not None or split.row_kinds:
            return None
        for f in split.files:
            if f.schema_id != schema_id or f.write_cols is not None or not f.file_name.endswith(".parquet"):
                return None
            files.append((split.file_path(f), f.row_count))
    return files
