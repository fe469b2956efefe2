"""S3-compatible object storage (AWS S3, MinIO): boto3 for metadata, pyarrow's S3 for Parquet.

Paths are ``s3://bucket/key`` (``s3a://`` is accepted). Object stores have no directories and no
atomic rename, so:

* a "directory" is a key prefix: ``list_status`` lists one level with ``Delimiter='/'``, and
  ``mkdirs`` writes an empty ``prefix/`` marker so that an empty directory (a new database) exists;
* ``write_new`` (publish a file only if absent) is a **conditional PUT** with ``If-None-Match: *``
  when the store honours it (HTTP 412 means "exists", so the loser returns False). Whether it does
  is option ``s3.conditional-put`` = ``true`` / ``false`` / ``auto`` (default: probe the endpoint
  once per process with a throw-away key next to the first file published, and cache the answer).
  Without it, ``write_new`` falls back to HEAD-then-PUT, which is **only safe while the caller
  holds a lock** that every writer of that path takes (the JDBC catalog lock): two unlocked
  writers can both see "absent" and the second PUT silently replaces the first snapshot.

Options (catalog options, else the standard AWS environment variables): ``s3.endpoint``
(AWS_ENDPOINT_URL), ``s3.access-key`` (AWS_ACCESS_KEY_ID), ``s3.secret-key``
(AWS_SECRET_ACCESS_KEY), ``s3.session-token`` (AWS_SESSION_TOKEN), ``s3.region`` (AWS_REGION,
AWS_DEFAULT_REGION, else us-east-1), ``s3.path-style-access`` (default true),
``s3.ssl.enabled`` (scheme when the endpoint has none; default true), ``s3.ssl.verify``
(true / false / a CA bundle path), ``s3.conditional-put``, ``s3.max-attempts`` (default 5).
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import boto3
import pyarrow.fs as pafs
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from strata.errors import OptionError
from strata.fs.file_io import FileIO, FileStatus

log = logging.getLogger(__name__)

T = TypeVar("T")

_SCHEMES = ("s3://", "s3a://")
_NOT_FOUND = ("404", "NoSuchKey", "NotFound", "NoSuchBucket")
_PRECONDITION_FAILED = ("412", "PreconditionFailed")
_NOT_SUPPORTED = ("NotImplemented", "InvalidArgument", "InvalidRequest", "AccessDenied")

# endpoint -> does it honour If-None-Match:* on PUT (measured once per process)
_CONDITIONAL_PUT: dict[str, bool] = {}
_PROBE_LOCK = threading.Lock()


def _truthy(value: str, key: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise OptionError(f"option {key!r} must be true or false, got {value!r}")
    return value.lower() == "true"


class S3Config:
    """The connection settings, from catalog options first, then the AWS environment variables."""

    def __init__(self, options: Mapping[str, str] | None = None):
        opts = dict(options or {})
        env = os.environ
        self.ssl = _truthy(opts.get("s3.ssl.enabled", "true"), "s3.ssl.enabled")
        endpoint = opts.get("s3.endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
        if endpoint and "://" not in endpoint:
            endpoint = f"{'https' if self.ssl else 'http'}://{endpoint}"
        self.endpoint: str | None = endpoint.rstrip("/") if endpoint else None
        self.access_key = opts.get("s3.access-key") or env.get("AWS_ACCESS_KEY_ID")
        self.secret_key = opts.get("s3.secret-key") or env.get("AWS_SECRET_ACCESS_KEY")
        self.session_token = opts.get("s3.session-token") or env.get("AWS_SESSION_TOKEN")
        self.region = opts.get("s3.region") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") \
            or "us-east-1"
        self.path_style = _truthy(opts.get("s3.path-style-access", "true"), "s3.path-style-access")
        verify = opts.get("s3.ssl.verify", "true")
        self.verify: bool | str = verify if verify.lower() not in ("true", "false") \
            else verify.lower() == "true"
        self.conditional_put = opts.get("s3.conditional-put", "auto").lower()
        if self.conditional_put not in ("true", "false", "auto"):
            raise OptionError(f"option 's3.conditional-put' must be true, false or auto, "
                              f"got {self.conditional_put!r}")
        try:
            self.max_attempts = int(opts.get("s3.max-attempts", "5"))
        except ValueError:
            raise OptionError(f"option 's3.max-attempts' must be an integer, got "
                              f"{opts.get('s3.max-attempts')!r}") from None

    @property
    def endpoint_key(self) -> str:
        return self.endpoint or f"aws:{self.region}"


def split_s3(path: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ("bucket", "a/b"); the key has no leading or trailing slash."""
    for scheme in _SCHEMES:
        if path.startswith(scheme):
            rest = path[len(scheme):]
            break
    else:
        raise ValueError(f"not an s3:// path: {path!r}")
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"s3 path without a bucket: {path!r}")
    return bucket, key.strip("/")


def _code(exc: ClientError) -> tuple[str, int | None]:
    err = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(err.get("Code", "")), status


def _is(exc: ClientError, codes: tuple[str, ...]) -> bool:
    code, status = _code(exc)
    return code in codes or str(status) in codes


class S3FileIO(FileIO):
    list_page_size = 1000  # keys per LIST request (S3's maximum)

    def __init__(self, options: Mapping[str, str] | None = None):
        self._options = dict(options or {})
        self.config = S3Config(self._options)
        c = self.config
        self._client = boto3.session.Session().client(
            "s3", endpoint_url=c.endpoint, region_name=c.region, aws_access_key_id=c.access_key,
            aws_secret_access_key=c.secret_key, aws_session_token=c.session_token, verify=c.verify,
            config=Config(s3={"addressing_style": "path" if c.path_style else "auto"},
                          retries={"max_attempts": c.max_attempts, "mode": "standard"},
                          max_pool_connections=32))
        self._arrow: pafs.S3FileSystem | None = None
        self._dirs: set[str] = set()  # markers written by this instance (mkdirs is called per file)
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # clients and connection pools do not cross processes: rebuild them from the options
        return (S3FileIO, (self._options,))

    @property
    def is_object_store(self) -> bool:
        return True

    # -- error mapping ---------------------------------------------------------------------------
    @staticmethod
    def _call(path: str, fn: Callable[[], T]) -> T:
        """Run one S3 request: a missing key is FileNotFoundError, anything else OSError."""
        try:
            return fn()
        except (ClientError, BotoCoreError) as exc:
            raise _mapped(path, exc) from exc

    # -- reads -------------------------------------------------------------------------------------
    def read_bytes(self, path: str) -> bytes:
        bucket, key = split_s3(path)
        body = self._call(path, lambda: self._client.get_object(Bucket=bucket, Key=key)["Body"])
        try:
            return bytes(body.read())
        except BotoCoreError as exc:
            raise OSError(f"s3 read of {path} failed: {exc}") from exc

    def _head(self, path: str) -> dict[str, Any] | None:
        bucket, key = split_s3(path)
        if not key:
            return None
        try:
            return self._call(path, lambda: self._client.head_object(Bucket=bucket, Key=key))
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        if self._head(path) is not None:
            return True
        bucket, key = split_s3(path)
        prefix = f"{key}/" if key else ""
        page = self._call(path, lambda: self._client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1))
        return int(page.get("KeyCount", 0)) > 0

    def file_size(self, path: str) -> int:
        head = self._head(path)
        if head is None:
            raise FileNotFoundError(path)
        return int(head["ContentLength"])

    def _pages(self, path: str, prefix: str, delimiter: str | None) -> Iterator[dict[str, Any]]:
        bucket, _ = split_s3(path)
        kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": self.list_page_size}
        if delimiter:
            kwargs["Delimiter"] = delimiter
        while True:
            page = self._call(path, lambda: self._client.list_objects_v2(**kwargs))
            yield page
            if not page.get("IsTruncated"):
                return
            kwargs["ContinuationToken"] = page["NextContinuationToken"]

    def list_status(self, path: str) -> list[FileStatus]:
        _, key = split_s3(path)
        prefix = f"{key}/" if key else ""
        base = path.rstrip("/")
        out: list[FileStatus] = []
        for page in self._pages(path, prefix, "/"):
            for cp in page.get("CommonPrefixes", []):
                name = cp["Prefix"][len(prefix):].rstrip("/")
                out.append(FileStatus(f"{base}/{name}", 0, 0, True))
            for obj in page.get("Contents", []):
                name = obj["Key"][len(prefix):]
                if not name:
                    continue  # the directory's own marker
                mtime = int(obj["LastModified"].timestamp() * 1000)
                out.append(FileStatus(f"{base}/{name}", int(obj["Size"]), mtime, False))
        return out

    # -- writes ------------------------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> None:
        bucket, key = split_s3(path)
        self._call(path, lambda: self._client.put_object(Bucket=bucket, Key=key, Body=data))

    def write_new(self, path: str, data: bytes) -> bool:
        if self.conditional_put_supported(path):
            return self._put_if_absent(path, data)
        # Check-then-put: NOT atomic. Safe only under a lock held by every writer of `path`.
        if self._head(path) is not None:
            return False
        self.write_bytes(path, data)
        return True

    def _put_if_absent(self, path: str, data: bytes) -> bool:
        """PUT with If-None-Match:*. True: ours landed; False: the key is taken by another object;
        OSError: ambiguous (the PUT may have landed), the caller reads back."""
        bucket, key = split_s3(path)
        try:
            self._client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as exc:
            taken = _is(exc, _PRECONDITION_FAILED)
            racing = _code(exc)[0] == "ConditionalRequestConflict"  # 409: a concurrent conditional PUT
            if not taken and not racing:
                raise _mapped(path, exc) from exc
            if not exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0):
                return False  # our only request was refused: another object holds the key
            # An earlier try of this very request may have landed (its reply lost, or a 503 after
            # it landed) and be the object that refused the retry (or still in flight, for a 409):
            # the key is ours if it holds exactly our bytes.
            return self._holds(path, data, racing)
        except BotoCoreError as exc:  # the PUT may or may not have landed: ambiguous, the caller reads back
            raise _mapped(path, exc) from exc

    def _holds(self, path: str, data: bytes, in_flight: bool) -> bool:
        """Does `path` hold exactly `data`? Absent is a no, unless a try of ours may still be in
        flight (then it is ambiguous: OSError). A failed read escapes as OSError (ambiguous)."""
        try:
            return self.read_bytes(path) == data
        except FileNotFoundError:
            if in_flight:
                raise OSError(f"conditional PUT of {path}: a concurrent PUT was in flight and the key is still "
                              "absent; outcome unknown") from None
            return False

    def conditional_put_supported(self, path: str) -> bool:
        """Does the endpoint honour ``If-None-Match: *`` on PUT? (option, else probed and cached)"""
        mode = self.config.conditional_put
        if mode != "auto":
            return mode == "true"
        endpoint = self.config.endpoint_key
        with _PROBE_LOCK:
            known = _CONDITIONAL_PUT.get(endpoint)
            if known is None:
                known = self._probe(path)
                _CONDITIONAL_PUT[endpoint] = known
                log.info("s3 endpoint %s: If-None-Match:* on PUT %s", endpoint,
                         "honoured" if known else "NOT honoured (write_new needs a lock)")
            return known

    def _probe(self, near: str) -> bool:
        """PUT a throw-away key twice with If-None-Match:*; honoured = second one gets 412."""
        bucket, key = split_s3(near)
        parent = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
        probe = f"{parent}.strata-conditional-put-probe-{uuid.uuid4().hex}"
        try:
            try:
                self._client.put_object(Bucket=bucket, Key=probe, Body=b"1", IfNoneMatch="*")
            except ClientError as exc:
                if _is(exc, _NOT_SUPPORTED) or _code(exc)[1] in (400, 501):
                    return False
                raise
            try:
                self._client.put_object(Bucket=bucket, Key=probe, Body=b"2", IfNoneMatch="*")
            except ClientError as exc:
                return _is(exc, _PRECONDITION_FAILED)
            return False  # the second PUT overwrote: the header is ignored
        except (ClientError, BotoCoreError) as exc:
            raise OSError(f"could not probe conditional PUT support at s3://{bucket}/{probe}: {exc}") from exc
        finally:
            try:
                self._client.delete_object(Bucket=bucket, Key=probe)
            except (ClientError, BotoCoreError):
                log.warning("could not delete the probe object s3://%s/%s", bucket, probe)

    def delete(self, path: str) -> None:
        bucket, key = split_s3(path)
        if key:
            self._call(path, lambda: self._client.delete_object(Bucket=bucket, Key=key))

    def delete_dir(self, path: str) -> None:
        bucket, key = split_s3(path)
        if not key:
            raise ValueError(f"refusing to delete a whole bucket: {path!r}")
        keys = [obj["Key"] for page in self._pages(path, f"{key}/", None) for obj in page.get("Contents", [])]
        for start in range(0, len(keys), 1000):
            delete = {"Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True}
            try:
                result = self._client.delete_objects(Bucket=bucket, Delete=delete)
            except (ClientError, BotoCoreError) as exc:
                raise _mapped(path, exc) from exc
            errors = result.get("Errors") or []
            if errors:
                raise OSError(f"deleting {path}: {len(errors)} objects failed, first: {errors[0]}")
        base = path.rstrip("/")
        with self._lock:
            self._dirs = {d for d in self._dirs if d != base and not d.startswith(base + "/")}

    def delete_empty_dir(self, path: str) -> bool:
        """Delete the directory marker if nothing else is under the prefix. A file a writer puts
        there meanwhile survives (its key does not depend on the marker); only the marker goes."""
        bucket, key = split_s3(path)
        if not key:
            return False
        page = self._call(path, lambda: self._client.list_objects_v2(Bucket=bucket, Prefix=f"{key}/", MaxKeys=2))
        if any(obj["Key"] != f"{key}/" for obj in page.get("Contents", [])):
            return False
        self._call(path, lambda: self._client.delete_object(Bucket=bucket, Key=f"{key}/"))
        with self._lock:
            self._dirs.discard(path.rstrip("/"))
        return True

    def mkdirs(self, path: str) -> None:
        bucket, key = split_s3(path)
        path = path.rstrip("/")
        if not key or path in self._dirs:
            return
        self._call(path, lambda: self._client.put_object(Bucket=bucket, Key=f"{key}/", Body=b""))
        with self._lock:
            self._dirs.add(path)

    # -- Parquet I/O -----------------------------------------------------------------------------
    def arrow_fs(self) -> tuple[pafs.FileSystem, str]:
        if self._arrow is None:
            c = self.config
            kwargs: dict[str, Any] = {
                "access_key": c.access_key, "secret_key": c.secret_key, "session_token": c.session_token,
                "region": c.region, "force_virtual_addressing": not c.path_style,
                "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=c.max_attempts)}
            if c.endpoint:
                scheme, _, host = c.endpoint.partition("://")
                kwargs.update(endpoint_override=host, scheme=scheme)
            if isinstance(c.verify, str):
                kwargs["tls_ca_file_path"] = c.verify
            self._arrow = pafs.S3FileSystem(**kwargs)
        return self._arrow, ""

    def arrow_path(self, path: str) -> str:
        bucket, key = split_s3(path)
        return f"{bucket}/{key}"


def _mapped(path: str, exc: ClientError | BotoCoreError) -> OSError:
    """A missing key or bucket is FileNotFoundError; any other failure OSError (which commits treat
    as ambiguous: the request may have taken effect)."""
    if isinstance(exc, ClientError):
        code, status = _code(exc)
        if _is(exc, _NOT_FOUND):
            return FileNotFoundError(f"{path}: {code or status}")
        return OSError(f"s3 request on {path} failed: {status} {code}: {exc}")
    if isinstance(exc, NoCredentialsError):
        return OSError(f"s3 request on {path} failed: {exc}: pass the catalog options s3.access-key and "
                       "s3.secret-key (and s3.endpoint), or set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY "
                       "(for the local MinIO: eval \"$(.venv/bin/strata-services env minio)\")")
    return OSError(f"s3 request on {path} failed: {exc}")  # connection reset, timeout, after retries
