"""Run compose/docker-compose.yml on this machine: `python -m strata_platform.compose up|down|ps`.

On the project's machines no registry is reachable, so the stack runs on our own Docker engine
(``strata_platform.services.docker``) with the images built here (``strata_platform.images``)
substituted through the compose file's ``*_IMAGE`` variables. Where a registry is reachable, users
simply run ``docker compose up -d`` in compose/ instead.

Compose: the v2 plugin (``docker compose``) when the docker client has it, else Debian's
``docker-compose`` 1.29 (v1; installed with apt when missing). The compose file is valid for both.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from strata_platform.services.base import REPO_ROOT, ServiceError, apt_install
from strata_platform.services.docker import docker_cli, docker_env

COMPOSE_DIR = REPO_ROOT / "compose"
COMPOSE_FILE = COMPOSE_DIR / "docker-compose.yml"
DEFAULT_ENV_FILE = COMPOSE_DIR / ".env"
# compose variable -> image name in strata_platform.images
IMAGE_VARIABLES = {"MINIO_IMAGE": "minio", "POSTGRES_IMAGE": "postgres", "KAFKA_IMAGE": "kafka",
                   "TRINO_IMAGE": "trino", "PROMETHEUS_IMAGE": "prometheus", "STRATA_IMAGE": "strata"}


def compose_command() -> list[str]:
    """argv prefix of a working compose: v2 plugin, else v1 (apt-installed if missing)."""
    env = docker_env()
    cli = docker_cli()
    probe = subprocess.run([cli, "compose", "version"], capture_output=True, text=True, env=env, check=False)
    if probe.returncode == 0:
        return [cli, "compose"]
    if shutil.which("docker-compose") is None:
        apt_install("docker-compose")
    found = shutil.which("docker-compose")
    if found is None:
        raise ServiceError("no compose found: neither `docker compose` nor docker-compose")
    return [found]


def compose_version() -> str:
    proc = subprocess.run([*compose_command(), "version"], capture_output=True, text=True, env=docker_env(),
                          check=False)
    return (proc.stdout.strip().splitlines() or ["?"])[0]


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def write_env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return path


def local_image_overrides() -> dict[str, str]:
    """*_IMAGE -> the locally built tag of each image (built if missing)."""
    from strata_platform import images

    built = images.ensure_images(report=lambda line: print(line, flush=True))
    return {var: built[name].tag for var, name in IMAGE_VARIABLES.items()}


class Stack:
    """One compose project: `up`, `wait_healthy`, `down -v`, and its containers."""

    def __init__(self, project: str, env_file: Path = DEFAULT_ENV_FILE, compose_file: Path = COMPOSE_FILE):
        self.project, self.env_file, self.compose_file = project, env_file, compose_file
        self.base = [*compose_command(), "--project-name", project, "--env-file", str(env_file),
                     "--file", str(compose_file), "--project-directory", str(compose_file.parent)]

    def run(self, *args: str, timeout: float = 600.0, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        full_env = {**docker_env(), **(env or {})}
        proc = subprocess.run([*self.base, *args], capture_output=True, text=True, env=full_env, timeout=timeout,
                              check=False)
        if check and proc.returncode != 0:
            raise ServiceError(f"compose {' '.join(args)} failed ({proc.returncode}):\n"
                               f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def up(self, *services: str, timeout: float = 900.0) -> None:
        self.run("up", "-d", *services, timeout=timeout)

    def down(self) -> None:
        """`down -v` (containers, networks, named volumes), then anything left with the project label."""
        self.run("down", "-v", "--remove-orphans", "--timeout", "20", timeout=300, check=False)
        label = f"label=com.docker.compose.project={self.project}"
        for kind, listing in (("container", ["ps", "-aq", "--filter", label]),
                              ("volume", ["volume", "ls", "-q", "--filter", label])):
            ids = self._docker(*listing).stdout.split()
            if ids:
                self._docker(*(["rm", "-f"] if kind == "container" else ["volume", "rm", "-f"]), *ids)

    def _docker(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([docker_cli(), *args], capture_output=True, text=True, env=docker_env(),
                              timeout=300, check=False)

    def containers(self) -> dict[str, dict[str, object]]:
        """service name -> `docker inspect` of its (first) container, for every container of the project."""
        ids = self._docker("ps", "-aq", "--filter", f"label=com.docker.compose.project={self.project}").stdout.split()
        if not ids:
            return {}
        found: dict[str, dict[str, object]] = {}
        for item in json.loads(self._docker("inspect", *ids).stdout or "[]"):
            service = item["Config"]["Labels"].get("com.docker.compose.service", item["Name"])
            found[service] = item
        return found

    def container_id(self, service: str) -> str:
        return str(self.containers()[service]["Id"])

    def status(self) -> dict[str, str]:
        """service -> health status (healthy, starting, unhealthy), or the state without a healthcheck."""
        out = {}
        for service, item in self.containers().items():
            state = item["State"]
            assert isinstance(state, dict)
            health = state.get("Health")
            if isinstance(health, dict):
                out[service] = str(health.get("Status"))
            elif state.get("Status") == "exited":
                out[service] = f"exited({state.get('ExitCode')})"
            else:
                out[service] = str(state.get("Status"))
        return out

    def wait_healthy(self, services: list[str], timeout: float = 600.0) -> float:
        """Wait until each service is healthy (or, without a healthcheck, running or exited 0)."""
        began = time.monotonic()
        status: dict[str, str] = {}
        while time.monotonic() - began < timeout:
            status = self.status()
            bad = {s: v for s, v in status.items()
                   if v == "unhealthy" or (v.startswith("exited(") and v != "exited(0)")}
            if bad:
                raise ServiceError(f"services failed: {bad}\n{self.logs(*bad)}")
            if all(status.get(s) in ("healthy", "running", "exited(0)") for s in services):
                return time.monotonic() - began
            time.sleep(1.0)
        raise ServiceError(f"not healthy after {timeout:.0f}s: {status}\n{self.logs(*services)}")

    def logs(self, *services: str, tail: int = 40) -> str:
        return self.run("logs", "--no-color", "--tail", str(tail), *services, check=False, timeout=120).stdout[-6000:]


def _port_in_use(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.compose", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down", "ps", "config"])
    parser.add_argument("--project", default=read_env_file(DEFAULT_ENV_FILE).get("COMPOSE_PROJECT_NAME", "strata"))
    parser.add_argument("--profiles", default="demo",
                        help="COMPOSE_PROFILES (default: demo; Grafana has no local image here)")
    args = parser.parse_args(argv)
    from strata_platform.services.docker import DockerService

    engine = DockerService()
    if engine.running_pid() is None or not engine.is_ready():
        print("starting the docker engine (strata-services up docker)", flush=True)
        engine.start()
    values = read_env_file(DEFAULT_ENV_FILE)
    values["COMPOSE_PROFILES"] = args.profiles
    if args.action == "up":
        busy = {key: value for key, value in values.items() if key.endswith("_PORT") and _port_in_use(int(value))}
        if busy:
            raise SystemExit(f"ports in use on 127.0.0.1: {busy} (the local services of `make services-up` use "
                             "some of the same defaults: `make services-down`, or change them in compose/.env)")
        values.update(local_image_overrides())
    state = REPO_ROOT / "build" / "compose"
    state.mkdir(parents=True, exist_ok=True)
    stack = Stack(args.project, write_env_file(state / f"{args.project}.env", values))
    if args.action == "up":
        began = time.monotonic()
        stack.up()
        services = [s for s in stack.containers() if s != "trino"]
        stack.wait_healthy(services)
        print(f"{compose_version()}: project {args.project} up in {time.monotonic() - began:.0f}s "
              "(Trino keeps starting in the background)", flush=True)
        for service, status in sorted(stack.status().items()):
            print(f"  {service:<20} {status}")
    elif args.action == "down":
        stack.down()
        print(f"project {args.project} down (volumes removed)")
    elif args.action == "ps":
        for service, status in sorted(stack.status().items()):
            print(f"  {service:<20} {status}")
    else:
        print(stack.run("config").stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["COMPOSE_FILE", "Stack", "compose_command", "compose_version", "local_image_overrides",
           "read_env_file", "write_env_file"]
