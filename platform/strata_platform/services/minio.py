"""MinIO, built from source with ``go install`` (cached), serving S3 on 127.0.0.1:19000.

The binary is compiled once into ``CACHE_DIR/minio/bin`` with its own GOPATH, module cache and
build cache beside it, so later runs start at once. The pinned version is a Go pseudo-version: the
MinIO project publishes no semver tags, and the module proxy serves only the final commit of
minio/minio (2026-02-12, maintenance mode), which is RELEASE.2025-10-15T17-29-55Z plus four
bug fixes (one of them for conditional PUT read quorum). ``version()`` reports it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from strata_platform.services.base import HOST, Service, ServiceError, file_lock, go_binary, http_ok, run

MODULE = "github.com/minio/minio"
# Pseudo-version of commit 7aac2a2c5b7c (minio/minio master, 2026-02-12T20:18:48Z).
PINNED_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
COMMIT_ID = "7aac2a2c5b7c882e68c1ce017d8256be2feea27f"
COMMIT_TIME = "2026-02-12T20:18:48Z"

ACCESS_KEY = "strata"
SECRET_KEY = "strata-secret"
REGION = "us-east-1"
BUCKET = "warehouse"
CONSOLE_PORT = 19001


class MinioService(Service):
    name = "minio"
    port = 19000
    startup_timeout = 120.0

    # -- install --------------------------------------------------------------------------------
    @property
    def binary(self) -> Path:
        return self.cache_dir / "bin" / "minio"

    @property
    def _stamp(self) -> Path:
        return self.cache_dir / "bin" / "minio.version"

    def _installed(self) -> bool:
        return (self.binary.is_file() and self._stamp.is_file()
                and self._stamp.read_text().strip() == PINNED_VERSION)

    def install(self) -> None:
        if self._installed():
            return
        go = go_binary("minio")
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # One build at a time, even if two processes ask for MinIO at once.
        with file_lock(self.cache_dir / "install.lock"):
            if self._installed():
                return
            gopath = self.cache_dir / "gopath"
            env = {
                **os.environ,
                "GOBIN": str(self.binary.parent),
                "GOPATH": str(gopath),
                "GOMODCACHE": str(gopath / "pkg" / "mod"),
                "GOCACHE": str(self.cache_dir / "gocache"),
                "GOFLAGS": "-modcacherw",  # so the cache can be deleted with rm -rf
                "GOTOOLCHAIN": "local",
                "CGO_ENABLED": "0",
            }
            ldflags = " ".join([
                "-s", "-w",
                f"-X {MODULE}/cmd.Version={COMMIT_TIME}",
                f"-X {MODULE}/cmd.ReleaseTag=DEVELOPMENT.{COMMIT_TIME.replace(':', '-')}",
                f"-X {MODULE}/cmd.CommitID={COMMIT_ID}",
                f"-X {MODULE}/cmd.ShortCommitID={COMMIT_ID[:12]}",
                f"-X {MODULE}/cmd.CopyrightYear={COMMIT_TIME[:4]}",
            ])
            self._stamp.unlink(missing_ok=True)
            run([go, "install", "-trimpath", f"-ldflags={ldflags}", f"{MODULE}@{PINNED_VERSION}"],
                env=env, cwd=str(self.cache_dir))
            if not self.binary.is_file():
                raise ServiceError(f"minio: go install finished but {self.binary} is missing")
            self._stamp.write_text(PINNED_VERSION + "\n")

    def version(self) -> str:
        out = run([str(self.binary), "--version"]).stdout.strip().splitlines()
        return out[0] if out else "?"

    # -- process --------------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def command(self) -> list[str]:
        return [str(self.binary), "server", str(self.state_dir / "data"),
                "--address", f"{HOST}:{self.port}",
                "--console-address", f"{HOST}:{CONSOLE_PORT}"]

    def environment(self) -> dict[str, str]:
        return {
            "MINIO_ROOT_USER": ACCESS_KEY,
            "MINIO_ROOT_PASSWORD": SECRET_KEY,
            "MINIO_REGION": REGION,
            "MINIO_UPDATE": "off",
            # Prometheus (also on loopback) may scrape /minio/v2/metrics/cluster without a token.
            "MINIO_PROMETHEUS_AUTH_TYPE": "public",
        }

    def prepare(self) -> None:
        (self.state_dir / "data").mkdir(parents=True, exist_ok=True)

    def is_ready(self) -> bool:
        return http_ok(f"{self.endpoint}/minio/health/ready")

    def client(self) -> Any:
        """A boto3 S3 client for this server (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3},
                          connect_timeout=5, read_timeout=30),
        )

    def after_start(self) -> None:
        from botocore.exceptions import ClientError

        s3 = self.client()
        try:
            s3.head_bucket(Bucket=BUCKET)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket", "NotFound"):
                raise
            try:
                s3.create_bucket(Bucket=BUCKET)
            except ClientError as exc2:
                if exc2.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                    raise

    def client_env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
        }

    # -- checks ---------------------------------------------------------------------------------
    def roundtrip(self, size: int = 1 << 20) -> int:
        """PUT an object of `size` random bytes, GET it back, compare, delete; returns the size."""
        s3 = self.client()
        key = f"strata-check/roundtrip-{uuid.uuid4().hex}"
        body = os.urandom(size)
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        try:
            got = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        finally:
            s3.delete_object(Bucket=BUCKET, Key=key)
        if got != body:
            raise ServiceError(f"minio: object round trip mismatch ({len(got)} bytes back of {size})")
        return size

    def conditional_put_outcome(self) -> tuple[bool, str]:
        """PUT a new key twice with ``If-None-Match: *``; (honoured, what the second PUT returned)."""
        from botocore.exceptions import ClientError

        s3 = self.client()
        key = f"strata-check/if-none-match-{uuid.uuid4().hex}"
        try:
            try:
                s3.put_object(Bucket=BUCKET, Key=key, Body=b"first", IfNoneMatch="*")
            except ClientError as exc:
                err = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status in (400, 501) or err.get("Code") in ("NotImplemented", "InvalidArgument"):
                    return False, f"first PUT rejected: {status} {err.get('Code')}"
                raise
            try:
                s3.put_object(Bucket=BUCKET, Key=key, Body=b"second", IfNoneMatch="*")
            except ClientError as exc:
                err = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                if status == 412 or err.get("Code") == "PreconditionFailed":
                    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
                    if body != b"first":
                        raise ServiceError("minio: 412 on the second PUT but the object changed") from exc
                    return True, "412 on existing key"
                return False, f"second PUT failed with {status} {err.get('Code')}"
            return False, "second PUT overwrote the existing key"
        finally:
            s3.delete_object(Bucket=BUCKET, Key=key)

    def supports_conditional_put(self) -> bool:
        """True if this server honours ``If-None-Match: *`` on PUT (412 when the key exists)."""
        return self.conditional_put_outcome()[0]

    def check(self) -> str:
        size = self.roundtrip()
        honoured, how = self.conditional_put_outcome()
        verdict = "honoured" if honoured else "NOT honoured"
        return f"put/get ok ({size} bytes); If-None-Match:* {verdict} ({how})"
