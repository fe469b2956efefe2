"""The table-health exporter: reads the metadata of every table of a warehouse periodically and
serves it as Prometheus metrics on /metrics (127.0.0.1 by default).

    python -m strata_platform.metrics_exporter --warehouse /data/warehouse
    METRICS_HOST=127.0.0.1 METRICS_PORT=19187 STRATA_WAREHOUSE=s3://bucket/wh strata-metrics-exporter

What it reads per table (never the data files): the latest and earliest snapshot, the live files
of the latest snapshot (from the manifests) grouped by level and by bucket, the retention options
and the streaming consumers' progress (``consumer/consumer-<id>``). The ``strata_table_*`` metrics
it serves are listed in observability/README.md. Ages are computed when Prometheus scrapes, so a
table that stops receiving commits shows a growing age even between two metadata refreshes.

How Strata processes expose their own (engine) metrics:

* the exporter: table health, from metadata, for every table (this module, ``main``);
* long-running jobs (streaming ingest, the compaction service): ``serve_metrics(port)`` in the
  job, which serves the engine metrics of that process on 127.0.0.1:port;
* short-lived jobs (a batch write, a one-off compaction, expiry from cron): ``write_textfile(path)``
  before exiting, into the directory this exporter re-serves (``METRICS_TEXTFILE_DIR``), the same
  format node exporter's textfile collector reads. We chose this over a Pushgateway: nothing else
  to run, and the last value of a job stays visible until the job writes again.

Configuration (flags win over the environment): ``--warehouse`` / ``STRATA_WAREHOUSE``,
``--option key=value`` (catalog options, repeatable), ``--host`` / ``METRICS_HOST`` (default
127.0.0.1), ``--port`` / ``METRICS_PORT`` (default 19187; 0 picks a free port),
``--interval`` / ``METRICS_REFRESH_SECONDS`` (default 30), ``--textfile-dir`` /
``METRICS_TEXTFILE_DIR``. SIGTERM and SIGINT stop it cleanly (exit code 0). It prints
``metrics ready on http://HOST:PORT/metrics`` once the first refresh is done.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

import strata
from strata.catalog.base import Catalog
from strata.errors import SnapshotNotFoundError
from strata.metrics import DEFAULT_HOST, serve_metrics, write_textfile
from strata.table.table import Table

__all__ = ["TableHealth", "TableHealthCollector", "TextfileCollector", "main", "read_table_health",
           "serve_metrics", "write_textfile"]

log = logging.getLogger("strata.metrics_exporter")

DEFAULT_PORT = 19187
DEFAULT_INTERVAL_S = 30.0


@dataclass
class TableHealth:
    """What the metadata of one table says, read at `read_at` (Unix seconds)."""

    table: str
    primary_key: bool
    read_at: float
    latest_id: int | None = None
    latest_time: float | None = None  # Unix seconds of the latest snapshot
    earliest_id: int | None = None
    earliest_time: float | None = None
    records: int = 0
    files: dict[int, int] = field(default_factory=dict)  # level -> live data files
    bytes: dict[int, int] = field(default_factory=dict)  # level -> their bytes
    partitions: int = 0
    buckets: int = 0
    level0_per_bucket: list[int] = field(default_factory=list)
    runs_per_bucket: list[int] = field(default_factory=list)
    stop_trigger: int | None = None  # primary-key tables: sorted runs that stall writers
    time_retained_s: float = 0.0
    num_retained_min: int = 0
    num_retained_max: int = 0
    consumers: dict[str, int] = field(default_factory=dict)  # consumer id -> next snapshot


def read_table_health(table: Table, now: float | None = None) -> TableHealth:
    """Read one table's metadata: snapshots, live files of the latest one, options, consumers."""
    core = table.core
    health = TableHealth(
        str(table.identifier), bool(table.schema.primary_keys), time.time() if now is None else now,
        time_retained_s=int(core.get("snapshot.time-retained")) / 1000,
        num_retained_min=int(core.get("snapshot.num-retained.min")),
        num_retained_max=int(core.get("snapshot.num-retained.max")))
    manager = table.snapshot_manager
    latest = manager.latest()
    if latest is not None:
        health.latest_id, health.latest_time = latest.id, latest.time_millis / 1000
        health.records = latest.total_record_count or 0
        for _ in range(3):  # expiry may delete the earliest snapshot between the two reads
            earliest_id = manager.earliest_id()
            try:
                earliest = latest if earliest_id in (None, latest.id) else manager.snapshot(earliest_id)
            except SnapshotNotFoundError:
                continue
            health.earliest_id, health.earliest_time = earliest.id, earliest.time_millis / 1000
            break
        buckets: dict[tuple[bytes, int], list[int]] = defaultdict(list)
        files: dict[int, int] = defaultdict(int)
        sizes: dict[int, int] = defaultdict(int)
        for entry in table.new_scan().plan_entries(latest):
            level = entry.file.level
            files[level] += 1
            sizes[level] += entry.file.file_size
            buckets[(entry.partition, entry.bucket)].append(level)
        health.files, health.bytes = dict(files), dict(sizes)
        health.partitions = len({partition for partition, _ in buckets})
        health.buckets = len(buckets)
        health.level0_per_bucket = [levels.count(0) for levels in buckets.values()]
        if health.primary_key:
            health.runs_per_bucket = [levels.count(0) + len({lv for lv in levels if lv > 0})
                                      for levels in buckets.values()]
    if health.primary_key:
        health.stop_trigger = int(core.stop_trigger)
    health.consumers = _consumers(table)
    return health


def _consumers(table: Table) -> dict[str, int]:
    """Streaming consumers' progress: ``consumer/consumer-<id>`` holds ``{"nextSnapshot": N}``."""
    found = {}
    for status in table.file_io.list_status(f"{table.path}/consumer"):
        name = status.path.rstrip("/").rsplit("/", 1)[-1]
        if status.is_dir or not name.startswith("consumer-"):
            continue
        try:
            found[name[len("consumer-"):]] = int(json.loads(table.file_io.read_bytes(status.path))["nextSnapshot"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            continue  # removed or being rewritten meanwhile: next refresh
    return found


class TableHealthCollector(Collector):
    """Keeps the last metadata reading of every table and turns it into metrics at scrape time."""

    def __init__(self, catalog: Catalog, databases: Sequence[str] | None = None):
        self.catalog = catalog
        self.databases = list(databases) if databases else None
        self._lock = threading.Lock()
        self._health: dict[str, TableHealth] = {}
        self._refresh_seconds = 0.0
        self._refreshed_at: float | None = None
        self._errors = 0

    def tables(self) -> Iterator[Table]:
        for database in self.databases or self.catalog.list_databases():
            for name in self.catalog.list_tables(database):
                try:
                    yield self.catalog.get_table(f"{database}.{name}")
                except Exception:  # dropped meanwhile, or unreadable: counted
                    log.exception("cannot open table %s.%s", database, name)
                    with self._lock:
                        self._errors += 1

    def refresh(self) -> None:
        """Read every table's metadata once; a table that fails keeps no stale reading."""
        started = time.monotonic()
        health, errors = {}, 0
        try:
            tables = list(self.tables())
        except Exception:  # the catalog itself is unreachable: try again later
            log.exception("cannot list the tables of the warehouse")
            tables, errors = [], 1
        for table in tables:
            try:
                reading = read_table_health(table)
            except Exception:  # one bad table must not hide the others
                log.exception("cannot read the metadata of table %s", table.identifier)
                errors += 1
                continue
            health[reading.table] = reading
        with self._lock:
            self._health = health
            self._errors += errors
            self._refresh_seconds = time.monotonic() - started
            self._refreshed_at = time.time()

    def health(self) -> dict[str, TableHealth]:
        with self._lock:
            return dict(self._health)

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            readings = sorted(self._health.values(), key=lambda h: h.table)
            refresh_seconds, refreshed_at, errors = self._refresh_seconds, self._refreshed_at, self._errors
        now = time.time()
        yield from _table_families(readings, now)
        yield _gauge("strata_exporter_tables", "Tables whose metadata the last refresh read.", [],
                     [((), len(readings))])
        yield _gauge("strata_exporter_refresh_duration_seconds", "Time the last metadata refresh took.", [],
                     [((), refresh_seconds)])
        if refreshed_at is not None:
            yield _gauge("strata_exporter_last_refresh_timestamp_seconds", "Unix time the last metadata "
                         "refresh finished.", [], [((), refreshed_at)])
        errors_family = CounterMetricFamily("strata_exporter_refresh_errors", "Tables (or catalog listings) "
                                            "the refreshes failed to read.")
        errors_family.add_metric([], errors)
        yield errors_family


def _gauge(name: str, doc: str, labels: Sequence[str],
           samples: Iterable[tuple[Sequence[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in samples:
        family.add_metric(list(values), value)
    return family


def _avg(values: Sequence[int]) -> float:
    return sum(values) / len(values) if values else 0.0


def _table_families(readings: Sequence[TableHealth], now: float) -> Iterator[GaugeMetricFamily]:
    t = ["table"]
    snap = [h for h in readings if h.latest_id is not None and h.latest_time is not None]
    first = [h for h in snap if h.earliest_id is not None and h.earliest_time is not None]
    pk = [h for h in readings if h.primary_key]
    yield _gauge("strata_table_snapshot_latest_id", "Id of the table's latest snapshot.", t,
                 [((h.table,), h.latest_id or 0) for h in snap])
    yield _gauge("strata_table_snapshot_latest_timestamp_seconds", "Unix time the latest snapshot was "
                 "committed.", t, [((h.table,), h.latest_time or 0.0) for h in snap])
    yield _gauge("strata_table_snapshot_latest_age_seconds", "Seconds since the latest snapshot was "
                 "committed (at scrape time).", t, [((h.table,), now - (h.latest_time or now)) for h in snap])
    yield _gauge("strata_table_snapshot_earliest_id", "Id of the oldest snapshot still kept.", t,
                 [((h.table,), h.earliest_id or 0) for h in first])
    yield _gauge("strata_table_snapshot_earliest_age_seconds", "Seconds since the oldest kept snapshot was "
                 "committed (grows without bound when nothing expires snapshots).", t,
                 [((h.table,), now - (h.earliest_time or now)) for h in first])
    yield _gauge("strata_table_snapshots_retained", "Snapshots kept (latest id - earliest id + 1).", t,
                 [((h.table,), (h.latest_id or 0) - (h.earliest_id or 0) + 1) for h in first])
    yield _gauge("strata_table_snapshot_time_retained_seconds", "The table's snapshot.time-retained.", t,
                 [((h.table,), h.time_retained_s) for h in readings])
    yield _gauge("strata_table_snapshot_num_retained_min", "The table's snapshot.num-retained.min.", t,
                 [((h.table,), h.num_retained_min) for h in readings])
    yield _gauge("strata_table_snapshot_num_retained_max", "The table's snapshot.num-retained.max.", t,
                 [((h.table,), h.num_retained_max) for h in readings])
    yield _gauge("strata_table_records", "Records in the live data files of the latest snapshot (primary-key "
                 "tables: before merging).", t, [((h.table,), h.records) for h in readings])
    yield _gauge("strata_table_data_files", "Live data files of the latest snapshot, by LSM level.",
                 ["table", "level"], [((h.table, str(lv)), n) for h in readings for lv, n in sorted(h.files.items())])
    yield _gauge("strata_table_data_bytes", "Bytes of the live data files of the latest snapshot, by LSM level.",
                 ["table", "level"], [((h.table, str(lv)), n) for h in readings for lv, n in sorted(h.bytes.items())])
    yield _gauge("strata_table_partitions", "Partitions with live files.", t,
                 [((h.table,), h.partitions) for h in readings])
    yield _gauge("strata_table_buckets", "(partition, bucket) pairs with live files.", t,
                 [((h.table,), h.buckets) for h in readings])
    level0 = [h for h in readings if h.level0_per_bucket]
    yield _gauge("strata_table_level0_files_max", "Most level-0 files in one bucket.", t,
                 [((h.table,), max(h.level0_per_bucket)) for h in level0])
    yield _gauge("strata_table_level0_files_avg", "Average level-0 files per bucket.", t,
                 [((h.table,), _avg(h.level0_per_bucket)) for h in level0])
    runs = [h for h in pk if h.runs_per_bucket]
    yield _gauge("strata_table_sorted_runs_max", "Most sorted runs in one bucket (primary-key tables).", t,
                 [((h.table,), max(h.runs_per_bucket)) for h in runs])
    yield _gauge("strata_table_sorted_runs_avg", "Average sorted runs per bucket (primary-key tables).", t,
                 [((h.table,), _avg(h.runs_per_bucket)) for h in runs])
    yield _gauge("strata_table_sorted_runs_stop_trigger", "The table's num-sorted-run.stop-trigger: sorted "
                 "runs of a bucket above which writers stall (primary-key tables).", t,
                 [((h.table,), h.stop_trigger or 0) for h in pk])
    yield _gauge("strata_table_consumer_lag_snapshots", "Snapshots a streaming consumer (consumer-id) has "
                 "still to read: latest id - its next snapshot + 1.", ["table", "consumer"],
                 [((h.table, cid), max(0, (h.latest_id or 0) - nxt + 1))
                  for h in readings for cid, nxt in sorted(h.consumers.items())])


class TextfileCollector(Collector):
    """Re-serves the ``*.prom`` files short-lived jobs wrote with ``write_textfile``: their
    ``strata_*`` families (not the exporter's own ``strata_table_*``/``strata_exporter_*``), each
    sample labelled ``textfile=<file name without .prom>`` so two jobs never collide. A file that
    does not parse is skipped and counted in ``strata_exporter_textfile_errors``."""

    OWN = ("strata_table_", "strata_exporter_")

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        mtimes, errors = [], 0
        for path in sorted(self.directory.glob("*.prom")):
            try:
                families = list(text_string_to_metric_families(path.read_text()))
                mtime = path.stat().st_mtime
            except (OSError, ValueError):
                errors += 1
                continue
            mtimes.append(((path.stem,), mtime))
            for family in families:
                if not family.name.startswith("strata_") or family.name.startswith(self.OWN):
                    continue
                target = merged.setdefault(family.name, Metric(family.name, family.documentation,
                                                                family.type, family.unit))
                if target.type != family.type:
                    errors += 1
                    continue
                target.samples.extend(sample._replace(labels={**sample.labels, "textfile": path.stem})
                                      for sample in family.samples)
        yield from merged.values()
        yield _gauge("strata_exporter_textfile_mtime_seconds", "Modification time of each textfile served.",
                     ["textfile"], mtimes)
        yield _gauge("strata_exporter_textfile_errors", "Textfiles that could not be read or merged at "
                     "this scrape.", [], [((), errors)])


@dataclass
class ExporterConfig:
    warehouse: str
    options: dict[str, str]
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    interval: float = DEFAULT_INTERVAL_S
    textfile_dir: str | None = None
    databases: list[str] = field(default_factory=list)


def parse_config(argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> ExporterConfig:
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(prog="strata-metrics-exporter",
                                     description="Serve the table health of a Strata warehouse to Prometheus.")
    parser.add_argument("--warehouse", default=env.get("STRATA_WAREHOUSE"),
                        help="warehouse path or URI (env STRATA_WAREHOUSE)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="catalog option (repeatable)")
    parser.add_argument("--database", action="append", default=[], help="only these databases (repeatable)")
    parser.add_argument("--host", default=env.get("METRICS_HOST", DEFAULT_HOST),
                        help="listen address (env METRICS_HOST)")
    parser.add_argument("--port", type=int, default=int(env.get("METRICS_PORT", DEFAULT_PORT)),
                        help="listen port, 0 for a free one (env METRICS_PORT)")
    parser.add_argument("--interval", type=float, default=float(env.get("METRICS_REFRESH_SECONDS", DEFAULT_INTERVAL_S)),
                        help="seconds between metadata refreshes (env METRICS_REFRESH_SECONDS)")
    parser.add_argument("--textfile-dir", default=env.get("METRICS_TEXTFILE_DIR"),
                        help="also serve the *.prom files of this directory (env METRICS_TEXTFILE_DIR)")
    args = parser.parse_args(argv)
    if not args.warehouse:
        parser.error("no warehouse: give --warehouse or set STRATA_WAREHOUSE")
    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--option wants KEY=VALUE, got {item!r}")
        options[key] = value
    return ExporterConfig(args.warehouse, options, args.host, args.port, args.interval, args.textfile_dir,
                          args.database)


def build_registry(collector: TableHealthCollector, textfile_dir: str | None) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    if textfile_dir:
        registry.register(TextfileCollector(textfile_dir))
    return registry


def run(config: ExporterConfig, stop: threading.Event, ready: Callable[[str], None] = print) -> None:
    """Refresh every `interval` seconds and serve /metrics until `stop` is set."""
    catalog = strata.load_catalog(config.warehouse, **config.options)
    collector = TableHealthCollector(catalog, config.databases)
    collector.refresh()
    server, thread = start_http_server(config.port, addr=config.host,
                                       registry=build_registry(collector, config.textfile_dir))
    try:
        ready(f"metrics ready on http://{config.host}:{server.server_port}/metrics "
              f"({len(collector.health())} tables, refresh every {config.interval:g}s)")
        while not stop.wait(config.interval):
            collector.refresh()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = parse_config(argv)
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    run(config, stop, ready=lambda line: print(line, flush=True))
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
