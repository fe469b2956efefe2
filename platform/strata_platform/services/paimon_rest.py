"""Strata's Paimon REST catalog (``strata_platform.paimon_rest``) on 127.0.0.1:19193.

The catalog is a JDBC catalog (catalog key ``paimon_rest``) on the local PostgreSQL over the
warehouse the Iceberg REST catalog serves (``STRATA_ICEBERG_REST_WAREHOUSE``, default
``s3://warehouse/iceberg-rest`` on the local MinIO), so a table Java Paimon or pypaimon create
through it with ``metadata.iceberg.storage=rest-catalog`` reaches the local Trino's ``strata``
catalog. MinIO and PostgreSQL must run for it to answer: ``start`` starts those that are not
running, and ``stop`` stops again only those it started. The server runs this venv's Python;
nothing to install. ``STRATA_PAIMON_REST_TOKEN`` in the environment makes the server require it
as a bearer token (default ``strata-paimon-rest``, so the local service is never open).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

from strata_platform.services.base import HOST, Service, http_ok
from strata_platform.services.iceberg_rest import DEFAULT_WAREHOUSE
from strata_platform.services.minio import MinioService
from strata_platform.services.postgres import PostgresService

CATALOG_KEY = "paimon_rest"
WAREHOUSE_NAME = "strata"
DEFAULT_TOKEN = "strata-paimon-rest"


class PaimonRestService(Service):
    name = "paimon_rest"
    port = 19193
    startup_timeout = 90.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def warehouse(self) -> str:
        return os.environ.get("STRATA_ICEBERG_REST_WAREHOUSE", DEFAULT_WAREHOUSE)

    @property
    def token(self) -> str:
        return os.environ.get("STRATA_PAIMON_REST_TOKEN", "").strip() or DEFAULT_TOKEN

    def _marker(self, dependency: str) -> Path:
        return self.state_dir / f"started-{dependency}"

    def s3_options(self) -> dict[str, str]:
        s3 = MinioService().client_env()
        return {"s3.endpoint": s3["AWS_ENDPOINT_URL"], "s3.access-key": s3["AWS_ACCESS_KEY_ID"],
                "s3.secret-key": s3["AWS_SECRET_ACCESS_KEY"], "s3.region": s3["AWS_REGION"]}

    def catalog_options(self) -> dict[str, str]:
        """Options of the Strata catalog the server opens (and Strata code sharing its tables uses)."""
        return {"metastore": "jdbc", "uri": PostgresService().client_env()["STRATA_PG_DSN"],
                "catalog-key": CATALOG_KEY, **self.s3_options()}

    def catalog(self) -> Any:
        """The Strata catalog the server serves."""
        import strata

        return strata.load_catalog(self.warehouse, **self.catalog_options())

    def java_options(self, token: str | None = None) -> dict[str, str]:
        """Paimon's Java catalog options for this service (``metastore=rest``), with the client's own
        S3 options (Paimon's S3 file IO spelling)."""
        s3 = self.s3_options()
        return {"metastore": "rest", "uri": self.url, "token.provider": "bear", "token": token or self.token,
                "warehouse": WAREHOUSE_NAME, "s3.endpoint": s3["s3.endpoint"], "s3.access-key": s3["s3.access-key"],
                "s3.secret-key": s3["s3.secret-key"], "s3.path.style.access": "true"}

    def install(self) -> None:
        """Nothing to download: the server is this package, run by this venv's Python."""

    def version(self) -> str:
        return f"strata-platform {metadata.version('strata-platform')}"

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "strata_platform.paimon_rest", "--warehouse", self.warehouse,
                "--host", HOST, "--port", str(self.port), "--name", WAREHOUSE_NAME]
        for key, value in self.catalog_options().items():
            argv += ["--option", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        # the catalog is the one on the command line, whatever the caller's environment says
        return {"STRATA_JDBC_URI": "", "STRATA_CATALOG_OPTIONS": "", "STRATA_LOG_LEVEL": "INFO",
                "STRATA_PAIMON_REST_TOKEN": self.token}

    def start(self) -> float:
        for dependency in (MinioService(), PostgresService()):
            if dependency.running_pid() is None:
                dependency.start()
                self.state_dir.mkdir(parents=True, exist_ok=True)
                self._marker(dependency.name).write_text(f"{dependency.name} was started for the Paimon REST catalog\n")
        return super().start()

    def stop(self) -> None:
        super().stop()
        for dependency in (PostgresService(), MinioService()):
            if self._marker(dependency.name).exists():
                self._marker(dependency.name).unlink()
                dependency.stop()

    def is_ready(self) -> bool:
        return http_ok(f"{self.url}/health")

    def client_env(self) -> dict[str, str]:
        return {"STRATA_PAIMON_REST_URI": self.url, "STRATA_PAIMON_REST_WAREHOUSE": WAREHOUSE_NAME}

    def request(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        """(status, parsed JSON answer) of one request; errors are answers too."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method)
        request.add_header("Authorization", f"Bearer {token if token is not None else self.token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, json.load(exc)

    def check(self) -> str:
        status, config = self.request("GET", f"/v1/config?warehouse={WAREHOUSE_NAME}")
        prefix = config["defaults"]["prefix"] if status == 200 else None
        status, listed = self.request("GET", f"/v1/{prefix}/databases")
        if status != 200:
            raise RuntimeError(f"paimon_rest: listing databases answered {status}: {listed}")
        unauthorized, _ = self.request("GET", f"/v1/{prefix}/databases", token="not-the-token")
        if unauthorized != 401:
            raise RuntimeError(f"paimon_rest: a wrong token answered {unauthorized}, not 401")
        return f"prefix {prefix!r}; {len(listed['databases'])} databases; a wrong token gets 401"
