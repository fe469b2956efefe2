"""MinIO provisioned as a local process: object round trips, If-None-Match on PUT, loopback only."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable
from typing import Any, cast

import boto3
import pytest
from botocore.config import Config

from strata_platform.services.base import Service, listening_addresses
from strata_platform.services.minio import MinioService

pytestmark = pytest.mark.minio



@pytest.fixture
def s3(minio: Service, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A plain boto3 client configured only from the service's client_env()."""
    for key, value in minio.client_env().items():
        monkeypatch.setenv(key, value)
    return boto3.client("s3", config=Config(s3={"addressing_style": "path"}))


def test_client_env(minio: Service) -> None:
    assert minio.client_env() == {
        "AWS_ACCESS_KEY_ID": "strata", "AWS_SECRET_ACCESS_KEY": "strata-secret",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:19000", "AWS_REGION": "us-east-1"}


def test_warehouse_bucket_exists(s3: Any) -> None:
    assert "warehouse" in [b["Name"] for b in s3.list_buckets()["Buckets"]]


@pytest.mark.parametrize("size", [0, 1, 5 * 1024 * 1024 + 17])
def test_object_round_trip(s3: Any, size: int) -> None:
    key = f"tests/roundtrip/{uuid.uuid4().hex}"
    body = os.urandom(size)
    s3.put_object(Bucket="warehouse", Key=key, Body=body)
    try:
        head = s3.head_object(Bucket="warehouse", Key=key)
        assert head["ContentLength"] == size
        got = s3.get_object(Bucket="warehouse", Key=key)["Body"].read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(body).digest()
        listed = s3.list_objects_v2(Bucket="warehouse", Prefix=key)["Contents"]
        assert [o["Key"] for o in listed] == [key]
    finally:
        s3.delete_object(Bucket="warehouse", Key=key)
    assert s3.list_objects_v2(Bucket="warehouse", Prefix=key)["KeyCount"] == 0


def test_check_and_conditional_put_are_measured(
        minio: Service, record_property: Callable[[str, object], None]) -> None:
    service = cast(MinioService, minio)
    detail = service.check()
    honoured = service.supports_conditional_put()
    record_property("if_none_match_honoured", honoured)
    print(f"MinIO If-None-Match:* on PUT honoured: {honoured} ({detail})")
    assert detail.startswith("put/get ok")
    assert ("If-None-Match:* honoured" in detail) == honoured
    assert ("If-None-Match:* NOT honoured" in detail) == (not honoured)


def test_conditional_put_never_overwrites_when_honoured(minio: Service, s3: Any) -> None:
    from botocore.exceptions import ClientError

    if not cast(MinioService, minio).supports_conditional_put():
        pytest.skip("this MinIO does not honour If-None-Match:* (measured)")
    key = f"tests/snapshot-{uuid.uuid4().hex}"
    s3.put_object(Bucket="warehouse", Key=key, Body=b"winner", IfNoneMatch="*")
    try:
        with pytest.raises(ClientError) as info:
            s3.put_object(Bucket="warehouse", Key=key, Body=b"loser", IfNoneMatch="*")
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
        assert s3.get_object(Bucket="warehouse", Key=key)["Body"].read() == b"winner"
    finally:
        s3.delete_object(Bucket="warehouse", Key=key)


def test_listens_only_on_loopback(minio: Service) -> None:
    # MinIO adds every loopback address of the machine to the S3 listener whatever --address says
    # (getServerListenAddrs, so its console can reach the API): [::1] may appear beside 127.0.0.1,
    # never a wildcard or a routable address.
    api = listening_addresses(minio.port)
    assert "127.0.0.1" in api
    assert api <= {"127.0.0.1", "::1"}, api
    assert listening_addresses(19001) == {"127.0.0.1"}  # the console
