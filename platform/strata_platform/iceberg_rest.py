"""An Iceberg REST catalog over a Strata warehouse (read-only): ``python -m strata_platform.iceberg_rest``.

Query engines that speak Iceberg (Trino's ``iceberg`` connector with ``iceberg.catalog.type=rest``,
Spark, PyIceberg...) read Strata tables through the Iceberg metadata Strata writes beside each table
(``strata.iceberg``; table option ``metadata.iceberg.storage``). This server maps the catalog onto
the REST spec: namespaces are Strata databases, tables are the Strata tables that have Iceberg
metadata, and loading a table returns its newest ``v<N>.metadata.json`` (the one
``version-hint.text`` names). It never writes: every change goes through Strata.

Endpoints (HTTP, JSON; errors in the spec's error model ``{"error": {"message", "type", "code"}}``):

``GET  /v1/config``                                      defaults, overrides, the endpoints served
``GET  /v1/namespaces[?parent=&pageToken=]``             Strata databases (one page)
``GET  /v1/namespaces/{namespace}``                      a database (404 NoSuchNamespaceException)
``HEAD /v1/namespaces/{namespace}``                      204 / 404
``GET  /v1/namespaces/{namespace}/tables[?pageToken=]``  tables with Iceberg metadata
``GET  /v1/namespaces/{namespace}/tables/{table}[?snapshots=all|refs]``
                                                         ``metadata-location``, ``metadata``, ``config``;
                                                         404 NoSuchTableException, also when the
                                                         namespace does not exist (as Iceberg's
                                                         reference catalogs: Trino's TABLE_NOT_FOUND)
``HEAD /v1/namespaces/{namespace}/tables/{table}``       204 / 404 (NoSuchTableException)
``GET  /v1/namespaces/{namespace}/views``                always empty (Strata has no views)
``GET|HEAD /v1/namespaces/{namespace}/views/{view}``     404 NoSuchViewException
``GET  /health``                                         200 when the catalog lists its databases
``GET  /metrics``                                        Prometheus metrics

Writes to any of these paths answer 406 UnsupportedOperationException (the catalog is read-only);
a path that is none of them, or a malformed one, 400 BadRequestException, as is a namespace or
table name that breaks a naming rule (``strata.names``; checked before anything is looked up).
An unexpected failure answers 500 with the exception's class only; the trace goes to the server's
log.

Configuration (environment; flags win): ``STRATA_WAREHOUSE`` (``--warehouse``),
``STRATA_CATALOG_OPTIONS``, ``STRATA_JDBC_URI`` / ``_USER`` / ``_PASSWORD`` (the JDBC catalog) and
the AWS variables for S3, as every Strata service (``strata_platform.serve``);
``STRATA_ICEBERG_REST_HOST`` (``--host``, default 127.0.0.1), ``STRATA_ICEBERG_REST_PORT``
(``--port``, default 19192; 0 picks a free port); ``STRATA_ICEBERG_REST_TOKEN`` (or
``STRATA_ICEBERG_REST_TOKEN_FILE``): when set, every endpoint but ``/health`` and ``/metrics``
needs ``Authorization: Bearer <token>`` (401 NotAuthorizedException otherwise; the token is never
logged); ``STRATA_ICEBERG_REST_VEND_S3=true`` passes the S3 endpoint, region and credentials the
server itself uses to clients in each loaded table's ``config`` (Iceberg's ``s3.*`` properties),
off by default; ``STRATA_LOG_LEVEL``. SIGTERM and SIGINT stop it (exit 0). It prints
``strata iceberg rest catalog ready on http://HOST:PORT`` once it serves.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult

from strata.catalog import Catalog, Identifier
from strata.errors import DatabaseNotFoundError, InvalidNameError, TableNotFoundError
from strata.fs.file_io import FileIO
from strata.iceberg import latest_metadata_location, versions
from strata.names import check_database_name, check_object_name
from strata.table.table import Table
from strata_platform.http_service import (
    NO_CONTENT,
    Answer,
    JsonHandler,
    JsonServer,
    RequestError,
    RequestMetrics,
    parse_service_args,
    query_values,
    serve,
    serve_until_stopped,
    service_environment,
    service_parser,
    split_path,
)

log = logging.getLogger("strata.iceberg_rest")

DEFAULT_PORT = 19192
# Seconds a table's metadata directory (and a namespace's existence) is trusted without resolving
# the table again through the Strata catalog. Only where the metadata lives is kept: the version
# hint and the metadata file are read at every load, so a new version is served at once.
LOCATION_TTL = 10.0
NAMESPACE_SEPARATOR = "\x1f"  # the spec's separator of multi-level namespace parts (%1F)
_HEX = re.compile(r"%(?![0-9A-Fa-f]{2})")


# -- errors -----------------------------------------------------------------------------------------
class RestError(Exception):
    """An answer in the spec's error model: HTTP `code`, Iceberg exception `kind`, message."""

    def __init__(self, code: int, kind: str, message: str):
        super().__init__(message)
        self.code, self.kind, self.message = code, kind, message

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.code}}


def bad_request(message: str) -> RestError:
    return RestError(400, "BadRequestException", message)


def no_such_namespace(name: str) -> RestError:
    return RestError(404, "NoSuchNamespaceException", f"Namespace does not exist: {name}")


def no_such_table(namespace: str, table: str) -> RestError:
    return RestError(404, "NoSuchTableException", f"Table does not exist: {namespace}.{table}")


def valid_name(check: Callable[[str], str], name: str) -> str:
    """`name` if it passes `check` (``strata.names``), else 400: a malformed name never reaches
    the catalog, let alone a file system."""
    try:
        return check(name)
    except InvalidNameError as exc:
        raise bad_request(str(exc)) from None


# -- the catalog, without HTTP ----------------------------------------------------------------------
def as_uri(path: str) -> str:
    """Absolute URI of a location: object-store and ``file:`` URIs as they are, a bare path as ``file://``."""
    if "://" in path or path.startswith("file:"):
        return path
    return Path(path).absolute().as_uri()


@dataclass(frozen=True)
class MetadataDir:
    """Where a table's Iceberg metadata lives, as resolved through the Strata catalog at `resolved`."""

    file_io: FileIO
    path: str
    resolved: float


class IcebergRestCatalog:
    """The REST catalog's answers over a Strata `catalog` (thread-safe: it only reads).

    A table load costs two reads once its metadata directory is known (``version-hint.text``, then
    the file it names): resolving the table through the catalog
    (its database, schema and options) takes three to four times as long, and Trino loads every
    table a query names, at every query."""

    def __init__(self, catalog: Catalog, client_config: Mapping[str, str] | None = None,
                 location_ttl: float = LOCATION_TTL):
        self.catalog = catalog
        self.client_config = dict(client_config or {})
        self.location_ttl = location_ttl
        self._metadata_dirs: dict[tuple[str, str], MetadataDir] = {}
        self._namespaces: dict[str, float] = {}  # namespace -> when it was last seen to exist

    # -- config --------------------------------------------------------------------------------------
    @staticmethod
    def config() -> dict[str, Any]:
        return {"defaults": {}, "overrides": {}, "endpoints": [f"{method} {path}" for method, path in ENDPOINTS]}

    # -- namespaces ----------------------------------------------------------------------------------
    def list_namespaces(self, parent: str | None) -> dict[str, Any]:
        if parent:  # databases are one level: a parent has no children, if it exists at all
            self.database(parent)
            return {"namespaces": [], "next-page-token": None}
        return {"namespaces": [[name] for name in self.catalog.list_databases()], "next-page-token": None}

    def database(self, namespace: str) -> str:
        """The database a namespace names; 400 for a malformed name, 404 unless it is one level
        and exists."""
        if time.monotonic() - self._namespaces.get(namespace, -math.inf) < self.location_ttl:
            return namespace
        if NAMESPACE_SEPARATOR not in namespace:
            valid_name(check_database_name, namespace)
        if NAMESPACE_SEPARATOR in namespace or not self.catalog._database_exists(namespace):
            self._namespaces.pop(namespace, None)
            raise no_such_namespace(namespace.replace(NAMESPACE_SEPARATOR, "."))
        self._namespaces[namespace] = time.monotonic()
        return namespace

    def load_namespace(self, namespace: str) -> dict[str, Any]:
        database = self.database(namespace)
        properties: dict[str, str] = {}
        located: Any = self.catalog
        if hasattr(located, "database_path"):
            properties["location"] = as_uri(located.database_path(database))
        return {"namespace": [database], "properties": properties}

    # -- tables --------------------------------------------------------------------------------------
    def list_tables(self, namespace: str) -> dict[str, Any]:
        database = self.database(namespace)
        try:
            names = self.catalog.list_tables(database)
        except DatabaseNotFoundError:  # dropped meanwhile
            raise no_such_namespace(database) from None
        identifiers = [{"namespace": [database], "name": name} for name in names
                       if self._metadata_location(database, name)[1] is not None]
        return {"identifiers": identifiers, "next-page-token": None}

    def table_database(self, namespace: str, name: str) -> str:
        """The database of a table the client names; 400 for a malformed name, and 404
        NoSuchTableException when the namespace does not exist either, as Iceberg's reference
        catalogs answer a table load (Trino maps it to TABLE_NOT_FOUND)."""
        valid_name(check_object_name, name)
        try:
            return self.database(namespace)
        except RestError as exc:
            if exc.kind != "NoSuchNamespaceException":
                raise
            raise no_such_table(namespace.replace(NAMESPACE_SEPARATOR, "."), name) from None

    def load_table(self, namespace: str, name: str, snapshots: str = "all") -> dict[str, Any]:
        if snapshots not in ("all", "refs"):
            raise bad_request(f"snapshots must be 'all' or 'refs', got {snapshots!r}")
        known = self._metadata_dirs.get((namespace, name))
        if known is not None and time.monotonic() - known.resolved < self.location_ttl:
            current = self._read_current(known)
            if current is not None:
                return self._table_answer(*current, snapshots)
        database = self.table_database(namespace, name)
        for _ in range(3):  # a commit may move version-hint.text past a file being read: read again
            table, location = self._metadata_location(database, name)
            if table is None or location is None:
                self._metadata_dirs.pop((namespace, name), None)
                raise no_such_table(database, name)
            try:
                raw = table.file_io.read_bytes(location)
            except FileNotFoundError:
                continue
            self._metadata_dirs[(namespace, name)] = MetadataDir(table.file_io, location.rsplit("/", 1)[0],
                                                                 time.monotonic())
            return self._table_answer(location, raw, snapshots)
        raise no_such_table(database, name)

    @staticmethod
    def _read_current(known: MetadataDir) -> tuple[str, bytes] | None:
        """The newest metadata file of a known directory and its bytes; None when the hint or the
        file is gone (the table was dropped, or a commit moved on meanwhile): resolve again."""
        current = versions.current(known.file_io, known.path)  # v<N>, or its statistics version
        return None if current is None else (current.location, current.raw)

    def _table_answer(self, location: str, raw: bytes, snapshots: str) -> dict[str, Any]:
        metadata = json.loads(raw)
        if snapshots == "refs":
            metadata = only_referenced_snapshots(metadata)
        return {"metadata-location": as_uri(location), "metadata": metadata, "config": dict(self.client_config)}

    def table_exists(self, namespace: str, name: str) -> None:
        database = self.table_database(namespace, name)
        if self._metadata_location(database, name)[1] is None:
            raise no_such_table(database, name)

    def _metadata_location(self, database: str, name: str) -> tuple[Table | None, str | None]:
        """A Strata table and its newest Iceberg metadata file (``strata.iceberg``: the file
        ``version-hint.text`` names, where the table's ``metadata.iceberg.storage`` puts it);
        None for what is absent."""
        if "$" in name:  # Strata's system tables (t$snapshots...) have no Iceberg metadata
            return None, None
        try:
            table = self.catalog.get_table(Identifier(database, name))
        except (TableNotFoundError, DatabaseNotFoundError):
            return None, None
        return table, latest_metadata_location(table)

    # -- views ---------------------------------------------------------------------------------------
    def list_views(self, namespace: str) -> dict[str, Any]:
        self.database(namespace)
        return {"identifiers": [], "next-page-token": None}

    def load_view(self, namespace: str, name: str) -> dict[str, Any]:
        valid_name(check_object_name, name)  # Strata has no views: none exists, in any namespace
        if NAMESPACE_SEPARATOR not in namespace:
            valid_name(check_database_name, namespace)
        raise RestError(404, "NoSuchViewException",
                        f"View does not exist: {namespace.replace(NAMESPACE_SEPARATOR, '.')}.{name}")

    # -- health --------------------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return {"status": "ok", "namespaces": len(self.catalog.list_databases())}


def only_referenced_snapshots(metadata: dict[str, Any]) -> dict[str, Any]:
    """``snapshots=refs``: keep the snapshots a branch or tag points at (the current one included)."""
    refs = metadata.get("refs") or {}
    wanted = {ref.get("snapshot-id") for ref in refs.values()}
    if metadata.get("current-snapshot-id") not in (None, -1):
        wanted.add(metadata["current-snapshot-id"])
    return {**metadata, "snapshots": [s for s in metadata.get("snapshots") or [] if s.get("snapshot-id") in wanted]}


# -- routes -----------------------------------------------------------------------------------------
# (method, path as the spec names it); "GET /v1/config" itself is not listed, as in the spec
ENDPOINTS: tuple[tuple[str, str], ...] = (
    ("GET", "/v1/{prefix}/namespaces"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}"),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/tables/{table}"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/views"),
    ("GET", "/v1/{prefix}/namespaces/{namespace}/views/{view}"),
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/views/{view}"),
)

Handler = Callable[[IcebergRestCatalog, list[str], dict[str, str]], Any]


@dataclass(frozen=True)
class Route:
    pattern: tuple[str, ...]  # path segments; "*" is a parameter
    methods: tuple[str, ...]
    handler: Handler

    @property
    def label(self) -> str:
        names = iter(("{namespace}", "{table}" if "tables" in self.pattern else "{view}"))
        return "/" + "/".join(next(names) if part == "*" else part for part in self.pattern)

    def match(self, parts: list[str]) -> bool:
        return len(parts) == len(self.pattern) and all(
            want in ("*", got) for want, got in zip(self.pattern, parts, strict=True))


ROUTES: tuple[Route, ...] = (
    Route(("v1", "config"), ("GET",), lambda c, p, q: c.config()),
    Route(("v1", "namespaces"), ("GET",), lambda c, p, q: c.list_namespaces(q.get("parent"))),
    Route(("v1", "namespaces", "*"), ("GET", "HEAD"), lambda c, p, q: c.load_namespace(p[2])),
    Route(("v1", "namespaces", "*", "tables"), ("GET",), lambda c, p, q: c.list_tables(p[2])),
    Route(("v1", "namespaces", "*", "tables", "*"), ("GET", "HEAD"),
          lambda c, p, q: c.load_table(p[2], p[4], q.get("snapshots") or "all")),
    Route(("v1", "namespaces", "*", "views"), ("GET",), lambda c, p, q: c.list_views(p[2])),
    Route(("v1", "namespaces", "*", "views", "*"), ("GET", "HEAD"), lambda c, p, q: c.load_view(p[2], p[4])),
)
HEAD_HANDLERS: dict[tuple[str, ...], Handler] = {
    ("v1", "namespaces", "*"): lambda c, p, q: c.database(p[2]),
    ("v1", "namespaces", "*", "tables", "*"): lambda c, p, q: c.table_exists(p[2], p[4]),
}


def check_path_segment(part: str, value: str) -> None:
    """Iceberg's rules for a path segment (`part`, `value` decoded): well-formed percent-encoding,
    and not blank, ``.``/``..``, a path or a control character (but the namespace separator)."""
    if _HEX.search(part):
        raise RequestError(400, f"malformed percent-encoding in path segment {part!r}")
    if (not value.strip() or value in (".", "..") or "/" in value or "\\" in value
            or any(ord(ch) < 0x20 and ch != NAMESPACE_SEPARATOR for ch in value)):
        raise RequestError(400, f"malformed path segment {part!r}")


# -- HTTP -------------------------------------------------------------------------------------------
ERROR_KINDS = {400: "BadRequestException", 401: "NotAuthorizedException"}  # of the shared layer's refusals


class IcebergRestHandler(JsonHandler[IcebergRestCatalog]):
    server_version = "strata-iceberg-rest"
    unauthorized_message = f"Not authorized: {JsonHandler.unauthorized_message}"
    log = log

    def route(self, method: str, url: SplitResult) -> tuple[str, Answer]:
        parts = split_path(url.path, check_path_segment)
        route = next((r for r in ROUTES if r.match(parts)), None)
        if route is None:
            raise bad_request(f"{method} {url.path} is not an endpoint of this catalog")
        rest, query = self.server.service, query_values(url.query)

        def answer(body: bytes) -> Any:
            if method not in route.methods:
                raise RestError(406, "UnsupportedOperationException",
                                f"{method} {route.label}: this catalog is read-only (write through Strata)")
            if method == "HEAD":
                HEAD_HANDLERS.get(route.pattern, route.handler)(rest, parts, query)
                return NO_CONTENT
            return route.handler(rest, parts, query)
        return route.label, answer

    def error_answer(self, exc: Exception) -> tuple[int, Any] | None:
        if isinstance(exc, RequestError):
            exc = RestError(exc.status, ERROR_KINDS.get(exc.status, "BadRequestException"), exc.message)
        elif isinstance(exc, InvalidNameError):  # a name the catalog itself refused
            exc = bad_request(str(exc))
        return (exc.code, exc.body()) if isinstance(exc, RestError) else None

    def failure_body(self, exc: Exception) -> Any:
        return RestError(500, "InternalServerError", f"{type(exc).__name__} (see the catalog server's log)").body()


def start(rest: IcebergRestCatalog, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          token: str | None = None) -> JsonServer[IcebergRestCatalog]:
    """Serve `rest` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    return serve(IcebergRestHandler, rest, host, port, token, RequestMetrics("strata_iceberg_rest"),
                 "iceberg-rest-http")


# -- command line -------------------------------------------------------------------------------------
def client_s3_config(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Iceberg's S3FileIO properties for the S3 settings this server uses (catalog options, then AWS_*)."""
    from strata_platform.serve import s3_settings

    s3 = s3_settings(options, env)
    names = {"endpoint": "s3.endpoint", "access-key": "s3.access-key-id", "secret-key": "s3.secret-access-key",
             "session-token": "s3.session-token", "region": "client.region",
             "path-style-access": "s3.path-style-access"}
    return {names[key]: value for key, value in s3.items() if value}


def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    return parse_service_args(service_parser("python -m strata_platform.iceberg_rest", __doc__, env,
                                             "STRATA_ICEBERG_REST_HOST", "STRATA_ICEBERG_REST_PORT", DEFAULT_PORT),
                              argv)


def main(argv: Sequence[str] | None = None) -> int:
    import strata
    from strata_platform.serve import env_bool, read_token

    env, args, options = service_environment(argv, parse_args)
    vend = env_bool(env, "STRATA_ICEBERG_REST_VEND_S3", False)
    rest = IcebergRestCatalog(strata.load_catalog(args.warehouse, **options),
                              client_s3_config(options, env) if vend else {})
    token = read_token(env, "STRATA_ICEBERG_REST_TOKEN")
    server = start(rest, args.host, args.port, token)
    return serve_until_stopped(
        server, f"strata iceberg rest catalog ready on http://{args.host}:{server.server_port} "
                f"(warehouse {args.warehouse}, {'bearer token required' if token else 'no authentication'}, "
                f"S3 settings {'passed' if vend else 'not passed'} to clients)",
        "strata iceberg rest catalog stopped")


if __name__ == "__main__":
    raise SystemExit(main())
