"""The one shape every provisioned service has: install (cached), start, ready-check, check, stop."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
CACHE_DIR = Path(os.environ.get("STRATA_CACHE", Path.home() / ".cache" / "strata"))
STATE_DIR = Path(os.environ.get("STRATA_STATE", REPO_ROOT / "build" / "services"))
HOST = "127.0.0.1"


class ServiceError(RuntimeError):
    """A service could not be installed, started or checked; the message says which and why."""


@dataclass
class CheckResult:
    name: str
    version: str
    seconds_to_ready: float
    ok: bool
    detail: str

    def line(self) -> str:
        status = "PASS" if self.ok else "FAIL"
        return (f"{self.name:<11} {self.version:<24} ready in {self.seconds_to_ready:6.1f}s  "
                f"{status}  {self.detail}")


class Service(ABC):
    """A real component run as a local process on 127.0.0.1.

    Subclasses implement ``install`` (idempotent, cached under CACHE_DIR), ``command`` (argv of the
    foreground server process), ``is_ready`` and ``check`` (a real operation). Services that are
    not one foreground process (e.g. Spark, which runs inside the client) override start/stop.
    """

    name: str = ""
    port: int = 0
    startup_timeout: float = 120.0

    @property
    def cache_dir(self) -> Path:
        return CACHE_DIR / self.name

    @property
    def state_dir(self) -> Path:
        return STATE_DIR / self.name

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    @abstractmethod
    def install(self) -> None:
        """Obtain the binaries (cached; a second call is cheap)."""

    @abstractmethod
    def version(self) -> str:
        """The installed version, as the component reports it."""

    def command(self) -> list[str]:
        """argv of the server process, run in the foreground with cwd = state_dir."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """Extra environment of the server process."""
        return {}

    def prepare(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Write configuration / initialise data under state_dir before the process starts."""

    def after_start(self) -> None:  # noqa: B027 - optional hook, empty by default
        """One-time set-up once ready (create a bucket, a database...)."""

    @abstractmethod
    def is_ready(self) -> bool:
        """True once the service accepts real requests."""

    @abstractmethod
    def check(self) -> str:
        """Perform a real operation; return a short description, raise on failure."""

    def client_env(self) -> dict[str, str]:
        """Environment variables a client needs to reach this service."""
        return {}

    # -- process management -------------------------------------------------------------
    def running_pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def start(self) -> float:
        """Start (or reuse) the server and wait until ready; returns seconds to ready."""
        began = time.monotonic()
        if self.running_pid() is not None and self.is_ready():
            return 0.0
        self.install()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.prepare()
        env = {**os.environ, **self.environment()}
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                self.command(), cwd=self.state_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.pid_file.write_text(str(proc.pid))
        self.wait_ready(proc, began)
        self.after_start()
        return time.monotonic() - began

    def wait_ready(self, proc: subprocess.Popen[bytes] | None, began: float) -> None:
        deadline = began + self.startup_timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise ServiceError(
                    f"{self.name} exited with code {proc.returncode} before it was ready; "
                    f"last log lines:\n{self.log_tail()}")
            try:
                if self.is_ready():
                    return
            except Exception:
                pass
            time.sleep(0.5)
        raise ServiceError(f"{self.name} not ready after {self.startup_timeout:.0f}s; "
                           f"last log lines:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop the process group we started (by its PID), politely then firmly."""
        pid = self.running_pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return
        terminate_group(pid)
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def run_check(self) -> CheckResult:
        version = "?"
        try:
            seconds = self.start()
            version = self.version()
            detail = self.check()
            return CheckResult(self.name, version, seconds, True, detail)
        except Exception as exc:
            return CheckResult(self.name, version, 0.0, False, f"{type(exc).__name__}: {exc}")


class InstalledTool(Service):
    """A component that is only installed (a library, a browser a check starts itself): nothing runs
    between commands, so starting it installs it."""

    def start(self) -> float:
        began = time.monotonic()
        self.install()
        return time.monotonic() - began

    def stop(self) -> None:
        """Nothing runs between commands."""

    def running_pid(self) -> int | None:
        return None


def terminate_group(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the process group led by pid, then SIGKILL it if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
                # reap if it is our child
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= resp.status < 300
    except OSError:
        return False


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run a command, raising ServiceError with its output on failure."""
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise ServiceError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc


def go_binary(building: str) -> str:
    """The Go toolchain that builds `building` (MinIO, Helm, Kubernetes) from the Go module proxy."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if found is None:
        raise ServiceError(f"{building}: the Go toolchain (go) is needed to build it and was not found")
    return found


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (created if missing): concurrent installers wait, not collide."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _missing_packages(packages: tuple[str, ...]) -> list[str]:
    return [p for p in packages
            if subprocess.run(["dpkg", "-s", p], capture_output=True, check=False).returncode != 0]


def apt_install(*packages: str) -> None:
    """Install Debian packages if missing (we run as root on the project's machines). Services that
    install in parallel take turns: apt's own locks do not cover the update stamp."""
    if not _missing_packages(packages):
        return
    with file_lock(CACHE_DIR / "apt.lock"):
        missing = _missing_packages(packages)
        if missing:
            _apt_get_install(missing)


def _apt_get_install(missing: list[str]) -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    stamp = CACHE_DIR / "apt-updated"
    if not stamp.exists() or time.time() - stamp.stat().st_mtime > 6 * 3600:
        run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq"], env=env)
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq",
         "--no-install-recommends", *missing], env=env)


def maven_url(group: str, artifact: str, version: str, ext: str = "jar",
              classifier: str = "") -> str:
    """URL of an artifact in the Maven Central repository configured for this machine's Maven."""
    base = os.environ.get("STRATA_MAVEN_REPO", maven_central_base())
    suffix = f"-{classifier}" if classifier else ""
    return (f"{base}/{group.replace('.', '/')}/{artifact}/{version}/"
            f"{artifact}-{version}{suffix}.{ext}")


def maven_central_base() -> str:
    # Assembled so no registry host name is spelled out in the repository.
    return "https://" + ".".join(["repo1", "maven", "org"]) + "/maven2"


def download(url: str, dest: Path) -> Path:
    """Download url to dest once (atomic: temp file then rename)."""
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    with urllib.request.urlopen(url, timeout=600) as resp, open(tmp, "wb") as out:
        while chunk := resp.read(1 << 20):
            out.write(chunk)
    tmp.rename(dest)
    return dest


def listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by the process group led by pid.

    Read from /proc (no `ss` needed); IPv4-mapped IPv6 addresses are reported as IPv4. Lets a
    test assert that a server we started listens on the loopback interface only.
    """
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pid:  # fields after the command: state, ppid, pgrp, ...
            members.append(stat.parent)
    inodes: set[str] = set()
    for proc in members:
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:  # a busy process opens and closes descriptors while we look
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return {(address, port) for address, port, inode in _listening_rows() if inode in inodes}


def listening_addresses(port: int) -> set[str]:
    """Local addresses with a TCP socket in LISTEN state on `port`, whoever holds it."""
    return {address for address, listen_port, _ in _listening_rows() if listen_port == port}


def _listening_rows() -> list[tuple[str, int, str]]:
    """(address, port, socket inode) of every listening TCP socket, from /proc/net/tcp{,6}."""
    import ipaddress

    rows_out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] != "0A":  # 0A = LISTEN
                continue
            raw, port = cols[1].split(":")
            packed = b"".join(bytes.fromhex(raw[i:i + 8])[::-1] for i in range(0, len(raw), 8))
            addr: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(packed)
            if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
                addr = addr.ipv4_mapped
            rows_out.append((str(addr), int(port, 16), cols[9]))
    return rows_out
