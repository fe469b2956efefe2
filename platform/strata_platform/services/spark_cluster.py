"""A Spark standalone cluster: one master and two workers, from PySpark's own distribution.

Each daemon is a JVM of its own started with ``pyspark/bin/spark-class`` (``SPARK_HOME`` is the
pyspark package), in its own session so that it and what it forks (a worker's executors and
their Python workers) can be stopped, or killed as a whole host dies, by its PID. Everything
listens on 127.0.0.1 (``SPARK_LOCAL_IP`` and ``--host``). Each worker has its own work
directory under the state directory. Executors run this venv's Python (``PYSPARK_PYTHON``).

A worker offers two cores so that two applications (a long-lived test session and a driver
started by a test) can hold an executor on each worker at once; ``cluster_session`` caps an
application at one core per worker (``spark.cores.max`` 2, ``spark.executor.cores`` 1), and the
master spreads an application's executors over the workers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strata_platform.services.base import HOST, Service, ServiceError, port_open, terminate_group
from strata_platform.services.spark import EXPECTED, python_env, run_smoke_job, spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_PORT = 17077
MASTER_UI_PORT = 17080
WORKER_UI_PORTS = (17081, 17082)
WORKER_CORES = 2
WORKER_MEMORY = "2g"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# what one application may take: one executor of one core on each worker
APP_CONF: dict[str, str] = {
    "spark.cores.max": "2",
    "spark.executor.cores": "1",
    "spark.executor.memory": "768m",
    # executors of a killed worker are gone for good: let the job go on on the other one
    "spark.task.maxFailures": "8",
    # jobs wait (up to 30 s) until both executors have registered
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
}


def master_url() -> str:
    return f"spark://{HOST}:{MASTER_PORT}"


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise ServiceError("pyspark is not installed in this environment (pip install 'strata[spark]')") from exc
    return Path(pyspark.__file__).resolve().parent


def master_argv(host: str, port: int, ui_port: int) -> list[str]:
    """argv of a standalone master in the foreground (with SPARK_NO_DAEMONIZE / spark-class)."""
    return [str(spark_home() / "bin" / "spark-class"), MASTER_CLASS, "--host", host, "--port", str(port),
            "--webui-port", str(ui_port)]


def worker_argv(master: str, host: str, cores: int, memory: str, work_dir: str, ui_port: int) -> list[str]:
    """argv of a standalone worker that registers with `master` and runs executors in `work_dir`."""
    return [str(spark_home() / "bin" / "spark-class"), WORKER_CLASS, master, "--host", host, "--cores", str(cores),
            "--memory", memory, "--work-dir", work_dir, "--webui-port", str(ui_port)]


def cluster_session(app_name: str = "strata-cluster", master: str | None = None, **conf: str) -> SparkSession:
    """A SparkSession whose executors run on the standalone cluster at `master` (default: this
    service's), with the driver on 127.0.0.1; `conf` as for ``spark_session``."""
    settings = {**APP_CONF, **conf}
    return spark_session(app_name, master=master or master_url(), **settings)


class SparkClusterService(Service):
    """Master + two workers, each a process group of its own, recorded by PID."""

    name = "spark_cluster"
    port = MASTER_PORT
    startup_timeout = 120.0

    def _pid_file(self, role: str) -> Path:
        return self.state_dir / f"{role}.pid"

    @property
    def pid_file(self) -> Path:
        return self._pid_file("master")

    @property
    def workers(self) -> list[str]:
        return [f"worker-{i + 1}" for i in range(len(WORKER_UI_PORTS))]

    def work_dir(self, worker: str) -> Path:
        return self.state_dir / worker / "work"

    def install(self) -> None:
        spark_class = spark_home() / "bin" / "spark-class"
        if not spark_class.exists():
            raise ServiceError(f"pyspark has no {spark_class.name} script; cannot start a standalone cluster")
        from strata_platform.services.spark import SparkService

        SparkService().install()  # Java 17+

    def version(self) -> str:
        return metadata.version("pyspark")

    def environment(self) -> dict[str, str]:
        return {**python_env(), "SPARK_HOME": str(spark_home()), "SPARK_NO_DAEMONIZE": "1",
                "SPARK_LOG_DIR": str(self.state_dir / "logs"), "SPARK_CONF_DIR": str(self.state_dir / "conf")}

    def daemon_command(self, role: str) -> list[str]:
        if role == "master":
            return master_argv(HOST, MASTER_PORT, MASTER_UI_PORT)
        index = self.workers.index(role)
        return worker_argv(master_url(), HOST, WORKER_CORES, WORKER_MEMORY, str(self.work_dir(role)),
                           WORKER_UI_PORTS[index])

    # -- processes ------------------------------------------------------------------------------
    def role_pid(self, role: str) -> int | None:
        try:
            pid = int(self._pid_file(role).read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def start(self) -> float:
        began = time.monotonic()
        if self.running_pid() is not None and self.is_ready():
            return 0.0
        self.install()
        self.stop()  # a partial cluster from an interrupted run
        (self.state_dir / "conf").mkdir(parents=True, exist_ok=True)
        self._launch("master")
        self._wait(began, lambda: port_open(MASTER_PORT) and self._master_state() is not None)
        for worker in self.workers:
            self.start_worker(worker)
        self._wait(began, self.is_ready)
        return time.monotonic() - began

    def _launch(self, role: str) -> int:
        directory = self.state_dir / role
        directory.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.environment()}
        with open(directory / "daemon.log", "ab") as log:
            proc = subprocess.Popen(self.daemon_command(role), cwd=directory, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._pid_file(role).write_text(str(proc.pid))
        return proc.pid

    def start_worker(self, worker: str) -> int:
        """Start one worker (again, e.g. after a test killed it); returns its PID once the master
        counts it alive."""
        self.work_dir(worker).mkdir(parents=True, exist_ok=True)
        pid = self._launch(worker)
        self._wait(time.monotonic(), lambda: self.alive_workers() >= self._expected_alive())
        return pid

    def _expected_alive(self) -> int:
        return sum(self.role_pid(w) is not None for w in self.workers)

    def kill_worker(self, worker: str) -> int:
        """SIGKILL a worker and everything it started (its executors and their Python workers),
        as when its host dies; returns how many processes were killed."""
        pid = self.role_pid(worker)
        if pid is None:
            raise ServiceError(f"{worker} is not running")
        killed = kill_session(pid)
        self._pid_file(worker).unlink(missing_ok=True)
        return killed

    def _wait(self, began: float, ready: Callable[[], bool]) -> None:
        deadline = began + self.startup_timeout
        while time.monotonic() < deadline:
            dead = [r for r in ("master", *self.workers) if self._pid_file(r).exists() and self.role_pid(r) is None]
            if dead:
                raise ServiceError(f"spark_cluster: {', '.join(dead)} exited before the cluster was ready; "
                                   f"last log lines:\n{self.role_log_tail(dead[0])}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise ServiceError(f"spark_cluster not ready after {self.startup_timeout:.0f}s; master log:\n"
                           f"{self.role_log_tail('master')}")

    def stop(self) -> None:
        for role in (*self.workers, "master"):
            pid = self.role_pid(role)
            if pid is not None:
                terminate_group(pid)
                kill_session(pid)  # Python workers that left the daemon's process group
            self._pid_file(role).unlink(missing_ok=True)

    def role_log_tail(self, role: str, lines: int = 30) -> str:
        try:
            text = (self.state_dir / role / "daemon.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def log_tail(self, lines: int = 30) -> str:
        return self.role_log_tail("master", lines)

    # -- state ----------------------------------------------------------------------------------
    def _master_state(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{MASTER_UI_PORT}/json/", timeout=2) as resp:
                state: dict[str, Any] = json.load(resp)
                return state
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> int:
        state = self._master_state() or {}
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def is_ready(self) -> bool:
        return self.alive_workers() >= len(self.workers)

    def client_env(self) -> dict[str, str]:
        return {**python_env(), "STRATA_SPARK_MASTER": master_url()}

    def check(self) -> str:
        began = time.monotonic()
        spark = cluster_session("strata-spark-cluster-check")
        try:
            result = run_smoke_job(spark)
            executors = executor_pids(spark)
        finally:
            spark.stop()
        wrong = {k: (result[k], v) for k, v in EXPECTED.items() if result[k] != v}
        if wrong:
            raise ServiceError(f"wrong results (got, expected): {wrong}")
        if os.getpid() in executors or not executors:
            raise ServiceError(f"tasks did not run in executor processes of the cluster: {executors}")
        return (f"master {master_url()}, {self.alive_workers()} workers; job in "
                f"{time.monotonic() - began:.1f}s on {len(executors)} executors, "
                "results correct")


def executor_pids(spark: SparkSession) -> set[int]:
    """PIDs of the Python workers that ran a few small tasks (parents: the executor JVMs)."""
    rdd = spark.sparkContext.parallelize(range(8), 8)
    return set(rdd.map(lambda _x: os.getppid()).collect())


def session_members(session_id: int) -> list[int]:
    """Live processes of one session (a daemon we started with a new session, and its children)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()  # state, ppid, pgrp, session, ...
        if int(fields[3]) == session_id and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def kill_session(session_id: int, timeout: float = 30.0) -> int:
    """SIGKILL every process of a session, by id, until none is left; returns how many."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in session_members(session_id) if p != os.getpid()]
        if not alive:
            return len(killed)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    raise ServiceError(f"processes of session {session_id} survived SIGKILL")


if __name__ == "__main__":  # pragma: no cover - manual use
    print(SparkClusterService().run_check().line(), file=sys.stderr)
