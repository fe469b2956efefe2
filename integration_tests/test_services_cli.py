"""`strata-services run NAME... -- COMMAND`: services up around a command, with their client env."""

from __future__ import annotations

import subprocess
import sys

import pytest

from strata_platform.services import registry
from strata_platform.services.base import Service

pytestmark = pytest.mark.prometheus


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "strata_platform.services.cli", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_run_starts_a_stopped_service_for_the_command_and_stops_it_after(prometheus: Service) -> None:
    prometheus.stop()  # the session's instance is restarted below, so later tests find it as before
    try:
        proc = _run("run", "prometheus", "--", sys.executable, "-c",
                    "import os, urllib.request; url = os.environ['STRATA_PROMETHEUS_URL'];"
                    "print(urllib.request.urlopen(url + '/-/ready', timeout=5).status)")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "200"  # the command saw the env and a ready server
        assert registry.get("prometheus").running_pid() is None  # started by run, so stopped by run
    finally:
        prometheus.start()


def test_run_keeps_a_running_service_and_passes_the_exit_code(prometheus: Service) -> None:
    pid = prometheus.running_pid()
    assert pid is not None
    proc = _run("run", "prometheus", "--", sys.executable, "-c", "raise SystemExit(7)")
    assert proc.returncode == 7
    assert prometheus.running_pid() == pid


def test_run_without_a_command_is_refused() -> None:
    proc = _run("run", "prometheus")
    assert proc.returncode == 2 and "needs a command after --" in proc.stderr


@pytest.mark.k8s
def test_install_runs_the_long_builds_beside_the_others_and_reports_each() -> None:
    # both are installed by now (make test installs every service first): the cached path, in parallel
    proc = _run("install", "kubernetes", "prometheus")
    assert proc.returncode == 0, proc.stderr
    installed = sorted(line.split()[0] for line in proc.stdout.splitlines() if " installed (" in line)
    assert installed == ["kubernetes", "prometheus"]


def test_install_of_an_unknown_service_names_it() -> None:
    proc = _run("install", "prometheus", "no-such-service")
    assert proc.returncode == 2 and "unknown service(s) no-such-service; known: minio" in proc.stderr
    assert " installed (" not in proc.stdout  # refused before anything is installed
