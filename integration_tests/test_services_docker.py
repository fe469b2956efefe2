"""The private Docker engine: host-network containers from the locally built base image."""

from __future__ import annotations

import json
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata_platform.services import docker as engine
from strata_platform.services.base import HOST, Service

pytestmark = pytest.mark.docker


class OneShotServer:
    """A TCP server on 127.0.0.1 that reads one line from one client and answers it."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.received = ""
        self.sock = socket.create_server((HOST, 0))
        self.sock.settimeout(120)
        self.port: int = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn, conn.makefile("rw") as stream:
            self.received = stream.readline().strip()
            stream.write(self.reply + "\n")
            stream.flush()

    def close(self) -> str:
        self.thread.join(30)
        self.sock.close()
        return self.received


@pytest.fixture
def server() -> Iterator[OneShotServer]:
    srv = OneShotServer(reply=f"pong-{uuid.uuid4().hex[:8]}")
    yield srv
    srv.close()


def test_engine_has_no_bridge_network(docker: Service) -> None:
    status, body = engine.api_get("/networks")
    assert status == 200
    names = {net["Name"] for net in json.loads(body)}
    assert "bridge" not in names, names
    assert "host" in names


def test_base_image_is_local(docker: Service) -> None:
    status, body = engine.api_get(f"/images/{engine.BASE_IMAGE}/json")
    assert status == 200
    image = json.loads(body)
    assert image["Config"]["Cmd"] == ["/bin/bash"]
    assert "LANG=C.UTF-8" in image["Config"]["Env"]
    # apt inside the image uses the host's sources (no mirror is baked into this repository)
    out = engine.docker("run", "--rm", "--network", "host", engine.BASE_IMAGE,
                        "bash", "-c", "ls /etc/apt/sources.list.d; . /etc/os-release; "
                        "echo $VERSION_CODENAME").stdout.split()
    assert out[-1] == "bookworm"
    assert set(out[:-1]) == set(engine.image_apt_sources()) - {"sources.list"}


def test_build_from_base_image_on_host_network(docker: Service, tmp_path: Path) -> None:
    """A Dockerfile in the project's shape: ARG BASE_IMAGE, apt from the image's own sources."""
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE\n"
        "FROM ${BASE_IMAGE}\n"
        "RUN apt-get update -qq && apt-cache policy ca-certificates | grep -q 'Candidate: [0-9]' "
        "&& rm -rf /var/lib/apt/lists/*\n"
        "ARG GREETING\n"
        "RUN echo \"$GREETING\" > /greeting\n"
        'CMD ["cat", "/greeting"]\n')
    tag = f"strata/test-build:{uuid.uuid4().hex[:8]}"
    try:
        engine.build_image(tmp_path, tag, build_args={"GREETING": "built-on-host-network"})
        out = engine.docker("run", "--rm", "--network", "host", tag).stdout.strip()
        assert out == "built-on-host-network"
    finally:
        engine.docker("rmi", "-f", tag)


def test_host_network_container_reaches_loopback_server(docker: Service,
                                                         server: OneShotServer) -> None:
    script = (f"exec 3<>/dev/tcp/{HOST}/{server.port}; echo ping-from-container >&3; "
              "head -n1 <&3")
    out = engine.docker("run", "--rm", "--network", "host", engine.BASE_IMAGE,
                        "bash", "-c", script, timeout=300).stdout.strip()
    assert server.close() == "ping-from-container"
    assert out == server.reply


def test_testcontainers_with_host_network(docker: Service, server: OneShotServer,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in docker.client_env().items():
        monkeypatch.setenv(key, value)
    from testcontainers.core.config import testcontainers_config
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    monkeypatch.setattr(testcontainers_config, "ryuk_disabled", True)
    script = (f"exec 3<>/dev/tcp/{HOST}/{server.port}; echo hello-from-$GREETER >&3; "
              "read -r answer <&3; echo \"got $answer\"; exec sleep 300")
    container = (DockerContainer(engine.BASE_IMAGE)
                 .with_env("GREETER", "testcontainers")
                 .with_command(["bash", "-c", script])
                 .with_kwargs(network_mode="host", init=True)
                 .waiting_for(LogMessageWaitStrategy("got pong-").with_startup_timeout(120)))
    with container:
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        assert wrapped.attrs["HostConfig"]["NetworkMode"] == "host"
        assert wrapped.labels.get("org.testcontainers") == "true"
        stdout, _ = container.get_logs()
        assert stdout.decode().strip() == f"got {server.reply}"
    assert server.close() == "hello-from-testcontainers"
    leftover = engine.docker("ps", "-aq", "--filter", "label=org.testcontainers=true").stdout
    assert leftover.strip() == ""
