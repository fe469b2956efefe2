"""The compose stack (compose/docker-compose.yml), run for real with the images built here.

The stack runs on the project's own Docker engine with host networking, every port a unique free
one, the demo profile on (Spark ingest job, CDC event generator) and Grafana off (no image of it
can be built here: no reachable package source ships Grafana). The tests then check, end to end:

* every container is healthy and listens on 127.0.0.1 only;
* the Spark ingest job writes to MinIO through the JDBC catalog on PostgreSQL (rows read back with
  the engine, ids contiguous: nothing lost or duplicated so far);
* debezium change events produced into Kafka reach a table through the CDC service, the
  compaction service compacts it, and the table holds exactly the expected rows;
* Prometheus scrapes the exporter and the services, and the commit counters moved;
* Trino answers `SELECT 1`, and reads a Strata table (Iceberg metadata published by the engine)
  through its `strata` catalog and the stack's Iceberg REST catalog, the rows those of the engine;
* the ingest container killed (SIGKILL) mid-stream and started again loses and duplicates no row,
  and a SIGTERM stops it cleanly (exit 0, well within the grace period).

`down -v` removes every container and volume at the end, whatever happened.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

import strata
from strata_platform import compose, images
from strata_platform.services.base import Service

pytestmark = [pytest.mark.compose, pytest.mark.docker, pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[1]
PORT_VARIABLES = ("MINIO_PORT", "MINIO_CONSOLE_PORT", "POSTGRES_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT",
                  "TRINO_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT", "STRATA_EXPORTER_PORT",
                  "STRATA_INGEST_METRICS_PORT", "STRATA_COMPACTION_METRICS_PORT", "STRATA_CDC_METRICS_PORT",
                  "STRATA_METASERVICE_PORT", "STRATA_ICEBERG_REST_PORT", "STRATA_PAIMON_REST_PORT")
CDC_TOPIC = "e2e.inventory.products"
T = TypeVar("T")


def free_ports(count: int) -> list[int]:
    """Distinct ports free on 127.0.0.1 now: 20000-31999, below the kernel's ephemeral range (so no
    outgoing connection takes one meanwhile) and away from the stack's and local services' defaults."""
    ports: list[int] = []
    rng = uuid.uuid4().int
    while len(ports) < count:
        port = 20000 + rng % 12000
        rng //= 7
        rng = rng or uuid.uuid4().int
        if port in ports:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
            last = value
        except Exception as exc:  # not there yet, whatever the reason
            last = exc
        time.sleep(interval)
    raise AssertionError(f"{what}: not reached after {timeout:.0f}s (last: {last!r})")


def prometheus_config(ports: dict[str, int]) -> str:
    """observability/prometheus.yml with this stack's ports and a 1 s scrape interval."""
    import yaml

    config = yaml.safe_load((REPO / "observability" / "prometheus.yml").read_text())
    moved = {f"127.0.0.1:{default}": f"127.0.0.1:{ports[variable]}" for default, variable in (
        (19090, "PROMETHEUS_PORT"), (19187, "STRATA_EXPORTER_PORT"), (19188, "STRATA_INGEST_METRICS_PORT"),
        (19189, "STRATA_COMPACTION_METRICS_PORT"), (19190, "STRATA_CDC_METRICS_PORT"),
        (19191, "STRATA_METASERVICE_PORT"))}
    found: set[str] = set()
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            found.update(target for target in static["targets"] if target in moved)
            static["targets"] = [moved.get(target, target) for target in static["targets"]]
    assert found == set(moved), f"observability/prometheus.yml no longer scrapes {set(moved) - found}"
    config["global"]["scrape_interval"] = config["global"]["evaluation_interval"] = "1s"
    return str(yaml.safe_dump(config, sort_keys=False))


@dataclass
class StackUnderTest:
    stack: compose.Stack
    ports: dict[str, int]
    env: dict[str, str]
    timings: dict[str, float]

    def catalog(self) -> strata.Catalog:
        return strata.load_catalog(
            f"s3://{self.env['MINIO_BUCKET']}/strata", metastore="jdbc",
            uri=f"jdbc:postgresql://127.0.0.1:{self.ports['POSTGRES_PORT']}/{self.env['POSTGRES_DB']}",
            **{"jdbc.user": self.env["POSTGRES_USER"], "jdbc.password": self.env["POSTGRES_PASSWORD"],
               "s3.endpoint": f"http://127.0.0.1:{self.ports['MINIO_PORT']}",
               "s3.access-key": self.env["MINIO_ROOT_USER"], "s3.secret-key": self.env["MINIO_ROOT_PASSWORD"],
               "s3.region": "us-east-1"})

    def prometheus(self, promql: str) -> list[dict[str, Any]]:
        url = (f"http://127.0.0.1:{self.ports['PROMETHEUS_PORT']}/api/v1/query?"
               + urllib.parse.urlencode({"query": promql}))
        with urllib.request.urlopen(url, timeout=5) as resp:
            payload = json.load(resp)
        assert payload["status"] == "success", payload
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    def docker(self, *args: str) -> str:
        return self.stack._docker(*args).stdout


@pytest.fixture(scope="module")
def stack(docker: Service, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackUnderTest]:
    timings: dict[str, float] = {}
    began = time.monotonic()
    built = images.ensure_images(report=print)
    timings["images"] = time.monotonic() - began
    work = tmp_path_factory.mktemp("compose")
    ports = dict(zip(PORT_VARIABLES, free_ports(len(PORT_VARIABLES)), strict=True))
    prom_dir = work / "prometheus"
    prom_dir.mkdir()
    (prom_dir / "prometheus.yml").write_text(prometheus_config(ports))
    (prom_dir / "alerts").mkdir()
    for rules in (REPO / "observability" / "alerts").glob("*.yml"):
        (prom_dir / "alerts" / rules.name).write_text(rules.read_text())
    env = compose.read_env_file(compose.DEFAULT_ENV_FILE)
    env.update({var: built[name].tag for var, name in compose.IMAGE_VARIABLES.items()})
    env.update({key: str(port) for key, port in ports.items()})
    env.update({
        "COMPOSE_PROFILES": "demo",  # no grafana: no image of it can be built here
        "PROMETHEUS_CONFIG_DIR": str(prom_dir),
        "STRATA_COMPACTION_INTERVAL_SECONDS": "3",
        "STRATA_COMPACTION_FULL": "true",  # a COMPACT snapshot soon after each change
        "STRATA_EXPORTER_REFRESH_SECONDS": "2",
        "STRATA_INGEST_TRIGGER_SECONDS": "2",
        "STRATA_INGEST_ROWS_PER_SECOND": "10",
        "STRATA_CDC_TOPICS": f"{env['STRATA_DEMO_TOPIC']},{CDC_TOPIC}",
        "KAFKA_HEAP_OPTS": "-Xmx384m -Xms128m",
    })
    project = f"strata-e2e-{uuid.uuid4().hex[:8]}"
    stack = compose.Stack(project, compose.write_env_file(work / "stack.env", env))
    try:
        began = time.monotonic()
        stack.up()
        timings["up"] = time.monotonic() - began
        services = [s for s in stack.containers() if s != "trino"]
        assert {"minio", "postgres", "kafka", "prometheus", "strata-init", "strata-compaction", "strata-cdc",
                "strata-exporter", "strata-ingest", "strata-demo-events", "strata-iceberg-rest",
                "strata-paimon-rest"} <= set(services), \
            services
        stack.wait_healthy(services, timeout=300)
        timings["healthy"] = time.monotonic() - began
        yield StackUnderTest(stack, ports, env, timings)
    finally:
        began = time.monotonic()
        try:
            stack.down()
        finally:
            timings["down"] = time.monotonic() - began
            print(f"compose stack timings (s): {json.dumps({k: round(v, 1) for k, v in timings.items()})}")
        assert not stack.containers(), "containers left behind"


def test_stack_is_healthy_and_on_loopback(stack: StackUnderTest) -> None:
    status = stack.stack.status()
    assert status["strata-init"] == "exited(0)", status
    for service, item in stack.stack.containers().items():
        assert item["HostConfig"]["NetworkMode"] == "host", service  # type: ignore[index,unused-ignore]
    listening: set[tuple[str, int]] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            cols = row.split()
            if cols[3] == "0A":  # LISTEN
                address, hex_port = cols[1].split(":")
                listening.add((address, int(hex_port, 16)))
    loopback = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}  # ::1 too
    for variable, port in stack.ports.items():
        if variable == "GRAFANA_PORT":
            continue
        addresses = {address for address, p in listening if p == port}
        assert addresses, f"nothing listens on {variable}={port}"
        assert addresses <= loopback, f"{variable}={port} listens on {addresses}, not only 127.0.0.1"


def test_ingest_job_writes_through_the_jdbc_catalog(stack: StackUnderTest) -> None:
    catalog = stack.catalog()
    table = wait_for("demo.events has two snapshots",
                     lambda: (t := catalog.get_table("demo.events")) and len(t.snapshots()) >= 2 and t,
                     timeout=240)
    ids = sorted(table.to_arrow().column("id").to_pylist())
    assert ids and ids == list(range(len(ids))), "ids are not contiguous from 0 (lost or duplicated rows)"
    import psycopg

    dsn = (f"postgresql://{stack.env['POSTGRES_USER']}:{stack.env['POSTGRES_PASSWORD']}@127.0.0.1:"
           f"{stack.ports['POSTGRES_PORT']}/{stack.env['POSTGRES_DB']}")
    with psycopg.connect(dsn, connect_timeout=5) as conn:
        registered = conn.execute("SELECT database_name, table_name FROM paimon_tables").fetchall()
    assert ("demo", "events") in registered
    files = table.system_table("files")
    assert files.num_rows and all(p.startswith("s3://") for p in files.column("file_path").to_pylist()[:5])


def test_cdc_events_reach_a_compacted_table_exactly(stack: StackUnderTest) -> None:
    from confluent_kafka import Producer

    rows: dict[int, dict[str, Any]] = {}
    events: list[tuple[dict[str, Any], dict[str, Any]]] = []
    source = {"db": "inventory", "table": "products"}

    def emit(op: str, before: Any, after: Any) -> None:
        events.append(({"id": (after or before)["id"]}, {"before": before, "after": after, "op": op,
                                                          "source": source}))

    for i in range(200):
        rows[i] = {"id": i, "name": f"product-{i}", "stock": i % 17}
        emit("c", None, rows[i])
    for i in range(0, 200, 3):
        before, rows[i] = rows[i], {**rows[i], "stock": 1000 + i}
        emit("u", before, rows[i])
    for i in range(1, 200, 10):
        emit("d", rows.pop(i), None)
    bootstrap = f"127.0.0.1:{stack.ports['KAFKA_PORT']}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "log_level": 3})
    for start in range(0, len(events), 100):  # several batches: several commits to compact
        for key, value in events[start:start + 100]:
            producer.produce(CDC_TOPIC, key=json.dumps(key).encode(), value=json.dumps(value).encode())
        assert producer.flush(30) == 0
        time.sleep(1.5)
    catalog = stack.catalog()

    def table_rows() -> dict[int, dict[str, Any]] | None:
        table = catalog.get_table("cdc.products")
        got = {r["id"]: r for r in table.to_arrow().to_pylist()}
        return got if got == rows else None

    wait_for("cdc.products equals the events' end state", table_rows, timeout=120)
    table = catalog.get_table("cdc.products")
    compacted = wait_for("a COMPACT snapshot by the compaction service",
                         lambda: [s for s in catalog.get_table("cdc.products").snapshots()
                                  if s.commit_kind == "COMPACT" and s.commit_user.startswith("strata-compaction-")],
                         timeout=90)
    assert compacted
    table = catalog.get_table("cdc.products")
    assert {r["id"]: r for r in table.to_arrow().to_pylist()} == rows


def test_prometheus_scrapes_the_strata_services(stack: StackUnderTest) -> None:
    def up() -> dict[str, str] | None:
        found = {f"{r['metric']['job']}/{r['metric'].get('component', '')}": r["value"][1]
                 for r in stack.prometheus('up{job=~"strata-.*"}')}
        wanted = {"strata-exporter/", "strata-services/ingest", "strata-services/compaction", "strata-services/cdc",
                  "strata-services/metaservice"}
        return found if wanted <= set(found) and all(found[k] == "1" for k in wanted) else None

    wait_for("every Strata target up", up, timeout=60)
    wait_for("the exporter's snapshot id of demo.events",
             lambda: stack.prometheus('strata_table_snapshot_latest_id{table="demo.events"} > 0'), timeout=60)
    # the commit counters moved: CDC appends and the compaction service's COMPACT commits
    wait_for("CDC commits counted", lambda: stack.prometheus(
        'strata_commits_total{component="cdc",kind="append",result="success"} > 0'), timeout=60)
    wait_for("compaction commits counted", lambda: stack.prometheus(
        'strata_commits_total{component="compaction",kind="compact",result="success"} > 0'), timeout=60)


def test_trino_answers(stack: StackUnderTest) -> None:
    stack.stack.wait_healthy(["trino"], timeout=420)
    import trino

    conn = trino.dbapi.connect(host="127.0.0.1", port=stack.ports["TRINO_PORT"], user="strata", http_scheme="http")
    cursor = conn.cursor()
    cursor.execute("SELECT 1")
    assert cursor.fetchall() == [[1]]
    cursor.execute("SHOW CATALOGS")
    assert {"memory", "strata"} <= {row[0] for row in cursor.fetchall()}


def test_trino_reads_strata_tables_through_the_iceberg_rest_catalog(stack: StackUnderTest) -> None:
    stack.stack.wait_healthy(["trino", "strata-iceberg-rest"], timeout=420)
    import pyarrow as pa
    import trino

    rest = f"http://127.0.0.1:{stack.ports['STRATA_ICEBERG_REST_PORT']}"
    with urllib.request.urlopen(f"{rest}/v1/namespaces", timeout=10) as resp:
        assert {"demo", "cdc"} <= {ns[0] for ns in json.load(resp)["namespaces"]}
    conn = trino.dbapi.connect(host="127.0.0.1", port=stack.ports["TRINO_PORT"], user="strata", http_scheme="http")
    cursor = conn.cursor()
    cursor.execute("SHOW SCHEMAS FROM strata")
    assert {"demo", "cdc"} <= {row[0] for row in cursor.fetchall()}
    catalog = stack.catalog()
    name = f"iceberg_{uuid.uuid4().hex[:8]}"
    table = catalog.create_table(f"demo.{name}", pa.schema([("id", pa.int64()), ("day", pa.string())]),
                                 partition_keys=["day"], options={"metadata.iceberg.storage": "rest-catalog"})
    table.write(pa.table({"id": list(range(100)), "day": ["2025-01-01"] * 50 + ["2025-01-02"] * 50}))
    table.write(pa.table({"id": [100, 101], "day": ["2025-01-03", "2025-01-01"]}))
    expected = sorted(tuple(r.values()) for r in catalog.get_table(f"demo.{name}").to_arrow().to_pylist())
    cursor.execute(f"SELECT id, day FROM strata.demo.{name}")
    assert sorted(tuple(row) for row in cursor.fetchall()) == expected
    # the ingest job's table publishes Iceberg metadata by default: Trino sees what Spark wrote
    events = catalog.get_table("demo.events")
    wait_for("ingested rows", lambda: events.to_arrow(columns=["id"]).num_rows > 0, timeout=240)
    cursor.execute("SELECT count(*), count(DISTINCT id) FROM strata.demo.events")
    (count, distinct), = cursor.fetchall()
    after = catalog.get_table("demo.events").to_arrow(columns=["id"]).num_rows
    # Trino reads the newest published metadata: a commit that lands meanwhile only adds rows
    assert count == distinct and 0 < count <= after, (count, after)
    with urllib.request.urlopen(f"{rest}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    assert 'endpoint="/v1/namespaces/{namespace}/tables/{table}",method="GET",status="200"' in metrics


def test_paimon_rest_catalog_serves_the_stack(stack: StackUnderTest) -> None:
    """Paimon's REST API answers with the stack's databases behind its bearer token."""
    paimon = f"http://127.0.0.1:{stack.ports['STRATA_PAIMON_REST_PORT']}"
    token = {"Authorization": f"Bearer {stack.env['STRATA_PAIMON_REST_TOKEN']}"}
    with urllib.request.urlopen(urllib.request.Request(f"{paimon}/v1/config", headers=token), timeout=10) as resp:
        prefix = json.load(resp)["defaults"]["prefix"]
    request = urllib.request.Request(f"{paimon}/v1/{prefix}/databases", headers=token)
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert {"demo", "cdc"} <= set(json.load(resp)["databases"])
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{paimon}/v1/{prefix}/databases", timeout=10)
    assert refused.value.code == 401


def test_ingest_killed_mid_stream_loses_and_duplicates_nothing(stack: StackUnderTest) -> None:
    catalog = stack.catalog()
    table = catalog.get_table("demo.events")
    before = wait_for("a few ingest commits", lambda: (n := len(table.snapshots())) >= 3 and n, timeout=120)
    cid = stack.stack.container_id("strata-ingest")
    stack.docker("kill", "--signal", "KILL", cid)  # mid-stream: a micro-batch every 2 s
    killed_at = len(catalog.get_table("demo.events").snapshots())
    stack.stack.run("start", "strata-ingest")
    wait_for("commits after the restart",
             lambda: len(catalog.get_table("demo.events").snapshots()) >= max(before, killed_at) + 3, timeout=240)
    began = time.monotonic()
    stack.stack.run("stop", "--timeout", "30", "strata-ingest")  # SIGTERM: finish the batch, exit 0
    stopped_in = time.monotonic() - began
    state = json.loads(stack.docker("inspect", cid))[0]["State"]
    assert state["ExitCode"] == 0, state
    assert stopped_in < 25, f"SIGTERM took {stopped_in:.1f}s (not handled?)"
    ids = sorted(catalog.get_table("demo.events").to_arrow().column("id").to_pylist())
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated rows"
    assert ids == list(range(len(ids))), "rows lost: ids are not contiguous"
    print(f"after kill -9 and restart: {len(ids)} rows, ids 0..{len(ids) - 1}, graceful stop in {stopped_in:.1f}s")


def test_timings_within_budget(stack: StackUnderTest) -> None:
    """Not a correctness check: records how long the stack took (printed at teardown too)."""
    print(f"images {stack.timings['images']:.1f}s, up {stack.timings['up']:.1f}s, "
          f"healthy {stack.timings['healthy']:.1f}s")
    assert stack.timings["healthy"] < 420
