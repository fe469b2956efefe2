"""``StrataDataSource``: Strata tables as a Spark (PySpark >= 4.1) Python data source.

    from strata.spark import register
    register(spark)
    df = spark.read.format("strata").load("/warehouse#db.orders")
    df.write.format("strata").mode("append").save("/warehouse#db.orders")

Batch reads
    One Spark partition per group of splits (a split = the files of one partition/bucket, merged
    on read for primary-key tables), packed to ``source.split.target-size`` (default 128 MB,
    each file counting at least ``source.split.open-file-cost``, 4 MB). Executors read with
    Strata's reader and hand Spark Arrow batches.

    A DataFrame reads one snapshot: the latest when it was loaded (or the one the options
    name: ``snapshot-id``, ``timestamp-millis``, ``tag``). Load again to see newer commits.
    (Spark 4.3 also caches a DataFrame's read plan after its first action, see below.)

    ``incremental-between`` = ``'5,10'`` (snapshot ids or tag names, start exclusive, end
    inclusive) reads the changes of those snapshots: the changelog with a changelog producer,
    else what APPEND commits wrote. Only +I/+U rows unless the schema asks for ``_ROW_KIND``
    (``include-row-kind=true``, or a user schema with a ``_ROW_KIND`` string column).

    Column pruning: Spark 4.3 hands a Python source the full schema, except a user-given one:
    ``spark.read.schema("id long, name string").format("strata")`` reads only those columns.

Filter pushdown (opt-in)
    With ``spark.sql.python.filterPushdown.enabled=true`` *and* the read option
    ``filter-pushdown=true``, Spark's filters (=, <, <=, >, >=, IN, IS [NOT] NULL, NOT,
    STARTSWITH) become Strata predicates that prune partitions, buckets, files and row groups
    and pre-filter rows. Spark still evaluates every filter after the scan, so a filter Strata
    cannot convert exactly (floating point columns, inexact literals) is never lost.

    Why opt-in: Spark 4.3's JVM side stores the read plan that filter pushdown produced on the
    DataFrame's relation (``PythonDataSourceV2.readInfo``) and reuses it for any later query of
    the same DataFrame that has no pushable filter. After ``df.filter(col > 5).count()``,
    ``df.count()`` on the *same* DataFrame then silently reads the pruned plan. Nothing in
    Python runs while that second query is planned, so a source cannot detect it. Without
    ``filter-pushdown`` the reader keeps no filter state, and every query is correct with the
    flag on or off. With it, use a fresh ``spark.read...load()`` for unfiltered queries.
    (apache/spark master keeps the read plan per scan, in ``PythonScanBuilder``.)
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from strata.errors import OptionError
from strata.expressions import Predicate
from strata.options import parse_memory
from strata.scan.planner import DataSplit
from strata.spark import filters as spark_filters
from strata.spark.options import TableRef, get_bool, get_int, normalize, table_ref
from strata.spark.types import Projection, spark_schema
from strata.table.table import Table

DEFAULT_TARGET_SPLIT = 128 * 1024 * 1024
DEFAULT_OPEN_FILE_COST = 4 * 1024 * 1024
_TIME_TRAVEL = ("snapshot-id", "timestamp-millis", "tag", "incremental-between")


class StrataDataSource(DataSource):
    """The ``strata`` format. Options: see the module docstring and ``strata.spark``."""

    def __init__(self, options: Any) -> None:
        super().__init__(options)
        self.settings = normalize(options)
        self.ref = table_ref(self.settings)
        # Pin the snapshot a plain read sees when the DataFrame is created (this instance is
        # pickled once per DataFrame and reused for each of its queries).
        self.pinned_snapshot: int | None = None
        if not any(k in self.settings for k in _TIME_TRAVEL):
            table = self.ref.load()
            self.pinned_snapshot = table.snapshot_manager.latest_id() or 0

    @classmethod
    def name(cls) -> str:
        return "strata"

    def schema(self) -> StructType:
        table = self.ref.load()
        return spark_schema(table.schema, with_row_kind=get_bool(self.settings, "include-row-kind", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        if get_bool(self.settings, "filter-pushdown", False):
            return StrataPushdownReader(self.ref, self.settings, schema, self.pinned_snapshot)
        return StrataBatchReader(self.ref, self.settings, schema, self.pinned_snapshot)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        from strata.spark.writer import StrataBatchWriter

        return StrataBatchWriter(self.ref, self.settings, overwrite, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        from strata.spark.writer import StrataStreamWriter

        return StrataStreamWriter(self.ref, self.settings, overwrite, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from strata.spark.stream import StrataStreamReader

        return StrataStreamReader(self.ref, self.settings, schema)


class SplitGroup(InputPartition):
    """One Spark partition: Strata splits read one after the other by one task."""

    def __init__(self, splits: list[DataSplit]) -> None:
        super().__init__(len(splits))
        self.splits = splits


class StrataBatchReader(DataSourceReader):
    """Plans splits on the driver, reads them on executors. Holds no filter state (see the
    module docstring for why)."""

    def __init__(self, ref: TableRef, settings: dict[str, str], schema: StructType, pinned: int | None):
        self.ref = ref
        self.settings = settings
        self.schema = schema
        self.pinned = pinned
        self.predicate: Predicate | None = None
        table = ref.load()
        Projection(table, schema)  # fail at planning time on unknown columns
        self.incremental = _incremental_range(table, settings.get("incremental-between"))

    # -- driver ----------------------------------------------------------------------------------
    def partitions(self) -> list[InputPartition]:
        table = self.ref.load()
        if self.incremental is not None:
            start, end = self.incremental
            scan = table.new_scan(filter=self.predicate)
            splits = [s for sid in range(start + 1, end + 1) for s in scan.plan_changes(sid)]
        else:
            splits = self._snapshot_splits(table)
        target = _size_option(self.settings, "source.split.target-size", DEFAULT_TARGET_SPLIT)
        open_cost = _size_option(self.settings, "source.split.open-file-cost", DEFAULT_OPEN_FILE_COST)
        return list(pack_splits(splits, target, open_cost))

    def _snapshot_splits(self, table: Table) -> list[DataSplit]:
        s = self.settings
        snapshot_id = get_int(s, "snapshot-id")
        timestamp = get_int(s, "timestamp-millis")
        tag = s.get("tag")
        if snapshot_id is None and timestamp is None and tag is None:
            if not self.pinned:
                return []  # the table had no snapshot when the DataFrame was created
            snapshot_id = self.pinned
        scan = table.new_scan(filter=self.predicate, snapshot_id=snapshot_id, timestamp_millis=timestamp, tag=tag)
        return scan.plan().splits

    # -- executors -------------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, SplitGroup):
            return  # Spark plans one empty InputPartition when partitions() returns none
        table = self.ref.load()
        projection = Projection(table, self.schema)
        read = table.new_read(projection.columns, self.predicate)
        for split in partition.splits:
            for data in read.read_split(split):
                yield from projection.batches(data, split.row_kinds)


class StrataPushdownReader(StrataBatchReader):
    """The reader with ``pushFilters`` (only with the option ``filter-pushdown=true``: Spark
    refuses to plan a reader with ``pushFilters`` while its pushdown flag is off)."""

    def pushFilters(self, filters: list[Filter]) -> Sequence[Filter]:
        table = self.ref.load()
        self.predicate, _ = spark_filters.conjunction(filters, table.schema)
        # Every filter goes back to Spark: it re-checks rows after the scan, so pruning only has
        # to be conservative, never exact.
        return filters


def pack_splits(splits: Sequence[DataSplit], target: int, open_cost: int) -> Iterator[SplitGroup]:
    """Consecutive splits grouped until their weight (file sizes, each at least `open_cost`)
    reaches `target` (Paimon's split packing)."""
    group: list[DataSplit] = []
    weight = 0
    for split in splits:
        group.append(split)
        weight += sum(max(f.file_size, open_cost) for f in split.files)
        if weight >= target:
            yield SplitGroup(group)
            group, weight = [], 0
    if group:
        yield SplitGroup(group)


def _size_option(settings: dict[str, str], key: str, default: int) -> int:
    value = settings.get(key)
    return parse_memory(value) if value is not None else default


def _incremental_range(table: Table, text: str | None) -> tuple[int, int] | None:
    """'5,10' or 'tag1,tag2' -> (5, 10): snapshots after 5 up to and including 10."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(parts):
        raise OptionError(f"incremental-between must be 'start,end' (snapshot ids or tags), got {text!r}")
    start, end = (int(p) if p.lstrip("-").isdigit() else table.tags.get(p).id for p in parts)
    if start > end:
        raise OptionError(f"incremental-between {text!r}: start {start} is after end {end}")
    return start, end
