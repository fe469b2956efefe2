"""What Strata's services share below all of them: configuration from the environment (catalog
options, secrets mounted as files, bearer tokens, S3 settings) and the stop signal. ``serve`` (the
roles), ``http_service`` (the HTTP layer of the catalogs) and the services themselves import it;
it imports none of them."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("strata.serve")

SECRET_FILE_SUFFIX = "_FILE"
SECRET_VARIABLES = ("STRATA_JDBC_USER", "STRATA_JDBC_PASSWORD", "STRATA_CATALOG_OPTIONS", "AWS_ACCESS_KEY_ID",
                    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def load_secret_files(env: dict[str, str]) -> None:
    """``NAME_FILE=/path`` -> ``NAME`` = the file's content (stripped), unless NAME is set, for the
    variables that hold credentials (``SECRET_VARIABLES``)."""
    for name in SECRET_VARIABLES:
        path = env.get(name + SECRET_FILE_SUFFIX)
        if path and not env.get(name):
            try:
                with open(path) as fh:
                    env[name] = fh.read().strip()
            except OSError as exc:
                raise SystemExit(f"{name}{SECRET_FILE_SUFFIX}={path}: {exc}") from exc


def pairs(text: str | None) -> dict[str, str]:
    """``k=v,k2=v2`` (commas or newlines) -> dict."""
    out: dict[str, str] = {}
    for item in (text or "").replace("\n", ",").split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    return float(raw) if raw.strip() else default


def env_bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    return default if not raw else raw in ("1", "true", "yes", "on")


def warehouse(env: Mapping[str, str]) -> str:
    value = env.get("STRATA_WAREHOUSE", "").strip()
    if not value:
        raise SystemExit("STRATA_WAREHOUSE is not set (s3://bucket/path or a local path)")
    return value


def catalog_options(env: Mapping[str, str]) -> dict[str, str]:
    options = pairs(env.get("STRATA_CATALOG_OPTIONS"))
    if env.get("STRATA_JDBC_URI"):
        options.setdefault("metastore", "jdbc")
        options.setdefault("uri", env["STRATA_JDBC_URI"])
        if env.get("STRATA_JDBC_USER"):
            options.setdefault("jdbc.user", env["STRATA_JDBC_USER"])
        if env.get("STRATA_JDBC_PASSWORD"):
            options.setdefault("jdbc.password", env["STRATA_JDBC_PASSWORD"])
    return options


class Stopper:
    """SIGTERM/SIGINT -> ``event`` set; the roles check it between units of work."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signals: list[int] = []

    def install(self) -> Stopper:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        return self

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.signals.append(signum)
        log.info("signal %d: stopping after the work in flight", signum)
        self.event.set()

    @property
    def stopping(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float | None) -> bool:
        """True once stopping; `seconds` None waits for a signal."""
        return self.event.wait(seconds)


def read_token(env: Mapping[str, str], variable: str) -> str | None:
    """A bearer token from `variable`, or from the file `variable`_FILE names (a mounted secret)."""
    token = env.get(variable, "").strip()
    path = env.get(f"{variable}_FILE", "").strip()
    if not token and path:
        try:
            token = Path(path).read_text().strip()
        except OSError as exc:
            raise SystemExit(f"{variable}_FILE={path}: {exc}") from exc
    return token or None


def s3_settings(options: Mapping[str, str], env: Mapping[str, str]) -> dict[str, str | None]:
    """The S3 settings a server uses (its catalog options, then the AWS_* variables), for the
    clients it hands them to under their own property names."""
    return {
        "endpoint": options.get("s3.endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
        "access-key": options.get("s3.access-key") or env.get("AWS_ACCESS_KEY_ID"),
        "secret-key": options.get("s3.secret-key") or env.get("AWS_SECRET_ACCESS_KEY"),
        "session-token": options.get("s3.session-token") or env.get("AWS_SESSION_TOKEN"),
        "region": options.get("s3.region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        "path-style-access": options.get("s3.path-style-access", "true"),
    }
