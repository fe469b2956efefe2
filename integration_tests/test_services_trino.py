"""The local Trino coordinator: real SQL through the `trino` Python client."""

from __future__ import annotations

import json
import urllib.request
import uuid
from typing import Any

import pytest

from strata_platform.services import trino as trino_service
from strata_platform.services.base import Service, listening_sockets

pytestmark = pytest.mark.trino


def query(trino: Service, sql: str) -> list[list[Any]]:
    assert isinstance(trino, trino_service.TrinoService)
    return trino.query(sql)


def test_client_env_points_at_loopback(trino: Service) -> None:
    url = trino.client_env()["STRATA_TRINO_URL"]
    assert url == "http://127.0.0.1:18080"
    with urllib.request.urlopen(f"{url}/v1/info", timeout=10) as resp:
        info = json.load(resp)
    assert info["starting"] is False
    assert info["coordinator"] is True
    assert info["nodeVersion"]["version"] == trino_service.TRINO_VERSION


def test_listens_on_loopback_only(trino: Service) -> None:
    pid = trino.running_pid()
    assert pid is not None
    sockets = listening_sockets(pid)
    assert ("127.0.0.1", 18080) in sockets, sockets
    assert {addr for addr, _ in sockets} == {"127.0.0.1"}, sockets


def test_runs_on_a_java_that_meets_the_requirements(trino: Service) -> None:
    java = trino_service.select_java()
    major, modules = trino_service.java_requirements(trino_service.TRINO_VERSION)
    assert java.major >= major
    assert modules <= java.modules
    assert query(trino, "SELECT node_version FROM system.runtime.nodes") == [[trino_service.TRINO_VERSION]]


def test_catalogs(trino: Service) -> None:
    catalogs = {row[0] for row in query(trino, "SHOW CATALOGS")}
    assert {"memory", "system"} <= catalogs
    assert ("paimon" in catalogs) == trino.paimon_available  # type: ignore[attr-defined]


def test_memory_catalog_write_and_read(trino: Service) -> None:
    schema = f"memory.it_{uuid.uuid4().hex[:8]}"
    query(trino, f"CREATE SCHEMA {schema}")
    try:
        query(trino, f"CREATE TABLE {schema}.numbers (id bigint, label varchar)")
        assert query(trino, f"INSERT INTO {schema}.numbers SELECT x, 'n' || CAST(x AS varchar) "
                            "FROM UNNEST(sequence(1, 1000)) AS t(x)") == [[1000]]
        assert query(trino, f"SELECT count(*), sum(id), max(label) FROM {schema}.numbers") == [
            [1000, 500500, "n999"]]
        query(trino, f"DROP TABLE {schema}.numbers")
    finally:
        query(trino, f"DROP SCHEMA IF EXISTS {schema}")


def test_paimon_catalog_only_when_its_plugin_is_installed(trino: Service) -> None:
    # Maven Central has no io.trino:trino-paimon artifact for any version (STRATA_TRINO_PAIMON_PLUGIN
    # can supply one): without it the catalog must stay unregistered, or Trino would not start
    catalogs = [row[0] for row in query(trino, "SHOW CATALOGS")]
    if not trino.paimon_available:  # type: ignore[attr-defined]
        assert "paimon" not in catalogs
        return
    assert "paimon" in catalogs
    assert isinstance(query(trino, "SHOW SCHEMAS FROM paimon"), list)
    query(trino, "CREATE SCHEMA IF NOT EXISTS paimon.smoke")
    table = f"paimon.smoke.t_{uuid.uuid4().hex[:8]}"
    query(trino, f"CREATE TABLE {table} (id bigint)")
    try:
        assert query(trino, f"INSERT INTO {table} VALUES 1, 2, 3") == [[3]]
        assert query(trino, f"SELECT id FROM {table} ORDER BY id") == [[1], [2], [3]]
    finally:
        query(trino, f"DROP TABLE IF EXISTS {table}")


def test_check_passes(trino: Service) -> None:
    detail = trino.check()
    assert "memory: 3 rows written and read back" in detail


def test_tpch_catalog_generates_the_tpch_tables(trino: Service) -> None:
    assert query(trino, "SELECT count(*), sum(regionkey) FROM tpch.tiny.nation") == [[25, 50]]
    assert query(trino, "SELECT count(*) FROM tpch.tiny.lineitem") == [[60175]]


@pytest.mark.postgres
@pytest.mark.minio
def test_native_iceberg_catalog_writes_and_deletes(trino: Service, postgres: Service,
                                                   minio: Service) -> None:
    # the JDBC catalog's two tables come from the postgres service's provisioning
    schema = f"native.it_{uuid.uuid4().hex[:8]}"
    query(trino, f"CREATE SCHEMA {schema}")
    try:
        assert query(trino, f"CREATE TABLE {schema}.nation AS SELECT * FROM tpch.tiny.nation") == [[25]]
        assert query(trino, f"DELETE FROM {schema}.nation WHERE regionkey = 0") == [[5]]
        assert query(trino, f"SELECT count(*) FROM {schema}.nation") == [[20]]
        files = query(trino, f'SELECT content FROM {schema}."nation$files" ORDER BY content')
        assert [row[0] for row in files] == [0, 1]  # one data file, one position-delete file
    finally:
        query(trino, f"DROP TABLE IF EXISTS {schema}.nation")
        query(trino, f"DROP SCHEMA IF EXISTS {schema}")
