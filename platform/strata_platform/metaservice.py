"""The MetaService (FLIP-276): pipeline lineage and consistent snapshot sets over HTTP.

``python -m strata_platform.metaservice --warehouse W [--option k=v ...] [--port 19191]`` (or the
environment of the other Strata services, see ``parse_args``; in the stack: the strata image with
this module as its entrypoint; ``serve health`` checks it through METRICS_PORT, since it serves
``/metrics`` there too)

Lineage itself lives in the tables (snapshot properties, ``strata.lineage``); the service keeps
only its registry of *pipelines* (named lists of tables) and the consistent points it tagged, in
one JSON document in the warehouse (``<warehouse>/_metaservice/state.json``, or ``--state``). It
rewrites that document after every change, so a restarted service (or a second replica reading
the same warehouse) carries on without loss.

HTTP API (JSON; loopback by default):

``GET    /health``                       ``{"status": "ok"}``
``GET    /metrics``                      Prometheus text
``GET    /graph[?tables=db.a,db.b]``     jobs, tables, edges with lag (``strata.lineage.graph``)
``GET    /pipelines``                    the registered pipelines
``PUT    /pipelines/<name>``             register: ``{"tables": ["db.a", ...], "tag_prefix": "lineage"}``
``DELETE /pipelines/<name>``             forget (tags stay on the tables)
``GET    /pipelines/<name>/consistent``  the newest consistent snapshot set, computed now
``POST   /pipelines/<name>/tags``        tag the newest consistent point on every table of the
                                         pipeline (Trino then reads it with ``scan_tag_name``)
``GET    /pipelines/<name>/points``      the points tagged so far

With ``--tag-interval S`` the service tags every pipeline's newest point every S seconds and keeps
the lag gauges fresh; tags then expire by the tables' own ``tag.*`` retention options.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import prometheus_client as prom

from strata.catalog import Catalog, load_catalog
from strata.errors import StrataError
from strata.lineage import consistent_set, lineage_graph, tag_consistent_set
from strata.store import Identifier

log = logging.getLogger("strata.metaservice")
DEFAULT_PORT = 19191
STATE_FILE = "_metaservice/state.json"
MAX_POINTS = 100  # tagged points remembered per pipeline
_PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RequestError(ValueError):
    """A bad request: answered with HTTP `status` and the message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


# -- state ----------------------------------------------------------------------------------------
@dataclass
class Pipeline:
    name: str
    tables: list[str]
    tag_prefix: str = "lineage"
    points: list[dict[str, Any]] = field(default_factory=list)  # tagged points, oldest first


class StateStore:
    """The pipelines, as one JSON document written whole (atomic on local files and object stores)."""

    def __init__(self, catalog: Catalog, path: str | None = None):
        located: Any = catalog  # every Strata catalog keeps its tables under a warehouse FileIO
        self.file_io = located.file_io
        self.path = path or f"{located.warehouse}/{STATE_FILE}"

    def load(self) -> dict[str, Pipeline]:
        try:
            doc = json.loads(self.file_io.read_bytes(self.path))
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            raise StrataError(f"metaservice state {self.path} is not valid JSON: {exc}") from None
        return {p["name"]: Pipeline(p["name"], list(p["tables"]), p.get("tag_prefix", "lineage"),
                                    list(p.get("points", []))) for p in doc.get("pipelines", [])}

    def save(self, pipelines: Mapping[str, Pipeline]) -> None:
        doc = {"version": 1, "pipelines": [vars(p) for p in pipelines.values()]}
        self.file_io.write_bytes(self.path, json.dumps(doc, indent=2).encode())


# -- metrics ----------------------------------------------------------------------------------------
class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.requests = prom.Counter("strata_metaservice_requests_total", "HTTP requests by route and status",
                                     ["route", "status"], registry=r)
        self.pipelines = prom.Gauge("strata_metaservice_pipelines", "Registered pipelines", registry=r)
        self.tags = prom.Counter("strata_metaservice_tags_created_total", "Consistent points tagged",
                                 ["pipeline"], registry=r)
        self.point_age = prom.Gauge("strata_metaservice_consistent_point_age_seconds",
                                    "Age of the newest consistent point: now - the newest commit time of "
                                    "the snapshots in it", ["pipeline"], registry=r)
        self.lag_snapshots = prom.Gauge("strata_lineage_lag_snapshots", "Upstream snapshots not yet consumed",
                                        ["table", "source"], registry=r)
        self.lag_seconds = prom.Gauge("strata_lineage_lag_seconds",
                                      "How long the oldest unconsumed upstream snapshot has waited",
                                      ["table", "source"], registry=r)
        self.refresh_errors = prom.Counter("strata_metaservice_refresh_errors_total",
                                           "Failed background refreshes", registry=r)

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


# -- the service ------------------------------------------------------------------------------------
class MetaService:
    def __init__(self, catalog: Catalog, state_path: str | None = None):
        self.catalog = catalog
        self.store = StateStore(catalog, state_path)
        self.metrics = ServiceMetrics()
        self.lock = threading.Lock()
        self.pipelines = self.store.load()
        self.metrics.pipelines.set(len(self.pipelines))

    def register(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if not _PIPELINE_NAME.match(name):
            raise RequestError(f"pipeline name {name!r} must be letters, digits, '.', '_' or '-'")
        tables = body.get("tables")
        if not isinstance(tables, list) or not tables or not all(isinstance(t, str) for t in tables):
            raise RequestError(f"pipeline {name}: 'tables' must be a non-empty list of 'db.table' names")
        for table in tables:
            Identifier.parse(table)
            if not self.catalog.table_exists(table):
                raise RequestError(f"pipeline {name}: table {table} does not exist", 404)
        prefix = str(body.get("tag_prefix") or "lineage")
        with self.lock:
            old = self.pipelines.get(name)
            self.pipelines[name] = Pipeline(name, list(tables), prefix, old.points if old else [])
            self.store.save(self.pipelines)
            self.metrics.pipelines.set(len(self.pipelines))
        return vars(self.pipelines[name])

    def forget(self, name: str) -> dict[str, Any]:
        with self.lock:
            pipeline = self._pipeline(name)
            del self.pipelines[name]
            self.store.save(self.pipelines)
            self.metrics.pipelines.set(len(self.pipelines))
        return {"deleted": pipeline.name}

    def _pipeline(self, name: str) -> Pipeline:
        if name not in self.pipelines:
            raise RequestError(f"no pipeline {name!r} (registered: {', '.join(sorted(self.pipelines)) or '-'})",
                               404)
        return self.pipelines[name]

    def consistent(self, name: str) -> dict[str, Any]:
        pipeline = self._pipeline(name)
        tables = [self.catalog.get_table(t) for t in pipeline.tables]
        cset = consistent_set(tables)
        if cset is None:
            return {"pipeline": name, "consistent": None}
        self._observe_age(name, tables, cset.snapshots)
        return {"pipeline": name, "consistent": {**cset.to_dict(), "tag": cset.tag_name(pipeline.tag_prefix)}}

    def tag(self, name: str) -> dict[str, Any]:
        """Tag the newest consistent point of a pipeline (a no-op when it is already tagged)."""
        with self.lock:
            pipeline = self._pipeline(name)
            tables = [self.catalog.get_table(t) for t in pipeline.tables]
            cset = consistent_set(tables)
            if cset is None:
                raise RequestError(f"pipeline {name} has no consistent snapshot set yet", 409)
            tag = tag_consistent_set(tables, cset, pipeline.tag_prefix)
            self._observe_age(name, tables, cset.snapshots)
            if pipeline.points and pipeline.points[-1]["tag"] == tag:
                return {**pipeline.points[-1], "created": False}
            point = {"tag": tag, "point": cset.point, "snapshots": cset.snapshots,
                     "tagged_at_millis": int(time.time() * 1000)}
            pipeline.points = [*pipeline.points, point][-MAX_POINTS:]
            self.store.save(self.pipelines)
            self.metrics.tags.labels(name).inc()
        return {**point, "created": True}

    def points(self, name: str) -> dict[str, Any]:
        return {"pipeline": name, "points": list(self._pipeline(name).points)}

    def graph(self, tables: Sequence[str] | None = None) -> dict[str, Any]:
        graph = lineage_graph(self.catalog, tables)
        for edge in graph.edges:
            if edge.behind_snapshots is not None:
                self.metrics.lag_snapshots.labels(edge.target, edge.source).set(edge.behind_snapshots)
                self.metrics.lag_seconds.labels(edge.target, edge.source).set((edge.behind_millis or 0) / 1000)
        return graph.to_dict()

    def _observe_age(self, name: str, tables: Sequence[Any], snapshots: Mapping[str, int]) -> None:
        newest = max(t.snapshot_manager.snapshot(snapshots[str(t.identifier)]).time_millis for t in tables)
        self.metrics.point_age.labels(name).set(max(0.0, time.time() - newest / 1000))

    def refresh(self, auto_tag: bool) -> None:
        """One background round: lag gauges, and (with `auto_tag`) each pipeline's newest point."""
        try:
            self.graph()
            for name in list(self.pipelines):
                if auto_tag:
                    try:
                        self.tag(name)
                    except RequestError as exc:
                        log.info("%s", exc)
                else:
                    self.consistent(name)
        except Exception:
            self.metrics.refresh_errors.inc()
            log.exception("metaservice refresh failed")


# -- HTTP -------------------------------------------------------------------------------------------
Route = Callable[[MetaService, list[str], dict[str, list[str]], dict[str, Any]], Any]


def _routes() -> list[tuple[str, str, Route]]:
    """(method, pattern of path segments, handler); '*' matches one segment."""
    return [
        ("GET", "graph", lambda s, p, q, b: s.graph(_split(q.get("tables")))),
        ("GET", "pipelines", lambda s, p, q, b: {"pipelines": [vars(x) for x in s.pipelines.values()]}),
        ("PUT", "pipelines/*", lambda s, p, q, b: s.register(p[1], b)),
        ("DELETE", "pipelines/*", lambda s, p, q, b: s.forget(p[1])),
        ("GET", "pipelines/*/consistent", lambda s, p, q, b: s.consistent(p[1])),
        ("POST", "pipelines/*/tags", lambda s, p, q, b: s.tag(p[1])),
        ("GET", "pipelines/*/points", lambda s, p, q, b: s.points(p[1])),
    ]


def _split(values: list[str] | None) -> list[str] | None:
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()]
    return names or None


def _match(pattern: str, parts: list[str]) -> bool:
    want = pattern.split("/")
    return len(want) == len(parts) and all(w in ("*", p) for w, p in zip(want, parts, strict=True))


def make_handler(service: MetaService) -> type[BaseHTTPRequestHandler]:
    routes = _routes()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: Any) -> None:
            log.debug(fmt, *args)

        def _answer(self, method: str) -> None:
            url = urlsplit(self.path)
            parts = [p for p in url.path.split("/") if p]
            if method == "GET" and parts == ["health"]:
                return self._send(200, "health", {"status": "ok"})
            if method == "GET" and parts == ["metrics"]:
                return self._send_bytes(200, "metrics", service.metrics.render(), prom.CONTENT_TYPE_LATEST)
            for verb, pattern, handler in routes:
                if verb == method and _match(pattern, parts):
                    return self._call(pattern, handler, parts, parse_qs(url.query))
            return self._send(404, "unknown", {"error": f"no route {method} {url.path}"})

        def _call(self, route: str, handler: Route, parts: list[str], query: dict[str, list[str]]) -> None:
            try:
                body = self._body()
                self._send(200, route, handler(service, parts, query, body))
            except RequestError as exc:
                self._send(exc.status, route, {"error": str(exc)})
            except (StrataError, ValueError, KeyError) as exc:
                self._send(400, route, {"error": f"{type(exc).__name__}: {exc}"})
            except Exception as exc:  # keep serving; the log has the trace
                log.exception("%s %s failed", self.command, self.path)
                self._send(500, route, {"error": f"{type(exc).__name__}: {exc}"})

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if not length:
                return {}
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as exc:
                raise RequestError(f"request body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise RequestError("request body must be a JSON object")
            return body

        def _send(self, status: int, route: str, payload: Any) -> None:
            self._send_bytes(status, route, json.dumps(payload).encode(), "application/json")

        def _send_bytes(self, status: int, route: str, data: bytes, content_type: str) -> None:
            service.metrics.requests.labels(route, str(status)).inc()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # http.server dispatches to do_<METHOD>
        def do_GET(self) -> None:
            self._answer("GET")

        def do_PUT(self) -> None:
            self._answer("PUT")

        def do_POST(self) -> None:
            self._answer("POST")

        def do_DELETE(self) -> None:
            self._answer("DELETE")

    return Handler


def start(service: MetaService, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> ThreadingHTTPServer:
    """Serve `service` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    server = ThreadingHTTPServer((host, port), make_handler(service))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metaservice-http", daemon=True).start()
    return server


# -- command line -------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    """Flags, defaulting to the environment of the other Strata services (``strata_platform.serve``:
    STRATA_WAREHOUSE, STRATA_CATALOG_OPTIONS, STRATA_JDBC_*, METRICS_HOST, METRICS_PORT)."""
    parser = argparse.ArgumentParser(prog="python -m strata_platform.metaservice", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--warehouse", default=env.get("STRATA_WAREHOUSE") or None,
                        help="warehouse path or URI (default $STRATA_WAREHOUSE)")
    parser.add_argument("--option", action="append", default=[], help="catalog option key=value (repeatable)")
    parser.add_argument("--state", default=env.get("STRATA_METASERVICE_STATE") or None,
                        help=f"state document (default <warehouse>/{STATE_FILE})")
    parser.add_argument("--host", default=env.get("METRICS_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env.get("METRICS_PORT") or DEFAULT_PORT))
    parser.add_argument("--refresh-interval", type=float,
                        default=float(env.get("STRATA_METASERVICE_REFRESH_SECONDS") or 30.0),
                        help="seconds between lag refreshes")
    parser.add_argument("--tag-interval", type=float,
                        default=float(env.get("STRATA_METASERVICE_TAG_INTERVAL_SECONDS") or 0.0),
                        help="tag each pipeline's newest consistent point every S seconds (0: only on request)")
    args = parser.parse_args(argv)
    if not args.warehouse:
        parser.error("--warehouse (or STRATA_WAREHOUSE) is required")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from strata_platform.serve import catalog_options, load_secret_files, pairs

    env = dict(os.environ)
    load_secret_files(env)
    args = parse_args(argv, env)
    logging.basicConfig(level=env.get("STRATA_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = {**catalog_options(env), **pairs(",".join(args.option))}
    service = MetaService(load_catalog(args.warehouse, **options), args.state)
    server = start(service, args.host, args.port)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    interval = args.tag_interval or args.refresh_interval
    print(f"strata metaservice ready on http://{args.host}:{server.server_port} "
          f"({len(service.pipelines)} pipelines, state {service.store.path})", flush=True)
    while not stop.wait(interval):
        service.refresh(auto_tag=args.tag_interval > 0)
    server.shutdown()
    print("strata metaservice stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
