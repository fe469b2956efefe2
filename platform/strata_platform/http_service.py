"""The HTTP layer Strata's JSON services share: the Iceberg and Paimon REST catalogs and the MetaService.

A service subclasses `JsonHandler` with what is its own (its routes in `route`, the shape of its
error bodies in `error_answer` and `failure_body`, its logger, its ``server_version``) and serves
its object with `serve`; everything else is answered here the same way for all of them:

- ``GET /health`` (the service's ``health()``: 200, or 503 when it raises) and ``GET /metrics``
  (Prometheus) need no token; every other request needs ``Authorization: Bearer <token>`` when
  the server has one (401 with ``WWW-Authenticate``; the token is compared in constant time and
  never logged), checked before anything about the request is answered and before its body is
  read;
- a handler's payload goes out as JSON with 200, `NO_CONTENT` as 204 without a body; HEAD
  answers carry the headers only;
- an error the service expects answers with its status and body; any other failure 500 with a
  body that `failure_body` words, and its trace goes to the service's log; a client that leaves
  before its answer is counted as 499;
- each request is counted and timed under ``<prefix>_requests_total`` and
  ``<prefix>_request_duration_seconds`` by method, endpoint label (the route's, never the raw
  path: a client cannot grow the metrics) and status, and logged once at INFO; http.server's
  own lines (malformed requests) go to DEBUG;
- HTTP/1.1 keep-alive (an idle connection holds its thread for `JsonHandler.timeout` seconds),
  TCP_NODELAY, request bodies up to `JsonHandler.max_body_bytes` (larger ones, and a
  Content-Length that is not one decimal number, are a 400); a connection whose request body
  was not read (refused before it) is closed after the answer.

The command-line scaffolding of such a service is here too: `service_parser` and
`parse_service_args` (warehouse, catalog options, host, port), `service_environment` (secrets,
logging, catalog options) and `serve_until_stopped` (SIGTERM/SIGINT, clean shutdown).
"""

from __future__ import annotations

import argparse
import hmac
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import SplitResult, parse_qs, unquote_plus, urlsplit

import prometheus_client as prom

from strata_platform.service_config import Stopper, catalog_options, load_secret_files, pairs

LATENCY_BUCKETS = (.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
NO_CONTENT: Any = object()  # a handler's payload for "204 No Content"


class RequestError(Exception):
    """A request the shared layer (or a service) refuses: HTTP `status` and a message for the
    client, worded into the service's error body by its `JsonHandler.error_answer`."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# -- requests, without HTTP -------------------------------------------------------------------------
def split_path(raw: str, check: Callable[[str, str], None] | None = None) -> list[str]:
    """Decoded segments of an absolute path (clients form-encode them: "+" is a space); 400 for a
    relative target or an empty or non-UTF-8 segment, and whatever `check(segment, decoded)` refuses."""
    if not raw.startswith("/"):
        raise RequestError(400, "the request target must be an absolute path")
    parts = raw.strip("/").split("/") if raw.strip("/") else []
    decoded = []
    for part in parts:
        if not part:
            raise RequestError(400, f"empty path segment in {raw!r}")
        try:
            value = unquote_plus(part, errors="strict")
        except UnicodeDecodeError:
            raise RequestError(400, f"path segment {part!r} is not UTF-8") from None
        if check is not None:
            check(part, value)
        decoded.append(value)
    return decoded


def query_values(query: str) -> dict[str, str]:
    """A query string's parameters, the last value of each (blank ones kept)."""
    return {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}


def json_body(raw: bytes) -> Any:
    """The JSON document a request carries; 400 when there is none or it is not JSON."""
    if not raw:
        raise RequestError(400, "the request needs a JSON body")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, f"the request body is not JSON: {exc}") from None


# -- metrics ----------------------------------------------------------------------------------------
class RequestMetrics:
    """Requests by method, endpoint and status, and their latency, as ``<prefix>_...`` in `registry`
    (a new one by default; a service may register its own metrics beside them)."""

    def __init__(self, prefix: str, registry: prom.CollectorRegistry | None = None):
        self.registry = registry or prom.CollectorRegistry()
        self.requests = prom.Counter(f"{prefix}_requests_total", "HTTP requests by endpoint and status",
                                     ["method", "endpoint", "status"], registry=self.registry)
        self.latency = prom.Histogram(f"{prefix}_request_duration_seconds", "Time to answer a request, by endpoint",
                                      ["method", "endpoint"], buckets=LATENCY_BUCKETS, registry=self.registry)

    def observe(self, method: str, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(method, endpoint, str(status)).inc()
        self.latency.labels(method, endpoint).observe(seconds)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


# -- HTTP -------------------------------------------------------------------------------------------
class Service(Protocol):
    def health(self) -> Any: ...


S = TypeVar("S", bound=Service)
Answer = Callable[[bytes], Any]  # the request's body -> the payload (JSON, or NO_CONTENT)


class JsonServer(ThreadingHTTPServer, Generic[S]):
    """Serves `service` with a `JsonHandler` subclass; `token`: the bearer token every endpoint but
    ``/health`` and ``/metrics`` requires (None: no authentication)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[JsonHandler[S]], service: S, token: str | None,
                 metrics: RequestMetrics):
        super().__init__(address, handler)
        self.service, self.token, self.metrics = service, token or None, metrics


class JsonHandler(BaseHTTPRequestHandler, Generic[S]):
    server: JsonServer[S]
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers (40 ms on Linux), on every keep-alive request after the first.
    disable_nagle_algorithm = True
    timeout = 120  # seconds an idle keep-alive connection holds its thread
    max_body_bytes = 16 << 20  # the largest request (a Paimon commit carries one snapshot: kilobytes)
    unauthorized_message = "a valid 'Authorization: Bearer <token>' header is required"
    log = logging.getLogger("strata.http")
    endpoint = "unknown"  # the metrics label of the request being answered
    body_read = False  # whether the request's body was consumed (else the connection closes after it)

    # -- what each service defines ------------------------------------------------------------------
    def route(self, method: str, url: SplitResult) -> tuple[str, Answer]:
        """The endpoint label of a request and the function that answers it; raises for a request
        that is not one of the service's (answered only once the request is authorized)."""
        raise NotImplementedError

    def error_answer(self, exc: Exception) -> tuple[int, Any] | None:
        """Status and body of an error the service expects (`RequestError` included); None for a failure."""
        raise NotImplementedError

    def failure_body(self, exc: Exception) -> Any:
        """The body of the 500 answer to an unexpected failure (whose trace goes to the log)."""
        raise NotImplementedError

    # -- the answer loop ----------------------------------------------------------------------------
    def do_GET(self) -> None:
        self._answer("GET")

    def do_HEAD(self) -> None:
        self._answer("HEAD")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def _answer(self, method: str) -> None:
        began = time.perf_counter()
        self.endpoint, status = "unknown", 500
        self.body_read = False
        try:
            try:
                status = self._dispatch(method)
            except (BrokenPipeError, ConnectionResetError):
                raise
            except Exception as exc:
                answer = self.error_answer(exc)
                if answer is None:  # the client gets what failure_body tells; the trace stays in the log
                    self.log.exception("%s %s failed", method, self.path)
                    answer = 500, self.failure_body(exc)
                status = self.send_json(*answer)
        except (BrokenPipeError, ConnectionResetError):  # the client left before the answer
            status = 499
            self.close_connection = True
        finally:
            if not self.body_read and self._announces_body():
                self.close_connection = True  # its unread body must not be taken for the next request
            seconds = time.perf_counter() - began
            self.server.metrics.observe(method, self.endpoint, status, seconds)
            self.log.info("%s %s %d %.1fms", method, self.path, status, seconds * 1000)

    def _dispatch(self, method: str) -> int:
        url = urlsplit(self.path)
        if method == "GET" and url.path == "/health":
            self.endpoint = "/health"
            return self._health()
        if method == "GET" and url.path == "/metrics":
            self.endpoint = "/metrics"
            return self.send_bytes(200, self.server.metrics.render(), prom.CONTENT_TYPE_LATEST)
        try:
            self.endpoint, answer = self.route(method, url)
        except Exception:  # what is wrong with the request is said only to a client that may know it
            self.authorize()
            raise
        self.authorize()  # before a byte of the body is read: a client without the token sends none
        payload = answer(self.read_body())
        if payload is NO_CONTENT:
            return self.send_bytes(204, b"", "application/json")
        return self.send_json(200, payload)

    def _announces_body(self) -> bool:
        length = self.headers.get("Content-Length")
        return (length is not None and length.strip() != "0") or "Transfer-Encoding" in self.headers

    def content_length(self) -> int:
        """The request's declared body size; 400 for one that is not a single decimal number
        (the body could not be delimited)."""
        values = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if not values:
            return 0
        length = values.pop()
        if values or not re.fullmatch(r"[0-9]{1,19}", length):
            raise RequestError(400, "Content-Length must be one decimal number of bytes, got "
                                    f"{self.headers.get_all('Content-Length')!r}"[:200])
        return int(length)

    def read_body(self) -> bytes:
        """The request's body, at most `max_body_bytes` (read only once the request is authorized)."""
        length = self.content_length()
        if length > self.max_body_bytes:
            raise RequestError(400, f"request body of {length} bytes is larger than {self.max_body_bytes}")
        self.body_read = True
        return self.rfile.read(length) if length > 0 else b""

    def authorize(self) -> None:
        token = self.server.token
        if not token:
            return
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise RequestError(401, self.unauthorized_message)

    def _health(self) -> int:
        try:
            return self.send_json(200, self.server.service.health())
        except Exception as exc:
            self.log.warning("health: the service is unavailable: %s: %s", type(exc).__name__, exc)
            return self.send_json(503, {"status": "unavailable", "error": type(exc).__name__})

    def send_json(self, status: int, payload: Any) -> int:
        return self.send_bytes(status, json.dumps(payload).encode(), "application/json")

    def send_bytes(self, status: int, data: bytes, content_type: str) -> int:
        self.send_response(status)
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="strata"')
        if status != 204:
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
        if not self.body_read and self._announces_body():
            # the unread body must not be taken for the next request: say the connection ends here,
            # or a client reusing it meets a closed socket (Java's NoHttpResponseException)
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and status != 204:
            self.wfile.write(data)
        return status

    # -- quiet logs ---------------------------------------------------------------------------------
    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        self.log.debug(format, *args)  # http.server's own lines (malformed requests); no headers in them

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass  # _answer logs each request once, with its status and duration


def serve(handler: type[JsonHandler[S]], service: S, host: str, port: int, token: str | None,
          metrics: RequestMetrics, thread_name: str) -> JsonServer[S]:
    """Serve `service` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    server = JsonServer((host, port), handler, service, token, metrics)
    threading.Thread(target=server.serve_forever, name=thread_name, daemon=True).start()
    return server


# -- command line -----------------------------------------------------------------------------------
def service_parser(prog: str, description: str | None, env: Mapping[str, str], host_variable: str,
                   port_variable: str, default_port: int) -> argparse.ArgumentParser:
    """The flags every warehouse service takes (``--warehouse``, ``--option``, ``--host``,
    ``--port``), defaulting to the environment; the service adds its own."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default=env.get("STRATA_WAREHOUSE") or None,
                        help="warehouse path or URI (default $STRATA_WAREHOUSE)")
    parser.add_argument("--option", action="append", default=[], help="catalog option key=value (repeatable)")
    parser.add_argument("--host", default=env.get(host_variable) or "127.0.0.1")
    parser.add_argument("--port", type=int, default=int(env.get(port_variable) or default_port))
    return parser


def parse_service_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    args = parser.parse_args(argv)
    if not args.warehouse:
        parser.error("--warehouse (or STRATA_WAREHOUSE) is required")
    return args


ParseArgs = Callable[[Sequence[str] | None, Mapping[str, str]], argparse.Namespace]


def service_environment(argv: Sequence[str] | None,
                        parse_args: ParseArgs) -> tuple[dict[str, str], argparse.Namespace, dict[str, str]]:
    """The environment (secrets read from their files), the parsed flags and the catalog options
    (``STRATA_CATALOG_OPTIONS`` and the JDBC variables, then ``--option``); logging set up."""
    env = dict(os.environ)
    load_secret_files(env)
    args = parse_args(argv, env)
    logging.basicConfig(level=env.get("STRATA_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return env, args, {**catalog_options(env), **pairs(",".join(args.option))}


def serve_until_stopped(server: ThreadingHTTPServer, ready: str, stopped: str, interval: float | None = None,
                        every_interval: Callable[[], None] | None = None) -> int:
    """Print `ready`, run `every_interval` every `interval` seconds until SIGTERM or SIGINT, then
    stop serving, print `stopped` and return the exit status (0)."""
    stopper = Stopper().install()
    print(ready, flush=True)
    while not stopper.wait(interval):
        if every_interval is not None:
            every_interval()
    server.shutdown()
    server.server_close()
    print(stopped, flush=True)
    return 0
