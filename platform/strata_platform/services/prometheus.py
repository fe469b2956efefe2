"""Prometheus from Debian's package, scraping itself every second on 127.0.0.1:19090.

Debian's package ships a service that its postinst would start; on machines without an init
system (and where policy-rc.d forbids it) nothing is started. Either way the server we run is
our own process, with its configuration and TSDB under the state directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from strata_platform.services.base import HOST, Service, ServiceError, apt_install, http_ok, run

BINARY = "/usr/bin/prometheus"
DISTRO_PIDFILE = "/run/prometheus/prometheus.pid"
JOB = "prometheus"
SCRAPE_INTERVAL_S = 1
TARGETS_JOB = "targets"  # file_sd: whatever target files under state_dir/targets/ name (tests add theirs)


class PrometheusService(Service):
    name = "prometheus"
    port = 19090
    startup_timeout = 60.0

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def config_file(self) -> str:
        return str(self.state_dir / "prometheus.yml")

    @property
    def targets_dir(self) -> Path:
        return self.state_dir / "targets"

    def install(self) -> None:
        fresh = subprocess.run(["dpkg", "-s", "prometheus"], check=False,
                               capture_output=True).returncode != 0
        apt_install("prometheus")
        if fresh:
            self._stop_distro_daemon()

    @staticmethod
    def _stop_distro_daemon() -> None:
        """Stop the daemon Debian's postinst starts where no policy-rc.d forbids it (on :9090).

        Only called right after our own apt install put the package on the machine, so the
        daemon it finds is one that install started.
        """
        try:
            pid = int(Path(DISTRO_PIDFILE).read_text().strip())
            exe = os.readlink(f"/proc/{pid}/exe")
        except (OSError, ValueError):
            return
        if exe == BINARY:
            subprocess.run(["/etc/init.d/prometheus", "stop"], check=False, capture_output=True,
                           timeout=60)

    def version(self) -> str:
        return run([BINARY, "--version"]).stdout.strip().splitlines()[0]

    def config_text(self) -> str:
        return (
            "# Written by strata_platform.services.prometheus; rewritten at every start.\n"
            "global:\n"
            f"  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
            "scrape_configs:\n"
            f"  - job_name: {JOB}\n"
            "    static_configs:\n"
            f"      - targets: ['{HOST}:{self.port}']\n"
            f"  - job_name: {TARGETS_JOB}\n"
            "    file_sd_configs:\n"
            f"      - files: ['{self.targets_dir}/*.json']\n"
            f"        refresh_interval: {SCRAPE_INTERVAL_S}s\n"
        )

    def prepare(self) -> None:
        (self.state_dir / "data").mkdir(parents=True, exist_ok=True)
        (self.state_dir / "prometheus.yml").write_text(self.config_text())
        self.targets_dir.mkdir(exist_ok=True)
        for stale in self.targets_dir.glob("*.json"):  # targets of a run that did not clean up
            stale.unlink()

    # -- scrape targets added at run time (file_sd) ----------------------------------------------
    def add_targets(self, name: str, targets: list[str], labels: dict[str, str] | None = None) -> Path:
        """Scrape `targets` (host:port) every second from now on, with `labels` (a ``job`` label
        here replaces the default ``targets``). Returns the file; ``remove_targets(name)`` stops it."""
        path = self.targets_dir / f"{name}.json"
        tmp = path.with_suffix(".json.tmp")  # written whole, then renamed: never read half-written
        tmp.write_text(json.dumps([{"targets": targets, "labels": labels or {}}]))
        tmp.rename(path)
        return path

    def remove_targets(self, name: str) -> None:
        (self.targets_dir / f"{name}.json").unlink(missing_ok=True)

    def command(self) -> list[str]:
        return [BINARY,
                f"--config.file={self.config_file}",
                f"--web.listen-address={HOST}:{self.port}",
                f"--storage.tsdb.path={self.state_dir / 'data'}",
                "--storage.tsdb.retention.time=2d"]

    def is_ready(self) -> bool:
        return http_ok(f"{self.url}/-/ready")

    def client_env(self) -> dict[str, str]:
        return {"STRATA_PROMETHEUS_URL": self.url}

    # -- queries --------------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns its ``data``."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=5) as resp:  # loopback only
            payload = json.load(resp)
        if payload.get("status") != "success":
            raise ServiceError(f"prometheus: {path} {params} failed: {payload}")
        return payload["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Run an instant query through the HTTP API; returns the result vector."""
        result: list[dict[str, Any]] = self.api("query", query=promql)["result"]
        return result

    def wait_for_scrape(self, timeout: float = 30.0) -> tuple[dict[str, Any], float]:
        """Wait for a live scrape: ``up{job="prometheus"}`` is 1 with a fresh sample timestamp.

        The TSDB survives restarts, so a sample from an earlier run would still answer an instant
        query for five minutes: the sample must be at most a few scrape intervals old, and the
        scrape manager must list the target as healthy. Returns (the sample, seconds waited).
        """
        began = time.monotonic()
        last: object = None
        while time.monotonic() - began < timeout:
            try:
                targets = [t for t in self.api("targets", state="active")["activeTargets"]
                           if t["labels"].get("job") == JOB]
                healthy = any(t["health"] == "up" for t in targets)
                up = self.query(f'up{{job="{JOB}"}}')
                stamps = self.query(f'timestamp(up{{job="{JOB}"}})')
                last = (targets, up, stamps)
                if healthy and up and stamps and up[0]["value"][1] == "1":
                    evaluated_at, sampled_at = float(stamps[0]["value"][0]), float(stamps[0]["value"][1])
                    if evaluated_at - sampled_at <= 3 * SCRAPE_INTERVAL_S + 1:
                        return up[0], time.monotonic() - began
            except (OSError, ValueError, KeyError, ServiceError) as exc:
                last = exc
            time.sleep(0.5)
        raise ServiceError(f"prometheus: no live scrape of job {JOB!r} after {timeout:.0f}s "
                           f"(last: {last!r})")

    def check(self) -> str:
        sample, waited = self.wait_for_scrape()
        instance = sample["metric"].get("instance", "?")
        samples = self.query(f'scrape_samples_scraped{{job="{JOB}"}}')
        count = samples[0]["value"][1] if samples else "?"
        return (f'up{{job="{JOB}",instance="{instance}"}} = 1 via the query API, fresh scrape '
                f"({count} samples per scrape; waited {waited:.1f}s)")
