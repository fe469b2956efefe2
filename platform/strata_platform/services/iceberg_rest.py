"""Strata's Iceberg REST catalog (``strata_platform.iceberg_rest``) on 127.0.0.1:19192.

The catalog is a filesystem catalog over a warehouse on the local MinIO
(``STRATA_ICEBERG_REST_WAREHOUSE``, default ``s3://warehouse/iceberg-rest``), the same one the
``strata`` catalog of the local Trino reads through it. MinIO must run for the catalog to answer:
``start`` starts it when it is not running, and ``stop`` stops it again only if it was started
here (a MinIO someone else started is left alone). The server runs this venv's Python; there is
nothing to install. ``STRATA_ICEBERG_REST_TOKEN`` in the environment makes the server require it
as a bearer token (and the Trino service sends it).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

from strata_platform.services.base import HOST, Service, ServiceError, http_ok
from strata_platform.services.minio import MinioService

DEFAULT_WAREHOUSE = "s3://warehouse/iceberg-rest"


class IcebergRestService(Service):
    name = "iceberg_rest"
    port = 19192
    startup_timeout = 90.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def warehouse(self) -> str:
        return os.environ.get("STRATA_ICEBERG_REST_WAREHOUSE", DEFAULT_WAREHOUSE)

    @property
    def _minio_marker(self) -> Path:
        return self.state_dir / "started-minio"

    def catalog_options(self) -> dict[str, str]:
        """Options of the Strata catalog the server opens (and that clients writing its tables use)."""
        s3 = MinioService().client_env()
        return {"s3.endpoint": s3["AWS_ENDPOINT_URL"], "s3.access-key": s3["AWS_ACCESS_KEY_ID"],
                "s3.secret-key": s3["AWS_SECRET_ACCESS_KEY"], "s3.region": s3["AWS_REGION"]}

    def catalog(self) -> Any:
        """The Strata catalog the server serves, for writing tables into it."""
        import strata

        return strata.load_catalog(self.warehouse, **self.catalog_options())

    def install(self) -> None:
        """Nothing to download: the server is this package, run by this venv's Python."""

    def version(self) -> str:
        return f"strata-platform {metadata.version('strata-platform')}"

    def command(self) -> list[str]:
        argv = [sys.executable, "-m", "strata_platform.iceberg_rest", "--warehouse", self.warehouse,
                "--host", HOST, "--port", str(self.port)]
        for key, value in self.catalog_options().items():
            argv += ["--option", f"{key}={value}"]
        return argv

    def environment(self) -> dict[str, str]:
        # the catalog is the one on the command line, whatever the caller's environment says
        return {"STRATA_JDBC_URI": "", "STRATA_CATALOG_OPTIONS": "", "STRATA_LOG_LEVEL": "INFO"}

    def start(self) -> float:
        minio = MinioService()
        if minio.running_pid() is None:
            minio.start()
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self._minio_marker.write_text("MinIO was started for the Iceberg REST catalog\n")
        return super().start()

    def stop(self) -> None:
        super().stop()
        if self._minio_marker.exists():
            self._minio_marker.unlink()
            MinioService().stop()

    def is_ready(self) -> bool:
        return http_ok(f"{self.url}/health")

    def client_env(self) -> dict[str, str]:
        # the warehouse too: tables written there (metadata.iceberg.storage=rest-catalog) are served
        return {"STRATA_ICEBERG_REST_URI": self.url, "STRATA_ICEBERG_REST_WAREHOUSE": self.warehouse}

    def get(self, path: str, token: str | None = None) -> Any:
        request = urllib.request.Request(f"{self.url}{path}")
        token = token or os.environ.get("STRATA_ICEBERG_REST_TOKEN")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        with urllib.request.urlopen(request, timeout=30) as resp:
            return json.load(resp)

    def check(self) -> str:
        config = self.get("/v1/config")
        namespaces = [ns[0] for ns in self.get("/v1/namespaces")["namespaces"]]
        tables = 0
        for namespace in namespaces:
            for ident in self.get(f"/v1/namespaces/{namespace}/tables")["identifiers"]:
                loaded = self.get(f"/v1/namespaces/{namespace}/tables/{ident['name']}")
                if "metadata" not in loaded or not loaded.get("metadata-location"):
                    raise ServiceError(f"iceberg_rest: {namespace}.{ident['name']} loaded without metadata")
                tables += 1
        return (f"{len(config['endpoints'])} endpoints; {len(namespaces)} namespaces, {tables} tables with "
                f"Iceberg metadata loaded (warehouse {self.warehouse})")
