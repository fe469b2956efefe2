"""Observability against the real Prometheus the project provisions: promtool on the rules, the
stack config and real scrapes; the table-health exporter as a real process; and a live workload
scraped every second, after which every query of every dashboard panel must return data.

Grafana itself cannot run here (no package source reachable from these machines ships it): the
dashboards' JSON structure is checked, and their queries are run through Prometheus's query API,
which is what Grafana would send.
"""

from __future__ import annotations

import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata import metrics
from strata.errors import CommitConflictError
from strata.table.write import TableWrite
from strata_platform.services.base import listening_sockets, terminate_group
from strata_platform.services.prometheus import PrometheusService

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parents[1]
OBS = REPO / "observability"
RULES = OBS / "alerts" / "strata.rules.yml"
DASHBOARDS = sorted((OBS / "grafana" / "dashboards").glob("*.json"))
PROMTOOL = "/usr/bin/promtool"  # installed with the prometheus package by the service's install
RATE_WINDOW = "15s"  # what $__rate_interval becomes at a 1 s scrape interval
LIVE_DEADLINE_S = 45.0

PK_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("amount", pa.float64()),
                       pa.field("note", pa.string())])
EVENT_SCHEMA = pa.schema([pa.field("day", pa.string(), nullable=False), pa.field("seq", pa.int64()),
                          pa.field("payload", pa.string())])


def promtool(*args: str, cwd: Path = REPO, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], check=False, cwd=cwd, input=stdin, capture_output=True, text=True,
                          timeout=60)


# -- rules and config ----------------------------------------------------------------------------------
def test_rules_pass_promtool_check(prometheus: PrometheusService) -> None:
    proc = promtool("check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"SUCCESS: \d+ rules found", proc.stdout), proc.stdout


def test_rules_unit_tests_pass(prometheus: PrometheusService) -> None:
    proc = promtool("test", "rules", "strata.rules.test.yml", cwd=RULES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
    # every alert of the rules file is exercised by the unit tests
    alerts = set(re.findall(r"^\s+- alert: (\w+)$", RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", (RULES.parent / "strata.rules.test.yml").read_text()))
    assert alerts and alerts == tested, alerts ^ tested


def test_stack_prometheus_config_is_valid(prometheus: PrometheusService) -> None:
    proc = promtool("check", "config", str(OBS / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "WARNING" not in proc.stdout + proc.stderr


# -- dashboards: structure -----------------------------------------------------------------------------
def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def test_dashboards_are_well_formed() -> None:
    assert {p.stem for p in DASHBOARDS} == {"table-health", "ingestion", "compaction", "log-store"}
    uids = set()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        where = path.name
        assert board["uid"] and board["uid"] not in uids and len(board["uid"]) <= 40, where
        uids.add(board["uid"])
        assert board["title"].startswith("Strata / "), where
        assert isinstance(board["schemaVersion"], int), where
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [p["id"] for p in panels(board)]
        assert len(ids) == len(set(ids)), f"{where}: duplicate panel ids"
        graphs = [p for p in panels(board) if p["type"] != "row"]
        assert graphs, where
        for panel in graphs:
            what = f"{where}: panel {panel['title']!r}"
            assert panel["type"] in ("timeseries", "stat", "gauge", "bargauge", "table"), what
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, what
            grid = panel["gridPos"]
            assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, what
            assert panel["targets"], what
            assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), what
            for target in panel["targets"]:
                assert target["expr"].strip() and target["datasource"] == panel["datasource"], what
                assert set(re.findall(r"\$(\w+)", target["expr"])) <= {"__rate_interval", *variables}, what
    provisioning = OBS / "grafana" / "provisioning"
    datasource = (provisioning / "datasources" / "prometheus.yml").read_text()
    assert "type: prometheus" in datasource and "uid: strata-prometheus" in datasource
    assert "url: http://127.0.0.1:19090" in datasource
    dashboards = (provisioning / "dashboards" / "strata.yml").read_text()
    assert "type: file" in dashboards and "path: /var/lib/grafana/dashboards/strata" in dashboards


# -- the exporter as a real process --------------------------------------------------------------------
class Exporter:
    """strata_platform.metrics_exporter in its own process group, on a free 127.0.0.1 port."""

    def __init__(self, warehouse: str, *args: str):
        env = {**os.environ, "METRICS_HOST": "127.0.0.1", "METRICS_PORT": "0", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "strata_platform.metrics_exporter", "--warehouse", warehouse, *args],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        self.port = self._wait_ready()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def _wait_ready(self, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            found = re.search(r"metrics ready on http://127\.0\.0\.1:(\d+)/metrics", line)
            if found:
                return int(found.group(1))
        self.stop()
        raise AssertionError(f"exporter not ready:\n{''.join(self.output)}")

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://{self.instance}/metrics", timeout=10) as resp:
            return resp.read().decode()

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM, as a container runtime sends it; returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            terminate_group(self.proc.pid)
        self.proc.wait(timeout=30)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_exporter_serves_table_health_from_metadata(prometheus: PrometheusService, tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("shop")
    orders = catalog.create_table("shop.orders", PK_SCHEMA, primary_keys=["id"],
                                  options={"bucket": "2", "write-only": "true", "snapshot.time-retained": "30 min"})
    for i in range(4):
        orders.write(pa.table({"id": pa.array(range(i * 40, i * 40 + 100), pa.int64()),
                               "amount": [float(i)] * 100, "note": ["x"] * 100}))
    events = catalog.create_table("shop.events", EVENT_SCHEMA, partition_keys=["day"])
    for day in ("2026-11-20", "2026-11-21", "2026-11-22"):
        events.write(pa.table({"day": [day] * 5, "seq": pa.array(range(5), pa.int64()), "payload": ["p"] * 5}))
    catalog.create_table("shop.empty", PK_SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    consumer_dir = Path(orders.path) / "consumer"
    consumer_dir.mkdir()
    (consumer_dir / "consumer-etl").write_text(json.dumps({"nextSnapshot": 2}))  # as Paimon's readers write it

    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    metrics.write_textfile(str(textfiles / "nightly.prom"))  # this process's engine metrics
    (textfiles / "broken.prom").write_text("strata_commits_total{table=\"x\" 1\n")  # half-written by hand

    exporter = Exporter(warehouse, "--interval", "0.5", "--textfile-dir", str(textfiles))
    try:
        assert listening_sockets(exporter.proc.pid) == {("127.0.0.1", exporter.port)}
        text = exporter.scrape()
        lint = promtool("check", "metrics", stdin=text)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        got = samples(text)

        def v(name: str, **labels: str) -> float:
            return got[(name, tuple(sorted(labels.items())))]

        files = [f for s in orders.scan() for f in s.files]
        latest = orders.latest_snapshot()
        assert latest is not None
        assert v("strata_table_snapshot_latest_id", table="shop.orders") == latest.id == 4
        assert v("strata_table_snapshot_earliest_id", table="shop.orders") == 1
        assert v("strata_table_snapshots_retained", table="shop.orders") == 4
        assert v("strata_table_snapshot_latest_timestamp_seconds", table="shop.orders") == latest.time_millis / 1000
        assert 0 <= v("strata_table_snapshot_latest_age_seconds", table="shop.orders") < 120
        assert v("strata_table_snapshot_time_retained_seconds", table="shop.orders") == 1800
        assert v("strata_table_records", table="shop.orders") == latest.total_record_count == 400
        assert v("strata_table_data_files", table="shop.orders", level="0") == len(files) == 8
        assert v("strata_table_data_bytes", table="shop.orders", level="0") == sum(f.file_size for f in files)
        assert v("strata_table_buckets", table="shop.orders") == 2
        assert v("strata_table_level0_files_max", table="shop.orders") == 4
        assert v("strata_table_sorted_runs_avg", table="shop.orders") == 4
        assert v("strata_table_sorted_runs_stop_trigger", table="shop.orders") == orders.core.stop_trigger
        assert v("strata_table_consumer_lag_snapshots", table="shop.orders", consumer="etl") == 3
        assert v("strata_table_partitions", table="shop.events") == 3
        assert v("strata_table_records", table="shop.events") == 15
        assert ("strata_table_sorted_runs_max", (("table", "shop.events"),)) not in got  # append table
        assert v("strata_table_records", table="shop.empty") == 0
        assert ("strata_table_snapshot_latest_id", (("table", "shop.empty"),)) not in got  # no snapshot yet
        assert v("strata_exporter_tables") == 3
        assert v("strata_exporter_refresh_errors_total") == 0
        # textfiles: the good one re-served with its name as a label, the broken one counted
        assert v("strata_exporter_textfile_errors") == 1
        assert ("strata_exporter_textfile_mtime_seconds", (("textfile", "nightly"),)) in got
        assert any(name == "strata_commits_total" and ("textfile", "nightly") in labels
                   for name, labels in got)
        assert not any(name.startswith(("process_", "python_")) and ("textfile", "nightly") in labels
                       for name, labels in got)

        # compaction changes what the next refresh reads
        orders.compact(full=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = samples(exporter.scrape())
            if got.get(("strata_table_snapshot_latest_id", (("table", "shop.orders"),))) == 5:
                break
            time.sleep(0.2)
        top = str(orders.core.num_levels - 1)
        assert v("strata_table_level0_files_max", table="shop.orders") == 0
        assert v("strata_table_sorted_runs_max", table="shop.orders") == 1
        assert v("strata_table_data_files", table="shop.orders", level=top) == 2
        assert ("strata_table_data_files", (("level", "0"), ("table", "shop.orders"))) not in got

        began = time.monotonic()
        assert exporter.terminate() == 0  # SIGTERM: a clean stop
        assert time.monotonic() - began < 10
        assert "stopping" in "".join(exporter.output)
    finally:
        exporter.stop()


# -- the live check: every dashboard query returns data ------------------------------------------------
class Workload(threading.Thread):
    """Real engine work on three tables until stopped: a streaming PK writer with background
    compaction and spills; a partitioned append table compacted now and then, whose snapshots expire
    after each commit; a write-only PK table with a dedicated compaction job and an orphan file
    cleanup; reads with filters; one conflict and one replay."""

    def __init__(self, catalog: strata.Catalog, db: str):
        super().__init__(daemon=True, name="observability-workload")
        self.catalog, self.db = catalog, db
        self.stop = threading.Event()
        self.iterations = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:
            self.error = exc

    def _run(self) -> None:
        db, catalog = self.db, self.catalog
        orders = catalog.create_table(f"{db}.orders", PK_SCHEMA, primary_keys=["id"], options={
            "bucket": "2", "num-sorted-run.compaction-trigger": "2", "num-sorted-run.stop-trigger": "2",
            "write-buffer-size": "8 kb", "write-buffer-spillable": "false"})  # flushes when full
        events = catalog.create_table(f"{db}.events", EVENT_SCHEMA, partition_keys=["day"], options={
            "snapshot.num-retained.min": "3", "snapshot.num-retained.max": "6",
            "metadata.iceberg.storage": "table-location"})  # the Iceberg sync's series (mirror alert)
        rollup = catalog.create_table(f"{db}.rollup", PK_SCHEMA, primary_keys=["id"],
                                      options={"bucket": "1", "write-only": "true"})
        (Path(orders.path) / "consumer").mkdir(parents=True, exist_ok=True)
        (Path(orders.path) / "consumer" / "consumer-etl").write_text(json.dumps({"nextSnapshot": 1}))
        rollup.write(_rows(range(50)), commit_user="loader", identifier=1)
        rollup.write(_rows(range(50)), commit_user="loader", identifier=1)  # a replay: skipped
        self._conflict(rollup)
        writer, commit = orders.new_write(), orders.new_commit("obs-ingest")
        days = ("2026-11-20", "2026-11-21", "2026-11-22")
        try:
            while not self.stop.is_set():
                i = self.iterations
                started = time.monotonic()
                batch = _rows(range(i * 300, i * 300 + 600), value=i)
                writer.write_arrow(batch)
                commit.commit(writer.prepare_commit(), identifier=i)
                _pending_components(orders, batch.num_rows, time.monotonic() - started, i)
                events.write(pa.table({"day": [days[i % 3]] * 20, "seq": pa.array(range(20), pa.int64()),
                                       "payload": [f"e{i}"] * 20}))
                rollup.write(_rows(range(i * 7, i * 7 + 30), value=i))
                if i % 4 == 3:
                    rollup.compact()
                    events.compact()
                if i == 2:
                    rollup.remove_orphan_files(older_than="1 h")
                orders.to_arrow(filter=strata.col("id") < 500)
                events.to_arrow(filter=strata.col("day") == days[i % 3])
                self.iterations += 1
        finally:
            writer.close()

    @staticmethod
    def _conflict(table: strata.Table) -> None:
        """Two dedicated compactions of the same bucket: the second commit gives up."""
        table.write(_rows(range(20, 80), value=1))
        first, second = TableWrite(table, compaction=True), TableWrite(table, compaction=True)
        try:
            first.compact(full=True)
            second.compact(full=True)
            table.new_commit("compactor-a").commit(first.prepare_commit())
            with pytest.raises(CommitConflictError):
                table.new_commit("compactor-b").commit(second.prepare_commit())
        finally:
            first.close()
            second.close()


def _forget_earlier_tables() -> None:
    """The integration tests share this process, and so its metrics: after a few hundred tests
    its exposition holds some 1,000 tables (80,000 lines, 1.5 s to render), longer than the 1 s
    scrape timeout of this Prometheus, whose scrapes then fail. Only this run's tables count."""
    from prometheus_client import REGISTRY

    for table in {s.labels["table"] for family in REGISTRY.collect() for s in family.samples if "table" in s.labels}:
        metrics.forget_table(table)


def _rows(ids: range, value: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "amount": pa.array([value * 1.5] * len(ids)),
                     "note": [f"n{value}"] * len(ids)})


def _pending_components(table: strata.Table, rows: int, seconds: float, i: int) -> None:
    """Stand-in for what this test does not run: the Kafka log store (it calls log_produced,
    log_transaction and log_hybrid_fallback when log.system=kafka, but this test has no broker),
    log consumers (nothing reports their lag yet) and the Spark sink (it does not call
    spark_sink_batch yet). Records what they record, through the same helpers, with the
    measurements of this real commit, so their panels are checked too."""
    name = str(table.identifier)
    metrics.spark_sink_batch(name, rows, seconds, "duplicate" if i % 10 == 9 else "committed")
    metrics.log_produced(name, rows, seconds / 4)
    metrics.log_transaction(name, committed=i % 10 != 5)
    for bucket in range(2):
        metrics.log_consumer_lag(name, bucket, (i * 37 + bucket * 11) % 500)
    if i == 0:
        metrics.log_hybrid_fallback(name)


def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(r["value"][1])) for r in result)


def wait_until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (OSError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout:.0f}s (last: {last!r})")


def rule_expressions() -> list[str]:
    """The `expr` of every rule (single-line or a folded `>-` block)."""
    pattern = r"expr: (?:>-\n)?((?:.+\n)+?)\s+(?:for|labels):"
    return [m.group(1).strip() for m in re.finditer(pattern, RULES.read_text())]


def test_every_dashboard_query_returns_data(prometheus: PrometheusService, tmp_path: Path,
                                            record_property: Callable[[str, object], None]) -> None:
    config = prometheus.api("status/config")["yaml"]
    assert str(prometheus.targets_dir) in config, (
        "this Prometheus was started before it read target files; restart it (make services-down)")
    run = uuid.uuid4().hex[:8]
    db = f"obs_{run}"
    tables = f"{db}[.].*"  # what $table selects: only this run's tables (the TSDB outlives runs)
    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database(db)
    _forget_earlier_tables()

    # a short-lived job: writes, then leaves its metrics in a textfile the exporter serves
    textfiles = tmp_path / "textfiles"
    textfiles.mkdir()
    job = subprocess.run([sys.executable, "-c", (
        "import sys, pyarrow as pa, strata; from strata import metrics\n"
        "t = strata.load_catalog(sys.argv[1]).create_table(sys.argv[2], pa.schema([('id', pa.int64())]))\n"
        "t.write(pa.table({'id': list(range(10))}))\n"
        "metrics.write_textfile(sys.argv[3])\n"), warehouse, f"{db}.batch", str(textfiles / "batch-load.prom")],
        check=False, capture_output=True, text=True, timeout=120)
    assert job.returncode == 0, job.stderr

    began = time.monotonic()
    workload = Workload(catalog, db)
    workload.start()
    wait_until("workload running", lambda: workload.iterations >= 1 or workload.error, 60)
    server = metrics.serve_metrics(0)
    engine = f"127.0.0.1:{server.server_port}"
    exporter = Exporter(warehouse, "--interval", "1", "--textfile-dir", str(textfiles))
    names = (f"obs-{run}-exporter", f"obs-{run}-engine")
    prometheus.add_targets(names[0], [exporter.instance], {"job": "strata-exporter"})
    prometheus.add_targets(names[1], [engine], {"job": "strata-services", "component": "observability-test"})
    try:
        for job_name, instance in (("strata-exporter", exporter.instance), ("strata-services", engine)):
            wait_until(f"Prometheus scrapes {instance}", lambda j=job_name, i=instance: prometheus.query(
                f'up{{job="{j}",instance="{i}"}} == 1'), 30)

        # promtool check metrics on real scrapes of both
        for url in (f"http://{exporter.instance}/metrics", f"http://{engine}/metrics"):
            with urllib.request.urlopen(url, timeout=10) as resp:
                lint = promtool("check", "metrics", stdin=resp.read().decode())
            assert lint.returncode == 0, f"{url}: {lint.stdout}{lint.stderr}"

        # every target of every panel: data, and at least one finite value
        pending: dict[str, str] = {}
        for path in DASHBOARDS:
            for panel in panels(json.loads(path.read_text())):
                for target in panel.get("targets", []):
                    expr = (target["expr"].replace("$__rate_interval", RATE_WINDOW).replace("$table", tables)
                            .replace("$exporter", exporter.instance))
                    pending[expr] = f"{path.stem} / {panel['title']} / {target['refId']}"
        deadline = time.monotonic() + LIVE_DEADLINE_S
        while pending and time.monotonic() < deadline and workload.error is None:
            for expr in list(pending):
                if finite(prometheus.query(expr)):
                    del pending[expr]
            time.sleep(0.5)
        assert workload.error is None, repr(workload.error)
        assert not pending, "panels without data:\n" + "\n".join(f"{w}: {e}" for e, w in pending.items())
        print(f"every panel query returned data {time.monotonic() - began:.1f}s after the workload started "
              f"({workload.iterations} iterations)")

        # the variables list this run's tables and exporter
        listed = prometheus.api("label/table/values", **{"match[]": "strata_table_records"})
        assert {f"{db}.orders", f"{db}.events", f"{db}.rollup", f"{db}.batch"} <= set(listed)
        assert exporter.instance in prometheus.api("label/instance/values", **{"match[]": "strata_exporter_tables"})

        # the short-lived job's textfile reached Prometheus through the exporter
        batch = prometheus.query(f'strata_commits_total{{table="{db}.batch",textfile="batch-load",result="success"}}')
        assert [float(r["value"][1]) for r in batch] == [1.0], batch

        # what the workload did really happened: conflicts, a replay, compactions, spills
        def total(expr: str) -> float:
            return sum(float(r["value"][1]) for r in prometheus.query(expr))

        assert total(f'strata_commits_total{{table="{db}.rollup",result="conflict"}}') == 1
        assert total(f'strata_commit_duplicates_total{{table="{db}.rollup"}}') == 1
        assert total(f'strata_compactions_total{{table=~"{tables}",result="success"}}') >= 3
        assert total(f'strata_write_flushes_total{{table="{db}.orders",reason="full"}}') >= 1
        assert total(f'strata_table_records{{table="{db}.batch"}}') == 10
        assert total(f'strata_expire_snapshots_deleted_total{{table="{db}.events"}}') >= 1
        assert total(f'strata_orphan_cleanup_runs_total{{table="{db}.rollup",result="success"}}') == 1

        # every alert expression evaluates on this Prometheus, and every metric it names exists
        expressions = rule_expressions()
        assert len(expressions) == RULES.read_text().count("- alert:")
        for expr in expressions:
            prometheus.query(expr)  # raises on a query error
            for name in set(re.findall(r"\b(strata_[a-z0-9_]+)\b", expr)):
                scope = f'instance="{exporter.instance}"' if name.startswith("strata_exporter_") else \
                    f'table=~"{tables}"'
                assert prometheus.query(f"count({name}{{{scope}}})"), f"{name} (in {expr!r}) has no series"
        assert prometheus.query(f'up{{job="strata-exporter",instance="{exporter.instance}"}}')
        record_property("observability_seconds", round(time.monotonic() - began, 1))
        record_property("workload_iterations", workload.iterations)
    finally:
        workload.stop.set()
        workload.join(timeout=60)
        for name in names:
            prometheus.remove_targets(name)
        exporter.stop()
        server.shutdown()
        server.server_close()
        # leave the shared Prometheus as we found it: our targets gone from its target list
        wait_until("targets removed", lambda: not any(
            t["labels"].get("instance") in (exporter.instance, engine)
            for t in prometheus.api("targets", state="active")["activeTargets"]), 30)
