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
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qs

import prometheus_client as prom

from strata.catalog import Catalog, load_catalog
from strata.errors import StrataError
from strata.lineage import consistent_set, lineage_graph, tag_consistent_set
from strata.store import Identifier
from strata_platform.http_service import (
    Answer,
    JsonHandler,
    JsonServer,
    RequestError,
    RequestMetrics,
    json_body,
    parse_service_args,
    serve,
    serve_until_stopped,
    service_environment,
    service_parser,
)

log = logging.getLogger("strata.metaservice")
DEFAULT_PORT = 19191
STATE_FILE = "_metaservice/state.json"
MAX_POINTS = 100  # tagged points remembered per pipeline
_PIPELINE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


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
class ServiceMetrics(RequestMetrics):
    def __init__(self) -> None:
        super().__init__("strata_metaservice")  # requests by method, endpoint and status, and their latency
        r = self.registry
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
            raise RequestError(400, f"pipeline name {name!r} must be letters, digits, '.', '_' or '-'")
        tables = body.get("tables")
        if not isinstance(tables, list) or not tables or not all(isinstance(t, str) for t in tables):
            raise RequestError(400, f"pipeline {name}: 'tables' must be a non-empty list of 'db.table' names")
        for table in tables:
            Identifier.parse(table)
            if not self.catalog.table_exists(table):
                raise RequestError(404, f"pipeline {name}: table {table} does not exist")
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
            raise RequestError(404, f"no pipeline {name!r} (registered: {', '.join(sorted(self.pipelines)) or '-'})")
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
                raise RequestError(409, f"pipeline {name} has no consistent snapshot set yet")
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

    @staticmethod
    def health() -> dict[str, Any]:
        return {"status": "ok"}

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


# (method, pattern of path segments, handler); '*' matches one segment
ROUTES: tuple[tuple[str, str, Route], ...] = (
    ("GET", "graph", lambda s, p, q, b: s.graph(_split(q.get("tables")))),
    ("GET", "pipelines", lambda s, p, q, b: {"pipelines": [vars(x) for x in s.pipelines.values()]}),
    ("PUT", "pipelines/*", lambda s, p, q, b: s.register(p[1], b)),
    ("DELETE", "pipelines/*", lambda s, p, q, b: s.forget(p[1])),
    ("GET", "pipelines/*/consistent", lambda s, p, q, b: s.consistent(p[1])),
    ("POST", "pipelines/*/tags", lambda s, p, q, b: s.tag(p[1])),
    ("GET", "pipelines/*/points", lambda s, p, q, b: s.points(p[1])),
)


def _split(values: list[str] | None) -> list[str] | None:
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()]
    return names or None


def _match(pattern: str, parts: list[str]) -> bool:
    want = pattern.split("/")
    return len(want) == len(parts) and all(w in ("*", p) for w, p in zip(want, parts, strict=True))


def _object_body(raw: bytes) -> dict[str, Any]:
    body = json_body(raw) if raw else {}
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    return body


class MetaServiceHandler(JsonHandler[MetaService]):
    server_version = "strata-metaservice"
    log = log

    def route(self, method: str, url: SplitResult) -> tuple[str, Answer]:
        parts = [p for p in url.path.split("/") if p]
        found = next(((pattern, handler) for verb, pattern, handler in ROUTES
                      if verb == method and _match(pattern, parts)), None)
        if found is None:
            raise RequestError(404, f"no route {method} {url.path}")
        (pattern, handler), service, query = found, self.server.service, parse_qs(url.query)
        return "/" + pattern.replace("*", "{name}"), lambda body: handler(service, parts, query, _object_body(body))

    def error_answer(self, exc: Exception) -> tuple[int, Any] | None:
        if isinstance(exc, RequestError):
            return exc.status, {"error": exc.message}
        if isinstance(exc, (StrataError, ValueError, KeyError)):
            return 400, {"error": f"{type(exc).__name__}: {exc}"}
        return None

    def failure_body(self, exc: Exception) -> Any:
        return {"error": f"{type(exc).__name__}: {exc}"}


def start(service: MetaService, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> JsonServer[MetaService]:
    """Serve `service` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    return serve(MetaServiceHandler, service, host, port, None, service.metrics, "metaservice-http")


# -- command line -------------------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    """Flags, defaulting to the environment of the other Strata services (``strata_platform.serve``:
    STRATA_WAREHOUSE, STRATA_CATALOG_OPTIONS, STRATA_JDBC_*, METRICS_HOST, METRICS_PORT)."""
    parser = service_parser("python -m strata_platform.metaservice", __doc__, env, "METRICS_HOST", "METRICS_PORT",
                            DEFAULT_PORT)
    parser.add_argument("--state", default=env.get("STRATA_METASERVICE_STATE") or None,
                        help=f"state document (default <warehouse>/{STATE_FILE})")
    parser.add_argument("--refresh-interval", type=float,
                        default=float(env.get("STRATA_METASERVICE_REFRESH_SECONDS") or 30.0),
                        help="seconds between lag refreshes")
    parser.add_argument("--tag-interval", type=float,
                        default=float(env.get("STRATA_METASERVICE_TAG_INTERVAL_SECONDS") or 0.0),
                        help="tag each pipeline's newest consistent point every S seconds (0: only on request)")
    return parse_service_args(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    _env, args, options = service_environment(argv, parse_args)
    service = MetaService(load_catalog(args.warehouse, **options), args.state)
    server = start(service, args.host, args.port)
    return serve_until_stopped(
        server, f"strata metaservice ready on http://{args.host}:{server.server_port} "
                f"({len(service.pipelines)} pipelines, state {service.store.path})",
        "strata metaservice stopped", interval=args.tag_interval or args.refresh_interval,
        every_interval=lambda: service.refresh(auto_tag=args.tag_interval > 0))


if __name__ == "__main__":
    raise SystemExit(main())
