"""HTTP for the Paimon REST catalog: routes, bearer token, metrics, the command line."""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlsplit

import prometheus_client as prom

from strata_platform.paimon_rest.catalog import PaimonRestCatalog, RestError, bad_request, not_found

log = logging.getLogger("strata.paimon_rest")

DEFAULT_PORT = 19193
MAX_BODY_BYTES = 16 << 20  # a commit carries one snapshot: kilobytes

Handler = Callable[[PaimonRestCatalog, list[str], dict[str, str], Any], Any]


@dataclass(frozen=True)
class Route:
    """`pattern`: path segments after ``/v1/{prefix}``; "*" is a parameter."""

    method: str
    pattern: tuple[str, ...]
    handler: Handler
    status: int = 200  # answers without a body are 200 with an empty object, as Paimon's server

    @property
    def label(self) -> str:
        names = iter(("{database}", "{table}", "{name}"))
        return "/v1/{prefix}/" + "/".join(next(names) if part == "*" else part for part in self.pattern)

    def match(self, method: str, parts: list[str]) -> bool:
        return method == self.method and len(parts) == len(self.pattern) and all(
            want in ("*", got) for want, got in zip(self.pattern, parts, strict=True))


def _empty(action: Callable[[], None]) -> dict[str, Any]:
    action()
    return {}


def _not_implemented(what: str) -> Handler:
    def answer(c: PaimonRestCatalog, p: list[str], q: dict[str, str], b: Any) -> Any:
        raise RestError(501, f"{what} is not supported by Strata's Paimon REST catalog")
    return answer


DB, T = ("databases", "*"), ("tables", "*")
ROUTES: tuple[Route, ...] = (
    Route("GET", ("databases",), lambda c, p, q, b: c.list_databases(q.get("databaseNamePattern"))),
    Route("POST", ("databases",), lambda c, p, q, b: _empty(lambda: c.create_database(b))),
    Route("GET", DB, lambda c, p, q, b: c.get_database(p[1])),
    Route("POST", DB, lambda c, p, q, b: c.alter_database(p[1], b)),
    Route("DELETE", DB, lambda c, p, q, b: _empty(lambda: c.drop_database(p[1]))),
    Route("GET", (*DB, "tables"), lambda c, p, q, b: c.list_tables(p[1], q.get("tableNamePattern"))),
    Route("POST", (*DB, "tables"), lambda c, p, q, b: _empty(lambda: c.create_table(p[1], b))),
    Route("GET", (*DB, "table-details"), lambda c, p, q, b: c.list_table_details(p[1], q.get("tableNamePattern"))),
    Route("GET", (*DB, *T), lambda c, p, q, b: c.get_table(p[1], p[3])),
    Route("POST", (*DB, *T), lambda c, p, q, b: _empty(lambda: c.alter_table(p[1], p[3], b))),
    Route("DELETE", (*DB, *T), lambda c, p, q, b: _empty(lambda: c.drop_table(p[1], p[3]))),
    Route("POST", ("tables", "rename"), lambda c, p, q, b: _empty(lambda: c.rename_table(b))),
    Route("POST", (*DB, *T, "commit"), lambda c, p, q, b: c.commit(p[1], p[3], b)),
    Route("GET", (*DB, *T, "snapshot"), lambda c, p, q, b: c.latest_snapshot(p[1], p[3])),
    Route("GET", (*DB, *T, "snapshots", "*"), lambda c, p, q, b: c.snapshot(p[1], p[3], p[5])),
    Route("GET", (*DB, *T, "partitions"),
          lambda c, p, q, b: c.list_partitions(p[1], p[3], q.get("partitionNamePattern"))),
    Route("GET", (*DB, *T, "token"), lambda c, p, q, b: c.table_token(p[1], p[3])),
    Route("GET", (*DB, *T, "branches"), lambda c, p, q, b: c.list_branches(p[1], p[3])),
    Route("POST", (*DB, *T, "branches"), lambda c, p, q, b: _empty(lambda: c.create_branch(p[1], p[3], b))),
    Route("DELETE", (*DB, *T, "branches", "*"), lambda c, p, q, b: _empty(lambda: c.drop_branch(p[1], p[3], p[5]))),
    Route("POST", (*DB, *T, "branches", "*", "forward"),
          lambda c, p, q, b: _empty(lambda: c.forward_branch(p[1], p[3], p[5]))),
    # Strata has no views or functions: empty lists, and 404 for one by name
    Route("GET", (*DB, "views"), lambda c, p, q, b: {"views": [], "nextPageToken": None}
          if c.database(p[1]) else None),
    Route("GET", (*DB, "views", "*"), lambda c, p, q, b: _no_such("VIEW", c, p)),
    Route("GET", (*DB, "functions"), lambda c, p, q, b: {"functions": [], "nextPageToken": None}
          if c.database(p[1]) else None),
    Route("GET", (*DB, "functions", "*"), lambda c, p, q, b: _no_such("FUNCTION", c, p)),
    Route("POST", (*DB, *T, "rollback"), _not_implemented("rollback")),
    Route("POST", (*DB, "register"), _not_implemented("registering a table by path")),
    Route("POST", (*DB, *T, "partitions", "mark"), _not_implemented("marking partitions done")),
    Route("POST", (*DB, *T, "auth"), _not_implemented("table query authorization")),
)


def _no_such(kind: str, c: PaimonRestCatalog, p: list[str]) -> Any:
    database = c.database(p[1])
    raise not_found(kind, f"{database}.{p[3]}", f"{kind.lower()} {database}.{p[3]} does not exist")


def split_path(raw: str) -> list[str]:
    """Decoded path segments (clients form-encode them: a space is "+"); 400 for an empty or
    undecodable segment. What a decoded name may hold is the name checks' to decide."""
    parts = raw.strip("/").split("/") if raw.strip("/") else []
    decoded = []
    for part in parts:
        if not part:
            raise bad_request(f"empty path segment in {raw!r}")
        try:
            decoded.append(unquote_plus(part, errors="strict"))
        except UnicodeDecodeError:
            raise bad_request(f"path segment {part!r} is not UTF-8") from None
    return decoded


# -- metrics ----------------------------------------------------------------------------------------
class RestMetrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        self.requests = prom.Counter("strata_paimon_rest_requests_total", "HTTP requests by endpoint and status",
                                     ["method", "endpoint", "status"], registry=self.registry)
        self.latency = prom.Histogram("strata_paimon_rest_request_duration_seconds",
                                      "Time to answer a request, by endpoint", ["method", "endpoint"],
                                      buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
                                      registry=self.registry)

    def observe(self, method: str, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(method, endpoint, str(status)).inc()
        self.latency.labels(method, endpoint).observe(seconds)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


# -- HTTP -------------------------------------------------------------------------------------------
class RestServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], rest: PaimonRestCatalog, token: str | None):
        super().__init__(address, RestHandler)
        self.rest, self.token = rest, token
        self.metrics = RestMetrics()


class RestHandler(BaseHTTPRequestHandler):
    server: RestServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the body must not wait for the client's delayed ACK of the headers
    timeout = 120
    server_version = "strata-paimon-rest"

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _answer logs each request once

    def do_GET(self) -> None:
        self._answer("GET")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def _answer(self, method: str) -> None:
        began = time.perf_counter()
        endpoint, status = "unknown", 500
        try:
            raw_body = self._read_body()
            url = urlsplit(self.path)
            if method == "GET" and url.path in ("/health", "/metrics"):
                endpoint = url.path
                status = self._health() if url.path == "/health" else self._send(
                    200, self.server.metrics.render(), prom.CONTENT_TYPE_LATEST)
                return
            try:
                self._authorize()  # before anything about the request is answered
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                endpoint, payload = self._dispatch(method, url.path, query, raw_body)
                status = self._send_json(200, payload)
            except RestError as exc:
                status = self._send_json(exc.code, exc.body())
        except (BrokenPipeError, ConnectionResetError):
            status = 499
            self.close_connection = True
        except Exception as exc:  # the client gets the class only; the trace stays in the log
            log.exception("%s %s failed", method, self.path)
            error = RestError(500, f"{type(exc).__name__} (see the catalog server's log)")
            status = self._send_json(500, error.body())
        finally:
            seconds = time.perf_counter() - began
            self.server.metrics.observe(method, endpoint, status, seconds)
            log.info("%s %s %d %.1fms", method, self.path, status, seconds * 1000)

    def _dispatch(self, method: str, path: str, query: dict[str, str], raw_body: bytes) -> tuple[str, Any]:
        parts = split_path(path)
        rest = self.server.rest
        if parts == ["v1", "config"] and method == "GET":
            return "/v1/config", rest.config(query.get("warehouse"))
        if len(parts) < 3 or parts[0] != "v1":
            raise bad_request(f"{method} {path} is not an endpoint of this catalog")
        if parts[1] != rest.prefix:
            raise not_found("WAREHOUSE", parts[1], f"warehouse prefix {parts[1]!r} is not served here "
                                                   f"(GET /v1/config names it: {rest.prefix!r})")
        route = next((r for r in ROUTES if r.match(method, parts[2:])), None)
        if route is None:
            raise bad_request(f"{method} {path} is not an endpoint of this catalog")
        body = self._json_body(raw_body) if method == "POST" else None
        return route.label, route.handler(rest, parts[2:], query, body)

    @staticmethod
    def _json_body(raw: bytes) -> Any:
        if not raw:
            raise bad_request("the request needs a JSON body")
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError) as exc:
            raise bad_request(f"the request body is not JSON: {exc}") from None

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            raise bad_request(f"request body of {length} bytes is larger than {MAX_BODY_BYTES}")
        return self.rfile.read(length) if length > 0 else b""

    def _authorize(self) -> None:
        token = self.server.token
        if not token:
            return
        header = self.headers.get("Authorization") or ""
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise RestError(401, "a valid 'Authorization: Bearer <token>' header is required "
                                 "(Paimon: token.provider=bear, token=<token>)")

    def _health(self) -> int:
        try:
            return self._send_json(200, self.server.rest.health())
        except Exception as exc:
            log.warning("health: the catalog cannot be listed: %s: %s", type(exc).__name__, exc)
            return self._send_json(503, {"status": "unavailable", "error": type(exc).__name__})

    def _send_json(self, status: int, payload: Any) -> int:
        return self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> int:
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="strata"')
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        return status


def start(rest: PaimonRestCatalog, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          token: str | None = None) -> RestServer:
    """Serve `rest` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    server = RestServer((host, port), rest, token or None)
    threading.Thread(target=server.serve_forever, name="paimon-rest-http", daemon=True).start()
    return server


# -- command line -------------------------------------------------------------------------------------
def vended_s3_options(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Paimon's S3 file IO options for the S3 settings this server itself uses."""
    from strata_platform.serve import s3_settings

    s3 = s3_settings(options, env)
    names = {"endpoint": "s3.endpoint", "access-key": "s3.access-key", "secret-key": "s3.secret-key",
             "session-token": "s3.session-token", "region": "s3.region", "path-style-access": "s3.path.style.access"}
    return {names[key]: value for key, value in s3.items() if value}


def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    from strata_platform import paimon_rest

    parser = argparse.ArgumentParser(prog="python -m strata_platform.paimon_rest", description=paimon_rest.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default=env.get("STRATA_WAREHOUSE") or None,
                        help="warehouse path or URI (default $STRATA_WAREHOUSE)")
    parser.add_argument("--option", action="append", default=[], help="catalog option key=value (repeatable)")
    parser.add_argument("--host", default=env.get("STRATA_PAIMON_REST_HOST") or "127.0.0.1")
    parser.add_argument("--port", type=int, default=int(env.get("STRATA_PAIMON_REST_PORT") or DEFAULT_PORT))
    parser.add_argument("--name", default=env.get("STRATA_PAIMON_REST_WAREHOUSE_NAME") or "strata",
                        help="the warehouse name clients give as 'warehouse' (the path prefix)")
    args = parser.parse_args(argv)
    if not args.warehouse:
        parser.error("--warehouse (or STRATA_WAREHOUSE) is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    import strata
    from strata_platform.serve import catalog_options, env_bool, load_secret_files, pairs, read_token

    env = dict(os.environ)
    load_secret_files(env)
    args = parse_args(argv, env)
    logging.basicConfig(level=env.get("STRATA_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = {**catalog_options(env), **pairs(",".join(args.option))}
    vend = env_bool(env, "STRATA_PAIMON_REST_VEND_S3", False)
    rest = PaimonRestCatalog(strata.load_catalog(args.warehouse, **options), prefix=args.name,
                             token_options=vended_s3_options(options, env) if vend else None)
    token = read_token(env, "STRATA_PAIMON_REST_TOKEN")
    server = start(rest, args.host, args.port, token)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    print(f"strata paimon rest catalog ready on http://{args.host}:{server.server_port} "
          f"(warehouse {args.warehouse} as {args.name!r}, "
          f"{'bearer token required' if token else 'no authentication'}, "
          f"S3 credentials {'vended through the data token endpoint' if vend else 'not vended'})", flush=True)
    stop.wait()
    server.shutdown()
    server.server_close()
    print("strata paimon rest catalog stopped", flush=True)
    return 0
