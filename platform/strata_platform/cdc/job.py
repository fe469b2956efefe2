"""The CDC ingestion job: Kafka topics of change events -> Strata primary-key tables.

Implemented with confluent-kafka in one Python process; ``spark_job`` runs the same sync on Spark
Structured Streaming (through the ``strata-kafka`` Python source: Spark's own Kafka source needs
jars from Maven). One job syncs one table (``table=``) or a whole
database (the table name comes from each event, else from the topic), from one topic per table
or a shared topic.

Exactly once: the job never uses Kafka's group offsets. Every commit of a table carries, in the
snapshot's properties (``cdc.offsets``), the position of every consumed partition after the
batch; its commit identifier is the sum of those positions, so a replayed batch is skipped as a
duplicate by the table commit itself. On restart each table's position is read back from its
latest snapshot by this job's commit user; consumption resumes at the smallest position over the
tables and each table skips the events below its own position. A table created by the job
remembers the position at its creation (option ``strata.cdc.created-offsets``) until its first
commit.

Tables are created on first sight from the event's schema (the primary key from the message key
or ``pkNames``, or ``primary_keys=``). Schema changes evolve the table without a restart: new
columns are added (nullable), non-key columns are widened (INT8 < INT16 < INT32 < INT64, FLOAT <
DOUBLE, DECIMAL(p, s) to a larger p); anything else (narrowing, a type change, dropped columns)
is reported in the log and in ``JobStats.unsupported_changes`` and not applied, as is a change of
the primary key named by the events. ``TableSync`` does this for both engines (see ``spark_job``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

import strata
from strata.catalog.base import Catalog
from strata.errors import StrataError, TableNotFoundError
from strata.log.serde import rows_to_table
from strata.schema.table_schema import TableSchema
from strata.schema.types import DataField, DataType
from strata.table.table import Table
from strata_platform.cdc.formats import ChangeEvent, UnsupportedEventError, parse, rows_from_strings

log = logging.getLogger(__name__)
OFFSETS_PROPERTY = "cdc.offsets"
CREATED_OPTION = "strata.cdc.created-offsets"
_INT_ORDER = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


class CdcError(StrataError):
    pass


@dataclass
class JobStats:
    batches: int = 0
    events: int = 0
    rows_written: int = 0
    skipped_replayed: int = 0
    bad_events: int = 0
    commits: int = 0
    duplicate_commits: int = 0
    tables_created: list[str] = field(default_factory=list)
    columns_added: list[str] = field(default_factory=list)
    columns_widened: list[str] = field(default_factory=list)
    unsupported_changes: list[str] = field(default_factory=list)


@dataclass
class _TableBatch:
    kinds: list[int] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    fields: dict[str, pa.DataType] = field(default_factory=dict)
    primary_keys: list[str] = field(default_factory=list)
    wire: str = "json"

    def add(self, event: ChangeEvent) -> None:
        for kind, row in event.changes:
            if row is not None:
                self.kinds.append(kind)
                self.rows.append(row)
        self.fields.update(event.fields)  # a later event's type wins (widening)
        if event.primary_keys and not self.primary_keys:
            self.primary_keys = list(event.primary_keys)
        self.wire = event.wire


def _tp(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class CdcJob:
    def __init__(self, bootstrap: str, topics: Sequence[str], warehouse: str, database: str,
                 fmt: str = "debezium-json", table: str | None = None,
                 primary_keys: Sequence[str] | None = None, table_options: Mapping[str, str] | None = None,
                 name: str = "cdc", batch_size: int = 10_000, poll_timeout: float = 0.5,
                 catalog_options: Mapping[str, str] | None = None,
                 consumer_config: Mapping[str, Any] | None = None):
        if fmt not in ("debezium-json", "canal-json"):
            raise ValueError(f"unknown CDC format {fmt!r}: use debezium-json or canal-json")
        self.bootstrap, self.topics, self.fmt = bootstrap, list(topics), fmt
        self.database, self.table_name = database, table
        self.commit_user = f"strata-cdc-{name}"
        self.batch_size, self.poll_timeout = batch_size, poll_timeout
        self.consumer_config = dict(consumer_config or {})
        self.catalog = strata.load_catalog(warehouse, **dict(catalog_options or {}))
        self.catalog.create_database(database, ignore_if_exists=True)
        self.stats = JobStats()
        self.tables = TableSync(self.catalog, database, self.stats, primary_keys, table_options)
        self.stored: dict[str, dict[str, int]] = {}  # table -> partition -> next offset it has
        self.positions: dict[str, int] = {}  # partition -> next offset to consume
        self._consumer: Any = None

    # -- progress kept in the tables ------------------------------------------------------------
    def table_progress(self, table: Table) -> dict[str, int] | None:
        """The consumed positions of the newest snapshot this job committed to `table`."""
        manager = table.snapshot_manager
        latest, earliest = manager.latest_id(), manager.earliest_id()
        if latest is not None and earliest is not None:
            for sid in range(latest, earliest - 1, -1):
                try:
                    snap = manager.snapshot(sid)
                except StrataError:
                    continue
                if snap.commit_user == self.commit_user and snap.properties \
                        and OFFSETS_PROPERTY in snap.properties:
                    return {k: int(v) for k, v in json.loads(snap.properties[OFFSETS_PROPERTY]).items()}
        created = table.options.get(CREATED_OPTION)
        return {k: int(v) for k, v in json.loads(created).items()} if created else None

    def _load_progress(self) -> None:
        names = [_table_name(self.table_name)] if self.table_name else self.catalog.list_tables(self.database)
        for name in names:
            try:
                table = self.catalog.get_table(f"{self.database}.{name}")
            except TableNotFoundError:
                continue
            progress = self.table_progress(table)
            if progress is not None:
                self.stored[name] = progress

    # -- consuming ------------------------------------------------------------------------------------
    def _open(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self._load_progress()
        config = {"bootstrap.servers": self.bootstrap, "group.id": self.commit_user,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "log_level": 3, **self.consumer_config}
        consumer = Consumer(config)
        metadata = consumer.list_topics(timeout=30).topics
        assignment = []
        for topic in self.topics:
            if topic not in metadata:
                consumer.close()
                raise CdcError(f"CDC topic {topic!r} does not exist on {self.bootstrap}")
            for p in sorted(metadata[topic].partitions):
                tp = _tp(topic, p)
                known = [s[tp] for s in self.stored.values() if tp in s]
                start = min(known) if known and len(known) == len(self.stored) else None
                assignment.append(TopicPartition(topic, p, start if start is not None else OFFSET_BEGINNING))
                self.positions[tp] = start or 0
        consumer.assign(assignment)
        self._consumer = consumer
        log.info("CDC job %s resumes at %s", self.commit_user, self.positions)

    def run(self, until_idle: float | None = None, max_batches: int | None = None) -> JobStats:
        """Consume and commit batches; stop after `until_idle` seconds without events, or after
        `max_batches` batches (both None: run forever)."""
        if self._consumer is None:
            self._open()
        idle_since = time.monotonic()
        while max_batches is None or self.stats.batches < max_batches:
            messages = [m for m in self._consumer.consume(self.batch_size, self.poll_timeout) if m.error() is None]
            if not messages:
                if until_idle is not None and time.monotonic() - idle_since >= until_idle:
                    break
                continue
            self.process(messages)
            idle_since = time.monotonic()
        return self.stats

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- one batch ----------------------------------------------------------------------------------
    def process(self, messages: Sequence[Any]) -> None:
        batch_start = dict(self.positions)
        batches: dict[str, _TableBatch] = {}
        for m in messages:
            tp = _tp(m.topic(), m.partition())
            self.positions[tp] = m.offset() + 1
            try:
                event = parse(self.fmt, m.key(), m.value())
            except (ValueError, UnsupportedEventError) as exc:
                self.stats.bad_events += 1
                log.warning("skipping a bad %s event at %s@%d: %s", self.fmt, tp, m.offset(), exc)
                continue
            if event is None:
                continue
            name = _table_name(self.table_name or event.table or m.topic())
            stored = self.stored.get(name)
            if stored is not None and m.offset() < stored.get(tp, 0):
                self.stats.skipped_replayed += 1
                continue
            self.stats.events += 1
            batches.setdefault(name, _TableBatch()).add(event)
        for name in sorted(batches):
            self._write(name, batches[name], batch_start)
        self.stats.batches += 1

    def _write(self, name: str, batch: _TableBatch, batch_start: dict[str, int]) -> None:
        if not batch.rows:
            return
        table = self._ensure_table(name, batch, batch_start)
        schema = table.schema.arrow_schema()
        if batch.wire == "strings":
            data = rows_from_strings(batch.rows, schema)
        else:
            data = rows_to_table(batch.rows, schema)
        kinds = np.asarray(batch.kinds, dtype=np.int8)
        progress = dict(self.stored.get(name, {}))
        for tp, pos in self.positions.items():
            progress[tp] = max(pos, progress.get(tp, 0))
        identifier = sum(progress.values())
        with table.new_write(self.commit_user) as writer:
            writer.write_arrow(data, row_kind=kinds)
            messages = writer.prepare_commit()
        with table.new_commit(self.commit_user) as commit:
            result = commit.commit(messages, identifier, {OFFSETS_PROPERTY: json.dumps(progress, sort_keys=True)})
        self.stored[name] = progress
        self.stats.commits += 1
        if result.skipped_as_duplicate:
            self.stats.duplicate_commits += 1
        else:
            self.stats.rows_written += data.num_rows

    # -- tables and their schemas -----------------------------------------------------------------------
    def _ensure_table(self, name: str, batch: _TableBatch, batch_start: dict[str, int]) -> Table:
        return self.tables.ensure(name, batch.fields, batch.primary_keys,
                                  {CREATED_OPTION: json.dumps(batch_start, sort_keys=True)})


class TableSync:
    """Tables of one database created on first sight and evolved by the events' schemas; shared
    by the plain-Python job and the Spark job (``spark_job``). Reports go to `stats`."""

    def __init__(self, catalog: Catalog, database: str, stats: JobStats,
                 primary_keys: Sequence[str] | None = None, table_options: Mapping[str, str] | None = None):
        self.catalog, self.database, self.stats = catalog, database, stats
        self.primary_keys = list(primary_keys or [])
        self.table_options = {"bucket": "1", **dict(table_options or {})}

    def ensure(self, name: str, fields: Mapping[str, pa.DataType], event_keys: Sequence[str],
               create_options: Mapping[str, str] | None = None) -> Table:
        """The table `name`, created from `fields` if missing, else evolved to them."""
        ident = f"{self.database}.{name}"
        try:
            table = self.catalog.get_table(ident)
        except TableNotFoundError:
            keys = self.primary_keys or list(event_keys)
            if not keys:
                raise CdcError(f"no primary key for CDC table {ident}: the events name none; "
                               "pass primary_keys (--primary-keys)") from None
            schema = pa.schema([pa.field(n, t) for n, t in fields.items()])
            options = {**self.table_options, **dict(create_options or {})}
            table = self.catalog.create_table(ident, schema, primary_keys=keys, options=options,
                                              ignore_if_exists=True)
            self.stats.tables_created.append(ident)
            log.info("created table %s from the first event (key %s)", ident, keys)
            return table
        if event_keys and not self.primary_keys:
            self._check_keys(table, list(event_keys))
        return self.evolve(table, fields)

    def _check_keys(self, table: Table, keys: list[str]) -> None:
        """A primary key change cannot be applied to a primary-key table: reported, and the rows
        keep being merged by the table's key."""
        if keys != list(table.schema.primary_keys):
            self._report(f"{table.identifier}: primary key {table.schema.primary_keys} -> {keys}")

    def _report(self, what: str) -> None:
        if what not in self.stats.unsupported_changes:
            self.stats.unsupported_changes.append(what)
            log.warning("unsupported schema change not applied: %s", what)

    def evolve(self, table: Table, fields: Mapping[str, pa.DataType]) -> Table:
        """New columns added, non-key columns widened; anything else reported, not applied."""
        old = table.schema
        new_fields = list(old.fields)
        highest = old.highest_field_id
        changed = False
        for name, arrow_type in fields.items():
            if name not in old.field_names:
                highest += 1
                new_fields.append(DataField(highest, name, DataType.from_arrow(arrow_type, nullable=True)))
                self.stats.columns_added.append(f"{table.identifier}.{name}")
                changed = True
                continue
            current = old.field(name)
            have = current.type.to_arrow()
            if have == arrow_type:
                continue
            if name not in old.primary_keys and _widens(have, arrow_type):
                i = new_fields.index(current)
                new_fields[i] = DataField(current.id, name, DataType.from_arrow(arrow_type, current.type.nullable),
                                          current.description)
                self.stats.columns_widened.append(f"{table.identifier}.{name}: {have} -> {arrow_type}")
                changed = True
            else:  # narrowing or another type change: the column keeps its type (values that fit are written)
                self._report(f"{table.identifier}.{name}: {have} -> {arrow_type}")
        if not changed:
            return table
        schema = TableSchema(old.id + 1, new_fields, list(old.partition_keys), list(old.primary_keys),
                             dict(old.options), old.comment, highest)
        if not table.schema_manager.commit(schema):
            log.info("schema of %s changed concurrently; re-reading it", table.identifier)
            return self.evolve(self.catalog.get_table(table.identifier), fields)
        log.info("evolved %s to schema %d", table.identifier, schema.id)
        return self.catalog.get_table(table.identifier)

def _widens(have: pa.DataType, want: pa.DataType) -> bool:
    """True if `want` is a strict widening of `have` that Strata applies."""
    if have in _INT_ORDER and want in _INT_ORDER:
        return _INT_ORDER.index(want) > _INT_ORDER.index(have)
    if have == pa.float32() and want == pa.float64():
        return True
    if pa.types.is_decimal(have) and pa.types.is_decimal(want):
        return want.scale == have.scale and want.precision > have.precision
    return False


def _table_name(raw: str) -> str:
    return re.sub(r"[^0-9a-zA-Z_]", "_", raw).lower()
