"""The locally built images (strata_platform.images), and the strata image run with testcontainers.

testcontainers runs with Ryuk disabled (no registry for its image) and the host network (our
engine has no bridge): ports are chosen here and passed in through the environment, and
containers are cleaned up by testcontainers' session label whatever happens.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import strata
from strata_platform import images
from strata_platform.services import docker as engine
from strata_platform.services.base import Service

pytestmark = [pytest.mark.docker]


@pytest.fixture(scope="module")
def built(docker: Service) -> dict[str, images.BuildResult]:
    return images.ensure_images(report=print)


@pytest.fixture
def testcontainers_env(docker: Service, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for key, value in docker.client_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.labels import SESSION_ID

    yield
    session = f"label=org.testcontainers.session-id={SESSION_ID}"
    leftovers = engine.docker("ps", "-aq", "--filter", session).stdout.split()
    if leftovers:
        engine.docker("rm", "-f", *leftovers)


def test_images_are_labelled_and_rebuilt_only_on_change(built: dict[str, images.BuildResult]) -> None:
    assert set(built) == {"minio", "kafka", "postgres", "prometheus", "trino", "strata"}
    for name, result in built.items():
        labels = images.image_labels(result.tag)
        assert labels is not None and labels[images.LABEL] == images.content_hash(images.all_images()[name])
    again = images.ensure_images()
    assert not any(r.built for r in again.values())  # up to date: nothing rebuilt
    print({r.tag: f"{r.size / 1e6:.0f} MB" for r in built.values()})


def test_strata_image_contents(built: dict[str, images.BuildResult]) -> None:
    tag = built["strata"].tag
    script = ("import pyspark, pyarrow, strata, strata_platform.serve, confluent_kafka, boto3, psycopg; "
              "import os, subprocess; print(pyspark.__version__, pyarrow.__version__, os.getuid()); "
              "print(subprocess.run(['java', '-version'], capture_output=True, text=True).stderr.splitlines()[0])")
    out = engine.docker("run", "--rm", "--network", "host", "--entrypoint", "python", tag, "-c", script).stdout
    versions, java = out.strip().splitlines()
    assert versions.split() == ["4.3.0", "26.0.1", "10001"]  # pinned versions, non-root
    assert '"17.' in java
    inspect = json.loads(engine.docker("image", "inspect", tag).stdout)[0]["Config"]
    assert inspect["Entrypoint"] == ["/opt/strata/bin/python", "-m", "strata_platform.serve"]
    assert inspect["User"] == "10001:10001"


def test_strata_exporter_in_a_testcontainer(built: dict[str, images.BuildResult], testcontainers_env: None,
                                            tmp_path: Path) -> None:
    """The exporter role in the image, configured by environment only, on a mounted warehouse;
    SIGTERM (docker stop) ends it with exit code 0 at once."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    warehouse = tmp_path / "wh"
    catalog = strata.load_catalog(str(warehouse))
    catalog.create_database("db")
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    catalog.create_table("db.t", schema).write(pa.table({"id": [1, 2, 3]}, schema=schema))
    os.chmod(tmp_path, 0o755)
    for path in [warehouse, *warehouse.rglob("*")]:
        os.chmod(path, 0o777 if path.is_dir() else 0o666)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    container = (DockerContainer(built["strata"].tag)
                 .with_command("exporter")
                 .with_env("STRATA_WAREHOUSE", "/warehouse")
                 .with_env("METRICS_PORT", str(port))
                 .with_volume_mapping(str(warehouse), "/warehouse", "rw")
                 .with_kwargs(network_mode="host")
                 .waiting_for(LogMessageWaitStrategy("metrics ready on").with_startup_timeout(120)))
    with container:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert 'strata_table_snapshot_latest_id{table="db.t"} 1.0' in resp.read().decode()
        wrapped = container.get_wrapped_container()
        began = time.monotonic()
        wrapped.stop(timeout=20)
        stopped_in = time.monotonic() - began
        wrapped.reload()
        assert wrapped.attrs["State"]["ExitCode"] == 0
        assert stopped_in < 10, f"docker stop took {stopped_in:.1f}s: SIGTERM not handled"
