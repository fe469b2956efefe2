"""The service entrypoints of the strata image (strata_platform.serve), as real processes on a
local warehouse: configuration from the environment only, /metrics on the configured address,
the compaction service compacting, and SIGTERM stopping each one cleanly (exit 0)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata_platform import serve
from strata_platform.services.base import listening_sockets, terminate_group

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def test_configuration_from_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "pg-password"
    secret.write_text("s3cret\n")
    env = {"STRATA_JDBC_URI": "jdbc:postgresql://127.0.0.1:1/db", "STRATA_JDBC_USER": "u",
           "STRATA_JDBC_PASSWORD_FILE": str(secret),
           "STRATA_CATALOG_OPTIONS": "s3.region=eu-west-1,\nlock.enabled=true"}
    serve.load_secret_files(env)
    assert env["STRATA_JDBC_PASSWORD"] == "s3cret"
    assert serve.catalog_options(env) == {"s3.region": "eu-west-1", "lock.enabled": "true", "metastore": "jdbc",
                                          "uri": "jdbc:postgresql://127.0.0.1:1/db", "jdbc.user": "u",
                                          "jdbc.password": "s3cret"}
    assert serve.metrics_address({}, "compaction") == ("127.0.0.1", 19189)
    assert serve.metrics_address({"METRICS_HOST": "0.0.0.0", "METRICS_PORT": "9"}, "cdc") == ("0.0.0.0", 9)
    assert serve.metrics_address({"METRICS_PORT": "off"}, "ingest") is None
    with pytest.raises(SystemExit):
        serve.pairs("no-equals-sign")
    with pytest.raises(SystemExit):
        serve.warehouse({})


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(role: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "strata_platform.serve", role],
                                env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def wait_ready(proc: subprocess.Popen[bytes], log: Path, marker: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in log.read_text(errors="replace"):
            return
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    raise AssertionError(f"{marker!r} not seen: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes], timeout: float = 30) -> float:
    began = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    finally:
        if proc.poll() is None:
            terminate_group(proc.pid)
    return time.monotonic() - began


def test_compaction_service_compacts_and_stops_on_sigterm(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    pk = catalog.create_table("db.pk", SCHEMA, primary_keys=["id"], options={"bucket": "1"})
    log_table = catalog.create_table("db.log", SCHEMA)
    for i in range(4):
        pk.write(pa.table({"id": list(range(i * 10, i * 10 + 20)), "v": [f"r{i}"] * 20}, schema=SCHEMA))
        log_table.write(pa.table({"id": [i], "v": ["x"]}, schema=SCHEMA))
    port = free_port()
    log = tmp_path / "compaction.log"
    proc = start("compaction", {"STRATA_WAREHOUSE": warehouse, "METRICS_PORT": str(port),
                                "STRATA_COMPACTION_INTERVAL_SECONDS": "0.5", "STRATA_COMPACTION_FULL": "true"}, log)
    try:
        wait_ready(proc, log, "strata compaction ready")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            kinds = [s.commit_kind for s in catalog.get_table("db.pk").snapshots()]
            if kinds[-1] == "COMPACT" and catalog.get_table("db.log").snapshots()[-1].commit_kind == "COMPACT":
                break
            time.sleep(0.3)
        else:
            raise AssertionError(f"no COMPACT snapshots: {log.read_text()[-2000:]}")
        time.sleep(1.5)  # more rounds: nothing changed, so nothing more is committed
        assert [s.commit_kind for s in catalog.get_table("db.pk").snapshots()].count("COMPACT") == 1
        assert sorted(catalog.get_table("db.pk").to_arrow().column("id").to_pylist()) == list(range(50))
        assert listening_sockets(proc.pid) == {("127.0.0.1", port)}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert 'strata_commits_total{kind="compact",result="success",table="db.pk"} 1.0' in text
        assert serve.main(["health", "compaction"]) == 1  # default port: nothing there
        os.environ["METRICS_PORT"] = str(port)
        try:
            assert serve.main(["health"]) == 0
        finally:
            del os.environ["METRICS_PORT"]
    finally:
        seconds = stop(proc)
    assert proc.returncode == 0, log.read_text()[-2000:]
    assert seconds < 10
    assert "strata compaction stopped" in log.read_text()


def test_exporter_role_serves_table_health(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    catalog = strata.load_catalog(warehouse)
    catalog.create_database("db")
    catalog.create_table("db.t", SCHEMA).write(pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=SCHEMA))
    port = free_port()
    log = tmp_path / "exporter.log"
    proc = start("exporter", {"STRATA_WAREHOUSE": warehouse, "METRICS_PORT": str(port)}, log)
    try:
        wait_ready(proc, log, "metrics ready on")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert 'strata_table_snapshot_latest_id{table="db.t"} 1.0' in resp.read().decode()
    finally:
        stop(proc)
    assert proc.returncode == 0, log.read_text()[-2000:]


def test_init_creates_databases(tmp_path: Path) -> None:
    warehouse = str(tmp_path / "wh")
    proc = subprocess.run([sys.executable, "-m", "strata_platform.serve", "init"],
                          env={**os.environ, "STRATA_WAREHOUSE": warehouse, "STRATA_DATABASES": "a, b"},
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert strata.load_catalog(warehouse).list_databases() == ["a", "b"]
