"""HTTP for the Paimon REST catalog: routes, bearer token, metrics, the command line."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult

from strata.errors import CommitStateUnknownError
from strata_platform.http_service import (
    Answer,
    JsonHandler,
    JsonServer,
    RequestError,
    RequestMetrics,
    json_body,
    parse_service_args,
    query_values,
    serve,
    serve_until_stopped,
    service_environment,
    service_parser,
    split_path,
)
from strata_platform.paimon_rest.catalog import PaimonRestCatalog, RestError, not_found

log = logging.getLogger("strata.paimon_rest")

DEFAULT_PORT = 19193
RestServer = JsonServer[PaimonRestCatalog]

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
    Route("POST", (*DB, *T, "branches", "*", "rename"),
          lambda c, p, q, b: _empty(lambda: c.rename_branch(p[1], p[3], p[5], b))),
    Route("POST", (*DB, *T, "branches", "*", "forward"),
          lambda c, p, q, b: _empty(lambda: c.forward_branch(p[1], p[3], p[5]))),
    # Strata has no views or functions: empty lists, and 404 for one by name
    Route("GET", (*DB, "views"), lambda c, p, q, b: {"views": [], "nextPageToken": None}
          if c.database(p[1]) else None),
    Route("GET", (*DB, "views", "*"), lambda c, p, q, b: _no_such("VIEW", c, p)),
    Route("GET", (*DB, "functions"), lambda c, p, q, b: {"functions": [], "nextPageToken": None}
          if c.database(p[1]) else None),
    Route("GET", (*DB, "functions", "*"), lambda c, p, q, b: _no_such("FUNCTION", c, p)),
    Route("POST", (*DB, *T, "rollback"), lambda c, p, q, b: c.rollback(p[1], p[3], b)),
    Route("GET", (*DB, *T, "tags"), lambda c, p, q, b: c.list_tags(p[1], p[3], q.get("tagNamePrefix"))),
    Route("POST", (*DB, *T, "tags"), lambda c, p, q, b: _empty(lambda: c.create_tag(p[1], p[3], b))),
    Route("GET", (*DB, *T, "tags", "*"), lambda c, p, q, b: c.get_tag(p[1], p[3], p[5])),
    Route("DELETE", (*DB, *T, "tags", "*"), lambda c, p, q, b: _empty(lambda: c.delete_tag(p[1], p[3], p[5]))),
)


def not_served(method: str, path: str) -> RestError:
    return RestError(501, f"{method} {path} is not supported by Strata's Paimon REST catalog")


def _no_such(kind: str, c: PaimonRestCatalog, p: list[str]) -> Any:
    database = c.database(p[1])
    raise not_found(kind, f"{database}.{p[3]}", f"{kind.lower()} {database}.{p[3]} does not exist")


# -- HTTP -------------------------------------------------------------------------------------------
class PaimonRestHandler(JsonHandler[PaimonRestCatalog]):
    server_version = "strata-paimon-rest"
    unauthorized_message = f"{JsonHandler.unauthorized_message} (Paimon: token.provider=bear, token=<token>)"
    log = log

    def route(self, method: str, url: SplitResult) -> tuple[str, Answer]:
        # what a decoded name may hold is the catalog's name checks' to decide
        parts, rest, query = split_path(url.path), self.server.service, query_values(url.query)
        if parts == ["v1", "config"] and method == "GET":
            return "/v1/config", lambda body: rest.config(query.get("warehouse"))
        if len(parts) < 3 or parts[0] != "v1":
            raise not_served(method, url.path)
        if parts[1] != rest.prefix:
            raise not_found("WAREHOUSE", parts[1], f"warehouse prefix {parts[1]!r} is not served here "
                                                   f"(GET /v1/config names it: {rest.prefix!r})")
        route = next((r for r in ROUTES if r.match(method, parts[2:])), None)
        if route is None:  # the clients fall back on 501 only (Java: NotImplementedException)
            raise not_served(method, url.path)
        return route.label, lambda body: route.handler(rest, parts[2:], query,
                                                       json_body(body) if method == "POST" else None)

    def error_answer(self, exc: Exception) -> tuple[int, Any] | None:
        if isinstance(exc, RequestError):
            exc = RestError(exc.status, exc.message)
        elif isinstance(exc, CommitStateUnknownError):  # an error, not success false: clients keep their files
            log.warning("%s", exc)
            exc = RestError(500, f"outcome unknown: {exc}")
        return (exc.code, exc.body()) if isinstance(exc, RestError) else None

    def failure_body(self, exc: Exception) -> Any:
        return RestError(500, f"{type(exc).__name__} (see the catalog server's log)").body()


def start(rest: PaimonRestCatalog, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          token: str | None = None) -> RestServer:
    """Serve `rest` from a daemon thread; port 0 picks a free port (``server.server_port``)."""
    return serve(PaimonRestHandler, rest, host, port, token, RequestMetrics("strata_paimon_rest"), "paimon-rest-http")


# -- command line -------------------------------------------------------------------------------------
def vended_s3_options(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str]:
    """Paimon's S3 file IO options for the S3 settings this server itself uses."""
    from strata_platform.service_config import s3_settings

    s3 = s3_settings(options, env)
    names = {"endpoint": "s3.endpoint", "access-key": "s3.access-key", "secret-key": "s3.secret-key",
             "session-token": "s3.session-token", "region": "s3.region", "path-style-access": "s3.path.style.access"}
    return {names[key]: value for key, value in s3.items() if value}


def parse_args(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    from strata_platform import paimon_rest

    parser = service_parser("python -m strata_platform.paimon_rest", paimon_rest.__doc__, env,
                            "STRATA_PAIMON_REST_HOST", "STRATA_PAIMON_REST_PORT", DEFAULT_PORT)
    parser.add_argument("--name", default=env.get("STRATA_PAIMON_REST_WAREHOUSE_NAME") or "strata",
                        help="the warehouse name clients give as 'warehouse' (the path prefix)")
    return parse_service_args(parser, argv)


def main(argv: Sequence[str] | None = None) -> int:
    import strata
    from strata_platform.service_config import env_bool, read_token

    env, args, options = service_environment(argv, parse_args)
    vend = env_bool(env, "STRATA_PAIMON_REST_VEND_S3", False)
    rest = PaimonRestCatalog(strata.load_catalog(args.warehouse, **options), prefix=args.name,
                             token_options=vended_s3_options(options, env) if vend else None)
    token = read_token(env, "STRATA_PAIMON_REST_TOKEN")
    server = start(rest, args.host, args.port, token)
    return serve_until_stopped(
        server, f"strata paimon rest catalog ready on http://{args.host}:{server.server_port} "
                f"(warehouse {args.warehouse} as {args.name!r}, "
                f"{'bearer token required' if token else 'no authentication'}, "
                f"S3 credentials {'vended through the data token endpoint' if vend else 'not vended'})",
        "strata paimon rest catalog stopped")
