"""The CDC ingestion job on Spark Structured Streaming.

    job = SparkCdcJob(spark, "127.0.0.1:19092", ["shop.orders"], "/warehouse", "shop",
                      checkpoint="/checkpoints/cdc-shop")
    query = job.start()                     # or job.run_available_now(): catch up, then stop

The stream is the ``strata-kafka`` source (``strata.spark.kafka_source``: one Spark partition per
Kafka partition, read by executors, read_committed). Each micro-batch runs ``process_batch``
(``foreachBatch``):

1. executors parse the debezium-json / canal-json events (``formats.parse``) into one row per
   change: target table, row kind, the row as JSON, the event's column types and primary key;
2. the driver collects the (small) set of column types seen per table and creates or evolves the
   tables with ``TableSync``, the evolution logic of the plain-Python job (new columns added,
   widenings applied, anything else reported in ``stats.unsupported_changes`` and the log);
3. each table's rows are typed on executors, distributed by bucket, kept in Kafka order within a
   bucket (offset, then the change's index in its event) and written through the ``strata``
   data source with commit user = a hash of the checkpoint location and commit identifier = the
   batch id.

Exactly once: Spark re-runs a batch that has no commit marker with the same id and offsets; a
table whose newest commit by this user already has that identifier (or a later one) is skipped,
and the commit itself refuses a duplicate identifier. Progress lives in Spark's checkpoint, not
in the tables (unlike ``CdcJob``), so keep the checkpoint with the tables.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

import strata
from strata.log.serde import rows_to_table, with_row_kinds
from strata.schema.types import DataType
from strata.spark import distribute_by_bucket, register
from strata.spark.kafka_source import register_kafka
from strata.spark.options import commit_user_for_checkpoint
from strata.spark.types import ROW_KIND_COLUMN, conform_output, expected_arrow_schema, spark_schema
from strata_platform.cdc.formats import UnsupportedEventError, parse, rows_from_strings
from strata_platform.cdc.job import CdcError, JobStats, TableSync, _table_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# one row per change; `fields` = {column: Strata type} and `keys` = [primary key] of its event
PARSED = [("table", "string"), ("kind", "tinyint"), ("row", "string"), ("fields", "string"), ("keys", "string"),
          ("wire", "string"), ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("seq", "int"),
          ("error", "string")]
ORDER = ["_cdc_topic", "_cdc_partition", "_cdc_offset", "_cdc_seq"]
MAX_REPORTED_ERRORS = 5


def parsed_schema() -> StructType:
    from pyspark.sql.types import ByteType, IntegerType, LongType, StringType, StructField, StructType

    types = {"string": StringType(), "tinyint": ByteType(), "int": IntegerType(), "bigint": LongType()}
    return StructType([StructField(name, types[t]) for name, t in PARSED])


class EventParser:
    """mapInArrow function (executors): Kafka records -> one PARSED row per change."""

    def __init__(self, fmt: str, table: str | None):
        self.fmt, self.table = fmt, table

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = expected_arrow_schema(parsed_schema())
        for batch in batches:
            out: dict[str, list[Any]] = {name: [] for name in target.names}
            records = batch.select(["key", "value", "topic", "partition", "offset"]).to_pydict()
            for key, value, topic, part, offset in zip(*records.values(), strict=True):
                self._parse_one(out, key, value, topic, part, offset)
            yield pa.RecordBatch.from_pydict(out, schema=target)

    def _parse_one(self, out: dict[str, list[Any]], key: bytes | None, value: bytes | None, topic: str,
                   part: int, offset: int) -> None:
        where = (topic, part, offset)
        try:
            event = parse(self.fmt, key, value)
        except (ValueError, UnsupportedEventError) as exc:
            _append(out, None, None, None, None, None, None, where, 0, f"{topic}[{part}]@{offset}: {exc}")
            return
        if event is None:
            return
        name = _table_name(self.table or event.table or topic)
        fields = json.dumps({n: DataType.from_arrow(t).to_json() for n, t in event.fields.items()})
        keys = json.dumps(event.primary_keys)
        for seq, (kind, row) in enumerate(event.changes):
            if row is not None:
                _append(out, name, kind, json.dumps(row), fields, keys, event.wire, where, seq, None)


def _append(out: dict[str, list[Any]], table: str | None, kind: int | None, row: str | None, fields: str | None,
            keys: str | None, wire: str | None, where: tuple[str, int, int], seq: int, error: str | None) -> None:
    values = (table, kind, row, fields, keys, wire, *where, seq, error)
    for column, v in zip(out.values(), values, strict=True):
        column.append(v)


class RowConverter:
    """mapInArrow function (executors): one table's PARSED rows -> the table's columns typed by
    its schema, `_ROW_KIND` first and the Kafka order columns last."""

    def __init__(self, identifier: str, schema: pa.Schema, target: StructType):
        self.identifier, self.schema, self.target = identifier, schema, target

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        target = expected_arrow_schema(self.target)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            rows = [json.loads(r) for r in batch.column("row").to_pylist()]
            try:
                data = rows_from_strings(rows, self.schema) if batch.column("wire")[0].as_py() == "strings" \
                    else rows_to_table(rows, self.schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as exc:
                raise CdcError(f"CDC rows for {self.identifier} do not fit its schema {self.schema.names} "
                               f"(a schema change that was not applied?): {exc}") from exc
            kinds = batch.column("kind").to_numpy(zero_copy_only=False).astype(np.int8)
            data = with_row_kinds(data, kinds, ROW_KIND_COLUMN)
            for name, source in zip(ORDER, ("topic", "partition", "offset", "seq"), strict=True):
                data = data.append_column(name, batch.column(source))
            yield from conform_output(data, target, target.names)


@dataclass
class _TableChanges:
    """What one micro-batch carries for one table: the union of its events' columns (a later
    event's type wins, as in the plain job), its primary key and its value encoding."""

    fields: dict[str, pa.DataType]
    keys: list[str]
    wire: str
    rows: int  # changes
    events: int


class SparkCdcJob:
    def __init__(self, spark: SparkSession, bootstrap: str, topics: Sequence[str], warehouse: str, database: str,
                 checkpoint: str, fmt: str = "debezium-json", table: str | None = None,
                 primary_keys: Sequence[str] | None = None, table_options: Mapping[str, str] | None = None,
                 catalog_options: Mapping[str, str] | None = None, max_offsets_per_trigger: int | None = None,
                 kafka_options: Mapping[str, str] | None = None):
        if fmt not in ("debezium-json", "canal-json"):
            raise ValueError(f"unknown CDC format {fmt!r}: use debezium-json or canal-json")
        if not topics:
            raise ValueError("the CDC job needs at least one topic")
        self.spark, self.bootstrap, self.topics, self.fmt = spark, bootstrap, list(topics), fmt
        self.warehouse, self.database, self.table_name, self.checkpoint = warehouse, database, table, checkpoint
        self.catalog_options = dict(catalog_options or {})
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.kafka_options = dict(kafka_options or {})
        self.commit_user = commit_user_for_checkpoint(checkpoint)
        self.catalog = strata.load_catalog(warehouse, **self.catalog_options)
        self.catalog.create_database(database, ignore_if_exists=True)
        self.stats = JobStats()
        self.tables = TableSync(self.catalog, database, self.stats, primary_keys, table_options)
        register(spark)
        register_kafka(spark)

    # -- the query ----------------------------------------------------------------------------------
    def stream(self) -> DataFrame:
        reader = (self.spark.readStream.format("strata-kafka").option("kafka.bootstrap.servers", self.bootstrap)
                  .option("subscribe", ",".join(self.topics)))
        if self.max_offsets_per_trigger is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(self.max_offsets_per_trigger))
        for key, value in self.kafka_options.items():
            reader = reader.option(f"kafka.{key}", value)
        return reader.load()

    def start(self, query_name: str | None = None, **trigger: Any) -> StreamingQuery:
        """Start the query; `trigger` as ``DataStreamWriter.trigger`` (default: every 5 seconds)."""
        writer = (self.stream().writeStream.foreachBatch(self.process_batch)
                  .option("checkpointLocation", self.checkpoint)
                  .trigger(**(trigger or {"processingTime": "5 seconds"})))
        if query_name:
            writer = writer.queryName(query_name)
        return writer.start()

    def run_available_now(self, timeout: float = 600.0) -> JobStats:
        """Process everything in the topics now, then stop; raises the query's failure."""
        query = self.start(availableNow=True)
        if not query.awaitTermination(int(timeout)):
            query.stop()
            raise CdcError(f"the CDC query did not catch up within {timeout:.0f}s")
        error = query.exception()
        if error is not None:
            raise CdcError(f"the CDC query failed: {error}")
        return self.stats

    # -- one micro-batch (driver) -------------------------------------------------------------------
    def process_batch(self, records: DataFrame, batch_id: int) -> None:
        parsed = records.mapInArrow(EventParser(self.fmt, self.table_name), parsed_schema()).persist()
        try:
            self._report_bad_events(parsed)
            changes = self._changes_by_table(parsed)
            for name in sorted(changes):
                self._write_table(parsed, name, changes[name], batch_id)
            self.stats.batches += 1
        finally:
            parsed.unpersist()

    def _report_bad_events(self, parsed: DataFrame) -> None:
        from pyspark.sql import functions as F

        bad = parsed.filter(F.col("error").isNotNull())
        count = bad.count()
        if count:
            self.stats.bad_events += count
            samples = [r.error for r in bad.select("error").limit(MAX_REPORTED_ERRORS).collect()]
            log.warning("skipped %d bad %s event(s), e.g. %s", count, self.fmt, "; ".join(samples))

    def _changes_by_table(self, parsed: DataFrame) -> dict[str, _TableChanges]:
        """The distinct (column types, key, encoding) per table, merged in Kafka order."""
        from pyspark.sql import functions as F

        summary = (parsed.filter(F.col("error").isNull())
                   .groupBy("table", "fields", "keys", "wire")
                   .agg(F.count("*").alias("rows"), F.sum((F.col("seq") == 0).cast("int")).alias("events"),
                        F.min(F.struct("topic", "partition", "offset")).alias("first"))
                   .collect())
        out: dict[str, _TableChanges] = {}
        for r in sorted(summary, key=lambda r: tuple(r.first)):
            fields = {n: DataType.parse(t).to_arrow() for n, t in json.loads(r.fields).items()}
            seen = out.get(r.table)
            if seen is None:
                out[r.table] = _TableChanges(fields, json.loads(r.keys), r.wire, r.rows, r.events)
                continue
            seen.fields.update(fields)
            seen.keys = seen.keys or json.loads(r.keys)
            seen.rows += r.rows
            seen.events += r.events
        return out

    def _write_table(self, parsed: DataFrame, name: str, changes: _TableChanges, batch_id: int) -> None:
        from pyspark.sql import functions as F
        from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

        self.stats.events += changes.events
        table = self.tables.ensure(name, changes.fields, changes.keys)
        ident = f"{self.database}.{name}"
        last = table.new_commit(self.commit_user).last_committed_identifier()
        if last is not None and last >= batch_id:
            self.stats.duplicate_commits += 1
            log.info("%s: micro-batch %d is already committed (last %d); skipped", table.identifier, batch_id, last)
            return
        order = [StructField(n, t, False) for n, t in zip(ORDER, (StringType(), IntegerType(), LongType(),
                                                                  IntegerType()), strict=True)]
        target = StructType([*spark_schema(table.schema, with_row_kind=True).fields, *order])
        rows = parsed.filter((F.col("table") == name) & F.col("error").isNull())
        typed = rows.mapInArrow(RowConverter(ident, table.schema.arrow_schema(), target), target)
        path = f"{self.warehouse}#{ident}"
        options = {f"catalog.{k}": v for k, v in self.catalog_options.items()}
        # one task per bucket, in Kafka order: the later change of a key gets the higher sequence number
        distributed = distribute_by_bucket(typed, path, None, **options).sortWithinPartitions(*ORDER).drop(*ORDER)
        (distributed.write.format("strata").mode("append").options(**options)
         .option("commit-user", self.commit_user).option("commit-identifier", str(batch_id)).save(path))
        self.stats.commits += 1
        self.stats.rows_written += changes.rows
        log.info("%s: micro-batch %d wrote %d change(s)", table.identifier, batch_id, changes.rows)
