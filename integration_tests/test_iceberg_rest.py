"""Strata's Iceberg REST catalog (strata_platform.iceberg_rest), as real server processes.

Most tests talk to one server over a warehouse on local disk, started with a bearer token (so
every request here carries it) and at DEBUG level (so the test of the log sees everything it
ever writes). Its tables: ``sales.orders`` with hand-written Iceberg metadata (two snapshots,
``main`` on the second, an older one outside any ref), ``sales.plain`` (a Strata table with no
Iceberg metadata: not an Iceberg table), ``sales.broken`` (metadata that is not JSON), the empty
database ``empty_db``, and tables the engine wrote and published (``strata.iceberg``) with each
``metadata.iceberg.storage``. Other servers: one with neither
token nor vended S3 settings, one with vended settings, one over an unreachable object store,
and the ``iceberg_rest`` service on MinIO.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import strata
from strata_platform.services.base import Service, listening_sockets

TOKEN = "s3cr3t-" + uuid.uuid4().hex
WRONG_TOKENS = ("wrong-" + uuid.uuid4().hex, TOKEN[:-1])
NAMESPACE_ERROR = "NoSuchNamespaceException"
TABLE_ERROR = "NoSuchTableException"
ADVERTISED = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
]


# -- a server process ---------------------------------------------------------------------------------
@dataclass
class Response:
    status: int
    headers: dict[str, str]
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw)


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log: Path
    port: int
    token: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, log: Path, warehouse: str, env: dict[str, str] | None = None,
              options: dict[str, str] | None = None, token: str | None = None) -> Server:
        full_env = {**os.environ, "STRATA_LOG_LEVEL": "DEBUG", "STRATA_JDBC_URI": "", "STRATA_CATALOG_OPTIONS": "",
                    "STRATA_ICEBERG_REST_TOKEN": token or "", **(env or {})}
        argv = [sys.executable, "-m", "strata_platform.iceberg_rest", "--warehouse", warehouse, "--port", "0"]
        for key, value in (options or {}).items():
            argv += ["--option", f"{key}={value}"]
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=full_env,
                                    start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            match = re.search(r"ready on http://127\.0\.0\.1:(\d+)", log.read_text(errors="replace"))
            if match:
                return cls(proc, log, int(match.group(1)), token)
            if proc.poll() is not None:
                break
            time.sleep(0.1)
        proc.kill()
        raise AssertionError(f"iceberg rest server did not start:\n{log.read_text(errors='replace')[-3000:]}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def request(self, method: str, path: str, token: str | None = "default", body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Response:
        """`path` is sent as it is (no normalisation), so malformed paths reach the server."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            sent = dict(headers or {})
            token = self.token if token == "default" else token
            if token:
                sent["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body=body, headers=sent)
            resp = conn.getresponse()
            return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
        finally:
            conn.close()

    def get(self, path: str, **kwargs: Any) -> Response:
        return self.request("GET", path, **kwargs)


def assert_error(resp: Response, status: int, kind: str) -> dict[str, Any]:
    """The spec's error model, and nothing that looks like a stack trace."""
    assert resp.status == status, (resp.status, resp.raw[:500])
    assert resp.headers["content-type"] == "application/json"
    body = resp.json
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "code"}, error
    assert error["code"] == status and error["type"] == kind, error
    assert isinstance(error["message"], str) and error["message"]
    assert "Traceback" not in resp.raw.decode() and 'File "' not in resp.raw.decode()
    return dict(error)


# -- the warehouse ------------------------------------------------------------------------------------
def empty_metadata(location: str, fields: list[tuple[str, str]]) -> dict[str, Any]:
    return {
        "format-version": 2, "table-uuid": str(uuid.uuid4()), "location": location, "last-sequence-number": 0,
        "last-updated-ms": int(time.time() * 1000), "last-column-id": len(fields),
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [
            {"id": i, "name": name, "required": False, "type": kind} for i, (name, kind) in enumerate(fields, 1)]}],
        "current-schema-id": 0, "partition-specs": [{"spec-id": 0, "fields": []}], "default-spec-id": 0,
        "last-partition-id": 999, "sort-orders": [{"order-id": 0, "fields": []}], "default-sort-order-id": 0,
        "properties": {}, "current-snapshot-id": -1, "snapshots": [], "snapshot-log": [], "metadata-log": [],
        "refs": {},
    }


def publish(table: Any, version: int, metadata: dict[str, Any] | bytes) -> None:
    """Iceberg metadata as the writer lays it out: metadata/v<N>.metadata.json and version-hint.text."""
    data = metadata if isinstance(metadata, bytes) else json.dumps(metadata).encode()
    table.file_io.write_bytes(f"{table.path}/metadata/v{version}.metadata.json", data)
    table.file_io.write_bytes(f"{table.path}/metadata/version-hint.text", str(version).encode())


def two_snapshot_metadata(location: str) -> dict[str, Any]:
    metadata = empty_metadata(location, [("id", "long"), ("item", "string")])
    now = int(time.time() * 1000)
    snapshots = [{"snapshot-id": sid, "sequence-number": sid, "timestamp-ms": now + sid,
                  "manifest-list": f"{location}/metadata/snap-{sid}.avro", "schema-id": 0,
                  "summary": {"operation": "append"}} for sid in (1, 2)]
    snapshots[1]["parent-snapshot-id"] = 1
    metadata.update({"last-sequence-number": 2, "current-snapshot-id": 2, "snapshots": snapshots,
                     "snapshot-log": [{"snapshot-id": s["snapshot-id"], "timestamp-ms": s["timestamp-ms"]}
                                      for s in snapshots],
                     "refs": {"main": {"snapshot-id": 2, "type": "branch"}}})
    return metadata


@dataclass
class Warehouse:
    path: Path
    catalog: Any
    orders_metadata: dict[str, Any]
    written: dict[str, tuple[Any, str]]  # table name -> (table, storage) of the tables the engine published


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    path = tmp_path_factory.mktemp("iceberg-rest") / "warehouse"
    catalog = strata.load_catalog(str(path))
    catalog.create_database("sales")
    catalog.create_database("empty_db")
    schema = pa.schema([("id", pa.int64()), ("item", pa.string())])
    orders = catalog.create_table("sales.orders", schema)
    publish(orders, 1, empty_metadata(f"file://{orders.path}", [("id", "long"), ("item", "string")]))
    metadata = two_snapshot_metadata(f"file://{orders.path}")
    publish(orders, 2, metadata)
    catalog.create_table("sales.plain", schema)
    publish(catalog.create_table("sales.broken", schema), 1, b"{not json")
    written: dict[str, tuple[Any, str]] = {}
    for storage in ("table-location", "hadoop-catalog", "rest-catalog"):
        name = f"w_{storage.replace('-', '_')}"
        table = catalog.create_table(f"sales.{name}", schema, options={"metadata.iceberg.storage": storage})
        table.write(pa.table({"id": [1, 2], "item": ["a", "b"]}))
        table.write(pa.table({"id": [3], "item": ["c"]}))
        written[name] = (catalog.get_table(f"sales.{name}"), storage)
    return Warehouse(path, catalog, metadata, written)


@pytest.fixture(scope="module")
def server(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server with a bearer token, at DEBUG level."""
    log = tmp_path_factory.mktemp("server") / "server.log"
    running = Server.start(log, str(warehouse.path), token=TOKEN)
    yield running
    assert running.stop() == 0, "SIGTERM must stop the server cleanly"


@pytest.fixture(scope="module")
def open_server(warehouse: Warehouse, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server without a token and without vended S3 settings."""
    running = Server.start(tmp_path_factory.mktemp("open") / "server.log", str(warehouse.path))
    yield running
    running.stop()


# -- config -------------------------------------------------------------------------------------------
def test_config_advertises_exactly_the_endpoints_served(server: Server) -> None:
    resp = server.get("/v1/config")
    assert resp.status == 200 and resp.headers["content-type"] == "application/json"
    config = resp.json
    assert config == {"defaults": {}, "overrides": {}, "endpoints": ADVERTISED}
    assert server.get("/v1/config?warehouse=anything").status == 200
    # every advertised endpoint answers (with the names of real objects substituted)...
    names = {"{prefix}/": "", "{namespace}": "sales", "{table}": "orders", "{view}": "v"}
    for endpoint in config["endpoints"]:
        method, path = endpoint.split(" ")
        for placeholder, value in names.items():
            path = path.replace(placeholder, value)
        resp = server.request(method, path)
        assert resp.status in (200, 204) or (resp.status == 404 and "views/" in path), (endpoint, resp.status)
    # ...and what is not advertised is not served: the write endpoints of the spec
    for method, path in (("POST", "/v1/namespaces"), ("DELETE", "/v1/namespaces/sales"),
                         ("POST", "/v1/namespaces/sales/tables"), ("POST", "/v1/namespaces/sales/tables/orders"),
                         ("DELETE", "/v1/namespaces/sales/tables/orders"), ("PUT", "/v1/namespaces/sales")):
        assert_error(server.request(method, path, body=b'{"name": "x"}'), 406, "UnsupportedOperationException")
    for method, path in (("POST", "/v1/tables/rename"), ("POST", "/v1/namespaces/sales/properties"),
                         ("POST", "/v1/transactions/commit"), ("POST", "/v1/oauth/tokens"),
                         ("POST", "/v1/namespaces/sales/tables/orders/metrics")):
        assert_error(server.request(method, path, body=b"{}"), 400, "BadRequestException")


# -- namespaces ---------------------------------------------------------------------------------------
def test_list_namespaces(server: Server, warehouse: Warehouse) -> None:
    for path in ("/v1/namespaces", "/v1/namespaces?pageToken=", "/v1/namespaces?pageToken=&pageSize=1"):
        resp = server.get(path)
        assert resp.status == 200
        assert resp.json == {"namespaces": [["empty_db"], ["sales"]], "next-page-token": None}
    assert server.get("/v1/namespaces?parent=sales").json == {"namespaces": [], "next-page-token": None}
    assert_error(server.get("/v1/namespaces?parent=nope"), 404, NAMESPACE_ERROR)


def test_load_namespace_and_head(server: Server, warehouse: Warehouse) -> None:
    resp = server.get("/v1/namespaces/sales")
    assert resp.status == 200
    assert resp.json == {"namespace": ["sales"], "properties": {"location": (warehouse.path / "sales.db").as_uri()}}
    error = assert_error(server.get("/v1/namespaces/nope"), 404, NAMESPACE_ERROR)
    assert "nope" in error["message"]
    # a multi-level namespace (parts separated by %1F) is never a Strata database
    assert_error(server.get("/v1/namespaces/sales%1Forders"), 404, NAMESPACE_ERROR)
    head = server.request("HEAD", "/v1/namespaces/sales")
    assert head.status == 204 and head.raw == b""
    head = server.request("HEAD", "/v1/namespaces/nope")
    assert head.status == 404 and head.raw == b""


# -- tables ---------------------------------------------------------------------------------------------
def test_list_tables_only_those_with_iceberg_metadata(server: Server, warehouse: Warehouse) -> None:
    expected = sorted(["broken", "orders", *warehouse.written])
    for path in ("/v1/namespaces/sales/tables", "/v1/namespaces/sales/tables?pageToken="):
        resp = server.get(path)
        assert resp.status == 200
        body = resp.json
        assert body["next-page-token"] is None
        assert sorted(i["name"] for i in body["identifiers"]) == expected  # not "plain"
        assert all(i["namespace"] == ["sales"] for i in body["identifiers"])
    assert server.get("/v1/namespaces/empty_db/tables").json == {"identifiers": [], "next-page-token": None}
    assert_error(server.get("/v1/namespaces/nope/tables"), 404, NAMESPACE_ERROR)


def test_load_table(server: Server, warehouse: Warehouse) -> None:
    resp = server.get("/v1/namespaces/sales/tables/orders")
    assert resp.status == 200
    body = resp.json
    assert set(body) == {"metadata-location", "metadata", "config"}
    orders = warehouse.catalog.get_table("sales.orders")
    assert body["metadata-location"] == f"file://{orders.path}/metadata/v2.metadata.json"  # version-hint.text
    assert body["metadata"] == warehouse.orders_metadata
    assert body["config"] == {}  # no S3 settings unless the server is told to pass them
    assert server.get("/v1/namespaces/sales/tables/orders?snapshots=all").json == body
    refs = server.get("/v1/namespaces/sales/tables/orders?snapshots=refs").json
    assert [s["snapshot-id"] for s in refs["metadata"]["snapshots"]] == [2]  # snapshot 1 is in no ref
    assert {k: v for k, v in refs["metadata"].items() if k != "snapshots"} == {
        k: v for k, v in warehouse.orders_metadata.items() if k != "snapshots"}
    assert_error(server.get("/v1/namespaces/sales/tables/orders?snapshots=some"), 400, "BadRequestException")
    assert_error(server.get("/v1/namespaces/sales/tables/plain"), 404, TABLE_ERROR)  # no Iceberg metadata
    assert_error(server.get("/v1/namespaces/sales/tables/missing"), 404, TABLE_ERROR)
    assert_error(server.get("/v1/namespaces/sales/tables/orders%24snapshots"), 404, TABLE_ERROR)  # system table
    # a table of a namespace that does not exist either: NoSuchTable, as Iceberg's reference catalogs
    # answer (Trino then says TABLE_NOT_FOUND)
    assert_error(server.get("/v1/namespaces/nope/tables/orders"), 404, TABLE_ERROR)
    assert server.request("HEAD", "/v1/namespaces/sales/tables/orders").status == 204
    for path in ("/v1/namespaces/sales/tables/plain", "/v1/namespaces/sales/tables/missing",
                 "/v1/namespaces/nope/tables/orders"):
        head = server.request("HEAD", path)
        assert head.status == 404 and head.raw == b"", path


def test_a_new_metadata_version_is_served_at_once(server: Server, warehouse: Warehouse) -> None:
    table = warehouse.catalog.create_table("sales.moving", pa.schema([("id", pa.int64())]))
    assert_error(server.get("/v1/namespaces/sales/tables/moving"), 404, TABLE_ERROR)
    try:
        for version in (1, 2, 3):
            metadata = empty_metadata(f"file://{table.path}", [("id", "long")])
            metadata["properties"] = {"version": str(version)}
            publish(table, version, metadata)
            body = server.get("/v1/namespaces/sales/tables/moving").json
            assert body["metadata-location"].endswith(f"/metadata/v{version}.metadata.json")
            assert body["metadata"]["properties"] == {"version": str(version)}
    finally:
        warehouse.catalog.drop_table("sales.moving")


def test_a_dropped_or_recreated_table_is_served_as_it_is_now(server: Server, warehouse: Warehouse) -> None:
    """The server keeps where a table's metadata lives between loads, never what it holds: a drop is
    a 404 at the next load, a table re-created under the same name serves its own metadata, and a
    version rewritten in place (as a statistics refresh does) is served as rewritten."""
    fields = [("id", "long")]
    table = warehouse.catalog.create_table("sales.reborn", pa.schema([("id", pa.int64())]))
    publish(table, 1, {**empty_metadata(f"file://{table.path}", fields), "properties": {"life": "first"}})
    assert server.get("/v1/namespaces/sales/tables/reborn").json["metadata"]["properties"] == {"life": "first"}
    publish(table, 1, {**empty_metadata(f"file://{table.path}", fields), "properties": {"life": "rewritten"}})
    assert server.get("/v1/namespaces/sales/tables/reborn").json["metadata"]["properties"] == {"life": "rewritten"}
    warehouse.catalog.drop_table("sales.reborn")
    assert_error(server.get("/v1/namespaces/sales/tables/reborn"), 404, TABLE_ERROR)
    table = warehouse.catalog.create_table("sales.reborn", pa.schema([("id", pa.int64())]))
    try:
        assert_error(server.get("/v1/namespaces/sales/tables/reborn"), 404, TABLE_ERROR)  # no metadata yet
        publish(table, 1, {**empty_metadata(f"file://{table.path}", fields), "properties": {"life": "second"}})
        assert server.get("/v1/namespaces/sales/tables/reborn").json["metadata"]["properties"] == {"life": "second"}
    finally:
        warehouse.catalog.drop_table("sales.reborn")


def test_a_known_table_loads_without_resolving_it_again(warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trino loads every table of a query at every query: after the first load, a load reads the
    version hint and the metadata file only, until the location's time to live runs out."""
    from strata_platform.iceberg_rest import IcebergRestCatalog

    resolved: list[str] = []
    get_table = warehouse.catalog.get_table
    monkeypatch.setattr(warehouse.catalog, "get_table", lambda ident: resolved.append(str(ident)) or get_table(ident))
    rest = IcebergRestCatalog(warehouse.catalog)
    first = rest.load_table("sales", "orders")
    assert rest.load_table("sales", "orders") == first and len(resolved) == 1
    rest.location_ttl = 0.0  # expired: resolved through the catalog again
    assert rest.load_table("sales", "orders") == first and len(resolved) == 2


def test_tables_the_engine_published(server: Server, warehouse: Warehouse) -> None:
    for name, (table, storage) in warehouse.written.items():
        body = server.get(f"/v1/namespaces/sales/tables/{name}").json
        snapshot = table.latest_snapshot()
        assert body["metadata-location"].endswith(f"/metadata/v{snapshot.id}.metadata.json"), (storage, body)
        where = (f"{warehouse.path}/iceberg/sales/{name}/metadata/" if storage == "hadoop-catalog"
                 else f"{table.path}/metadata/")
        assert urllib.parse.urlsplit(body["metadata-location"]).path.startswith(where), (storage, body)
        metadata = body["metadata"]
        assert metadata["format-version"] == 2
        assert [f["name"] for f in metadata["schemas"][-1]["fields"]] == ["id", "item"]
        assert metadata["current-snapshot-id"] not in (None, -1)


# -- views ----------------------------------------------------------------------------------------------
def test_views_do_not_exist(server: Server) -> None:
    for path in ("/v1/namespaces/sales/views", "/v1/namespaces/sales/views?pageToken="):
        resp = server.get(path)
        assert resp.status == 200 and resp.json == {"identifiers": [], "next-page-token": None}
    error = assert_error(server.get("/v1/namespaces/sales/views/orders"), 404, "NoSuchViewException")
    assert "sales.orders" in error["message"]
    head = server.request("HEAD", "/v1/namespaces/sales/views/orders")
    assert head.status == 404 and head.raw == b""
    assert_error(server.get("/v1/namespaces/nope/views"), 404, NAMESPACE_ERROR)
    assert_error(server.get("/v1/namespaces/nope/views/v"), 404, "NoSuchViewException")


# -- malformed requests and failures ------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    "/v1/namespaces/sales/tables/..%2F..%2Fetc",  # a name that would leave the warehouse
    "/v1/namespaces/..",
    "/v1/namespaces/sales/tables/%2e%2e",
    "/v1/namespaces//tables",  # empty segment
    "/v1/namespaces/sales/tables/%zz",  # broken percent-encoding
    "/v1/namespaces/%FF%FE",  # not UTF-8
    "/v1/namespaces/sales%00",  # control character
    "/v1/namespaces/sales/tables/orders/extra",
    "/v1/namespaces/sales/whatever",
    "/v1",
    "/",
    "/v2/config",
])
def test_malformed_paths_are_bad_requests(server: Server, path: str) -> None:
    assert_error(server.get(path), 400, "BadRequestException")


def test_a_failure_answers_500_without_a_trace(server: Server) -> None:
    error = assert_error(server.get("/v1/namespaces/sales/tables/broken"), 500, "InternalServerError")
    assert error["message"] == "JSONDecodeError (see the catalog server's log)"
    log = server.log.read_text()
    assert "GET /v1/namespaces/sales/tables/broken failed" in log and "Traceback" in log  # the trace is logged


def test_health_when_the_object_store_is_unreachable(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = sock.getsockname()[1]
    broken = Server.start(tmp_path / "server.log", "s3://nowhere/warehouse", options={
        "s3.endpoint": f"http://127.0.0.1:{dead}", "s3.access-key": "x", "s3.secret-key": "y", "s3.max-attempts": "1"})
    try:
        resp = broken.get("/health")
        assert resp.status == 503
        assert resp.json["status"] == "unavailable" and "Traceback" not in resp.raw.decode()
        resp = broken.get("/v1/namespaces")
        error = assert_error(resp, 500, "InternalServerError")
        assert re.fullmatch(r"\w+ \(see the catalog server's log\)", error["message"]), error
    finally:
        broken.stop()


# -- authentication -------------------------------------------------------------------------------------
def test_bearer_token_is_required(server: Server) -> None:
    paths = ["/v1/config", "/v1/namespaces", "/v1/namespaces/sales", "/v1/namespaces/sales/tables",
             "/v1/namespaces/sales/tables/orders", "/v1/namespaces/sales/views", "/v1/namespaces/sales/views/v",
             "/v1/namespaces/nope", "/v1/no-such-endpoint"]
    for path in paths:
        for headers in ({}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer"},
                        *({"Authorization": f"Bearer {wrong}"} for wrong in WRONG_TOKENS)):
            resp = server.get(path, token=None, headers=headers)
            error = assert_error(resp, 401, "NotAuthorizedException")
            assert TOKEN not in error["message"]
            assert resp.headers["www-authenticate"].startswith("Bearer")
        head = server.request("HEAD", path, token=None)
        assert head.status == 401 and head.raw == b""
        assert server.request("POST", path, token=None).status == 401
    assert server.get("/v1/namespaces", headers={"Authorization": f"bearer {TOKEN}"}, token=None).status == 200
    # health and metrics stay open (probes and Prometheus carry no token)
    assert server.get("/health", token=None).status == 200
    assert server.get("/metrics", token=None).status == 200


def test_without_a_token_no_authorization_is_needed(open_server: Server) -> None:
    assert open_server.get("/v1/namespaces", token=None).json["namespaces"] == [["empty_db"], ["sales"]]
    body = open_server.get("/v1/namespaces/sales/tables/orders", token=None).json
    assert body["config"] == {}
    assert open_server.get("/v1/namespaces", token="anything").status == 200


def test_vended_s3_settings(warehouse: Warehouse, tmp_path: Path) -> None:
    vend = Server.start(tmp_path / "server.log", str(warehouse.path), env={
        "STRATA_ICEBERG_REST_VEND_S3": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:19000",
        "AWS_ACCESS_KEY_ID": "access", "AWS_SECRET_ACCESS_KEY": "secret-value", "AWS_REGION": "eu-west-3"})
    try:
        config = vend.get("/v1/namespaces/sales/tables/orders").json["config"]
        assert config == {"s3.endpoint": "http://127.0.0.1:19000", "s3.access-key-id": "access",
                          "s3.secret-access-key": "secret-value", "client.region": "eu-west-3",
                          "s3.path-style-access": "true"}
        assert "secret-value" not in vend.log.read_text()
    finally:
        vend.stop()


# -- operations -------------------------------------------------------------------------------------------
def test_health(server: Server) -> None:
    resp = server.get("/health", token=None)
    assert resp.status == 200 and resp.json == {"status": "ok", "namespaces": 2}


def test_metrics(server: Server) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    for _ in range(3):
        server.get("/v1/namespaces/sales/tables/orders")
    server.get("/v1/namespaces/nope")
    server.get("/v1/namespaces", token=None)
    resp = server.get("/metrics", token=None)
    assert resp.status == 200 and resp.headers["content-type"].startswith("text/plain")
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(resp.raw.decode()) for s in family.samples}

    def requests(endpoint: str, status: str, method: str = "GET") -> float:
        key = (("endpoint", endpoint), ("method", method), ("status", status))
        return samples.get(("strata_iceberg_rest_requests_total", key), 0.0)

    assert requests("/v1/namespaces/{namespace}/tables/{table}", "200") >= 3
    assert requests("/v1/namespaces/{namespace}", "404") >= 1
    assert requests("/v1/namespaces", "401") >= 1
    assert requests("/v1/namespaces/{namespace}/tables/{table}", "204", "HEAD") >= 1
    count = samples[("strata_iceberg_rest_request_duration_seconds_count",
                     (("endpoint", "/v1/namespaces/{namespace}/tables/{table}"), ("method", "GET")))]
    assert count >= 3
    buckets = [key for key in samples if key[0] == "strata_iceberg_rest_request_duration_seconds_bucket"]
    assert buckets
    # unknown paths share one label: a client cannot grow the metrics without bound
    server.get(f"/v1/random-{uuid.uuid4().hex}")
    text = server.get("/metrics", token=None).raw.decode()
    assert "random-" not in text and 'endpoint="unknown"' in text


def test_listens_on_loopback_only(server: Server) -> None:
    sockets = listening_sockets(server.proc.pid)
    assert sockets == {("127.0.0.1", server.port)}, sockets


def test_token_never_logged(server: Server) -> None:
    """Runs after the other tests of the module (file order): everything the server logged so far,
    at DEBUG level, holds neither the token nor any wrong one a client sent."""
    server.get("/v1/namespaces")
    server.get("/v1/namespaces", token=WRONG_TOKENS[0])
    server.get("/health", token=TOKEN)
    time.sleep(0.2)
    log = server.log.read_text(errors="replace")
    assert "GET /v1/namespaces 200" in log and "GET /v1/namespaces 401" in log  # the requests are logged
    assert "bearer token required" in log
    for secret in (TOKEN, *WRONG_TOKENS):
        assert secret not in log


# -- the provisioned service, on MinIO --------------------------------------------------------------------
@pytest.mark.minio
def test_service_on_minio(iceberg_rest: Service) -> None:
    from strata_platform.services.iceberg_rest import IcebergRestService

    assert isinstance(iceberg_rest, IcebergRestService)
    catalog = iceberg_rest.catalog()
    database = f"svc_{uuid.uuid4().hex[:8]}"
    catalog.create_database(database)
    try:
        table = catalog.create_table(f"{database}.t", pa.schema([("id", pa.int64())]))
        publish(table, 1, empty_metadata(table.path, [("id", "long")]))
        assert table.path.startswith("s3://warehouse/")
        loaded = iceberg_rest.get(f"/v1/namespaces/{database}/tables/t")
        assert loaded["metadata-location"] == f"{table.path}/metadata/v1.metadata.json"
        assert [database] in iceberg_rest.get("/v1/namespaces")["namespaces"]
        detail = iceberg_rest.check()
        assert "9 endpoints" in detail and "tables with Iceberg metadata loaded" in detail
        pid = iceberg_rest.running_pid()
        assert pid is not None and listening_sockets(pid) == {("127.0.0.1", iceberg_rest.port)}
    finally:
        catalog.drop_database(database, cascade=True)
