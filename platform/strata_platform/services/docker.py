"""A private Docker engine (Debian's docker.io) and the locally built base image.

There is no container registry on the project's machines, so the engine is ours alone and every
image descends from ``strata/base:bookworm``, made here with debootstrap from the Debian mirror the
host's apt sources name, and ``docker import``. The daemon runs with no bridge, no iptables and no
masquerading; every container and build uses the host network, so a container reaches services on
127.0.0.1 directly and every port it opens is a host port.

Layout:
- ``STATE_DIR/docker``: the API socket (``docker.sock``), exec root (containerd's socket and
  state), pid file and log. Wiped freely.
- ``CACHE_DIR/docker/data-root``: images and layers, kept between runs (the image cache).
- ``CACHE_DIR/docker/rootfs-bookworm-<key>.tar.gz``: the debootstrapped root filesystem, so a wiped
  data-root re-imports the base image in seconds instead of bootstrapping again.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from strata_platform.services.base import (
    CACHE_DIR,
    HOST,
    STATE_DIR,
    Service,
    ServiceError,
    apt_install,
    file_lock,
    run,
    terminate_group,
)

BASE_IMAGE = "strata/base:bookworm"
SUITE = "bookworm"

DOCKER_CACHE = CACHE_DIR / "docker"
DATA_ROOT = DOCKER_CACHE / "data-root"
DOCKER_STATE = STATE_DIR / "docker"
SOCKET = DOCKER_STATE / "docker.sock"
EXEC_ROOT = DOCKER_STATE / "exec"
APT_SOURCES_LIST = Path("/etc/apt/sources.list")
APT_SOURCES_DIR = Path("/etc/apt/sources.list.d")


def docker_cli() -> str:
    """Debian's docker client (same release as the engine); any ``docker`` on PATH otherwise."""
    debian = Path("/usr/bin/docker")
    if debian.exists():
        return str(debian)
    found = shutil.which("docker")
    if found is None:
        raise ServiceError("no docker client found (install the docker.io package)")
    return found


def docker_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_HOST": f"unix://{SOCKET}"}


def docker(*args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Run the docker client against our engine; raises ServiceError on failure."""
    return run([docker_cli(), *args], env=docker_env(), timeout=timeout)


def api_get(path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET on the engine's API socket (no client needed)."""

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(str(SOCKET))
            self.sock = sock

    conn = UnixConnection("localhost", timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


# -- the base image ----------------------------------------------------------------------------

def _deb822_paragraphs(text: str) -> list[dict[str, str]]:
    paragraphs: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                paragraphs.append(current)
            current, key = {}, ""
            continue
        if raw[0] in " \t" and key:
            current[key] += "\n" + raw.strip()
            continue
        name, _, value = raw.partition(":")
        key = name.strip().lower()
        current[key] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def _is_archive_suite(suite: str) -> bool:
    """The main Debian archive suite (not -security, -updates, -backports...)."""
    return bool(suite) and "-" not in suite and "/" not in suite


def host_apt_sources() -> dict[str, str]:
    """The host's enabled apt sources files: {file name: text}."""
    found: dict[str, str] = {}
    if APT_SOURCES_DIR.is_dir():
        for path in sorted(APT_SOURCES_DIR.iterdir()):
            if path.suffix in (".sources", ".list") and path.is_file():
                found[path.name] = path.read_text()
    if APT_SOURCES_LIST.is_file():
        found["sources.list"] = APT_SOURCES_LIST.read_text()
    return found


def debian_mirror(sources: dict[str, str] | None = None) -> str:
    """First URI of the host's apt sources that serves a main Debian archive suite.

    Reads deb822 ``*.sources`` files and one-line ``*.list`` / ``sources.list`` files, so the
    mirror is whatever this machine is configured with; nothing is hard-coded.
    """
    sources = host_apt_sources() if sources is None else sources
    for name, text in sources.items():
        if name.endswith(".sources"):
            for para in _deb822_paragraphs(text):
                if para.get("enabled", "yes").lower() == "no":
                    continue
                if "deb" not in para.get("types", "").split():
                    continue
                suites = para.get("suites", "").split()
                uris = para.get("uris", "").split()
                if uris and any(_is_archive_suite(s) for s in suites):
                    return uris[0]
        else:
            for line in text.splitlines():
                line = line.split("#", 1)[0].strip()
                # deb [ options ] uri suite component...
                match = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if match and _is_archive_suite(match.group(2)):
                    return match.group(1)
    raise ServiceError("no Debian archive found in the host's apt sources "
                       f"({APT_SOURCES_DIR}/*.sources or {APT_SOURCES_LIST})")


def host_codename() -> str:
    try:
        text = Path("/etc/os-release").read_text()
    except FileNotFoundError:
        return SUITE
    match = re.search(r"^VERSION_CODENAME=(\S+)", text, re.MULTILINE)
    return match.group(1).strip('"') if match else SUITE


def image_apt_sources() -> dict[str, str]:
    """The host's apt sources as the image should carry them (suite names moved to bookworm)."""
    codename = host_codename()
    sources = host_apt_sources()
    if codename == SUITE:
        return sources
    pattern = re.compile(rf"\b{re.escape(codename)}(?=[\s/-]|$)")
    return {name: pattern.sub(SUITE, text) for name, text in sources.items()}


def rootfs_tarball() -> Path:
    """Cache file of the bootstrapped root filesystem, keyed by mirror and apt sources."""
    key = hashlib.sha256(json.dumps([SUITE, debian_mirror(), image_apt_sources()],
                                    sort_keys=True).encode()).hexdigest()[:12]
    return DOCKER_CACHE / f"rootfs-{SUITE}-{key}.tar.gz"


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    mounts = []
    with open("/proc/mounts") as fh:
        for line in fh:
            point = line.split()[1].replace("\\040", " ")
            if point.startswith(prefix) or point == prefix.rstrip("/"):
                mounts.append(point)
    return sorted(mounts, key=len, reverse=True)


def _unmount_all_under(path: Path) -> None:
    for point in _mounts_under(path):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _remove_tree(path: Path) -> None:
    """rm -rf that first unmounts anything left mounted inside (debootstrap mounts /proc...)."""
    if not path.exists():
        return
    _unmount_all_under(path)
    if _mounts_under(path):
        raise ServiceError(f"refusing to delete {path}: still has mounts {_mounts_under(path)}")
    shutil.rmtree(path, ignore_errors=True)


def build_rootfs_tarball(dest: Path) -> Path:
    """debootstrap --variant=minbase bookworm into a temp dir and tar it to dest (gzip)."""
    if dest.exists():
        return dest
    apt_install("debootstrap")
    mirror = debian_mirror()
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=dest.parent))
    rootfs = work / "rootfs"
    try:
        run(["debootstrap", "--variant=minbase", SUITE, str(rootfs), mirror], timeout=1800)
        _unmount_all_under(rootfs)
        for pattern in ("var/lib/apt/lists/*", "var/cache/apt/archives/*.deb", "var/cache/apt/*.bin",
                        "var/log/*.log", "var/log/apt/*", "tmp/*"):
            for leftover in rootfs.glob(pattern):
                if leftover.is_dir() and not leftover.is_symlink():
                    shutil.rmtree(leftover)
                elif leftover.name != "lock":
                    leftover.unlink()
        (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
        sources_dir = rootfs / "etc/apt/sources.list.d"
        sources_dir.mkdir(parents=True, exist_ok=True)
        for name, text in image_apt_sources().items():
            target = rootfs / "etc/apt" / name if name == "sources.list" else sources_dir / name
            target.write_text(text)
        # docker supplies these at run time from the host; don't bake the build host's in.
        for name in ("etc/hostname", "etc/resolv.conf"):
            (rootfs / name).unlink(missing_ok=True)
        partial = dest.with_suffix(".part")
        run(["tar", "-C", str(rootfs), "--numeric-owner", "-czf", str(partial), "."], timeout=1800)
        partial.rename(dest)
    finally:
        _remove_tree(work)
    return dest


def _cache_lock(name: str) -> contextlib.AbstractContextManager[None]:
    """An exclusive lock file under the docker cache (concurrent builders wait, not collide)."""
    return file_lock(DOCKER_CACHE / f"{name}.lock")


def image_exists(image: str = BASE_IMAGE) -> bool:
    status, _ = api_get(f"/images/{image}/json")
    return status == 200


def ensure_base_image() -> str:
    """Make sure ``strata/base:bookworm`` exists in our engine (building it if needed)."""
    if image_exists(BASE_IMAGE):
        return BASE_IMAGE
    with _cache_lock("base-image"):
        if image_exists(BASE_IMAGE):
            return BASE_IMAGE
        tarball = build_rootfs_tarball(rootfs_tarball())
        docker("import", "--change", 'CMD ["/bin/bash"]', "--change", "ENV LANG=C.UTF-8",
               "--message", f"debootstrap --variant=minbase {SUITE}", str(tarball), BASE_IMAGE,
               timeout=1800)
    return BASE_IMAGE


def build_image(context: Path, tag: str, dockerfile: Path | None = None,
                build_args: dict[str, str] | None = None) -> str:
    """``docker build`` on the host network, with ``BASE_IMAGE`` passed as a build argument.

    Dockerfiles start ``ARG BASE_IMAGE`` / ``FROM ${BASE_IMAGE}`` (no registry here, so the base is
    our local image). Uses the classic builder, which honours ``--network host`` without
    BuildKit entitlements.
    """
    ensure_base_image()
    args = ["build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}", "-t", tag]
    for key, value in (build_args or {}).items():
        args += ["--build-arg", f"{key}={value}"]
    if dockerfile is not None:
        args += ["-f", str(dockerfile)]
    run([docker_cli(), *args, str(context)], env={**docker_env(), "DOCKER_BUILDKIT": "0"},
        timeout=3600)
    return tag


# -- the engine --------------------------------------------------------------------------------

def overlay_mount_works(scratch_parent: Path) -> bool:
    """Try an overlay mount on the data-root's filesystem (what overlay2 needs)."""
    scratch_parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="overlay-probe-", dir=scratch_parent))
    try:
        for sub in ("lower", "upper", "work", "merged"):
            (scratch / sub).mkdir()
        opts = f"lowerdir={scratch}/lower,upperdir={scratch}/upper,workdir={scratch}/work"
        probe = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts,
                                str(scratch / "merged")], capture_output=True, check=False)
        if probe.returncode != 0:
            return False
        subprocess.run(["umount", str(scratch / "merged")], capture_output=True, check=False)
        return True
    finally:
        _remove_tree(scratch)


ENGINE_PROGRAMS = ("dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc",
                   "docker-proxy")


def our_processes() -> list[int]:
    """PIDs of the engine processes that are ours: dockerd, the containerd it supervises and the
    containerd shims. Each has our exec root in its arguments (the shims get our containerd
    socket's address), which keeps any other engine's processes out."""
    marker = str(EXEC_ROOT).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if os.path.basename(argv[0].decode(errors="replace")) in ENGINE_PROGRAMS and any(
                marker in arg for arg in argv[1:]):
            pids.append(int(entry.name))
    return pids


# Our containers' cgroups live under a parent of their own, so that processes of a container whose
# engine died can be found (and ended) without touching any other engine's containers.
CGROUP_PARENT = "/strata-docker-" + hashlib.sha256(str(EXEC_ROOT).encode()).hexdigest()[:8]
CGROUP_ROOT = Path("/sys/fs/cgroup")


def container_processes() -> list[int]:
    """PIDs still inside the cgroups of our containers (our cgroup parent, or docker's default
    parent for a container id that exists in our data-root)."""
    pids: set[int] = set()
    ours = {p.name for p in (DATA_ROOT / "containers").glob("*")} if DATA_ROOT.exists() else set()
    for hierarchy in [CGROUP_ROOT, *CGROUP_ROOT.glob("*")]:
        groups = list((hierarchy / CGROUP_PARENT.lstrip("/")).glob("*/cgroup.procs"))
        groups += [hierarchy / "docker" / cid / "cgroup.procs" for cid in ours]
        for procs in groups:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(line) for line in procs.read_text().split())
    pids.discard(os.getpid())
    return sorted(pids)


def _engines_on_data_root() -> list[int]:
    """dockerd processes, not ours, whose --data-root is our data-root."""
    ours = str(EXEC_ROOT).encode()
    data_root = str(DATA_ROOT).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (os.path.basename(argv[0].decode(errors="replace")) == "dockerd"
                and not any(ours in arg for arg in argv)
                and any(arg.rstrip(b"/") == data_root or arg == b"--data-root=" + data_root
                        for arg in argv)):
            pids.append(int(entry.name))
    return pids


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = pids
    while alive and time.monotonic() < deadline:
        for pid in alive:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        alive = [p for p in alive if Path(f"/proc/{p}").exists() and not _is_zombie(p)]
        if alive:
            time.sleep(0.2)
    return alive


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


class DockerService(Service):
    name = "docker"
    startup_timeout = 120.0
    stop_timeout = 60.0

    @property
    def state_dir(self) -> Path:
        return DOCKER_STATE

    @property
    def cache_dir(self) -> Path:
        return DOCKER_CACHE

    @property
    def driver_file(self) -> Path:
        return self.state_dir / "storage-driver"

    def install(self) -> None:
        """The engine (Debian's docker.io, with containerd and runc) and debootstrap; and the base
        image's root filesystem tarball, built once (the slow part of a cold start)."""
        apt_install("docker.io", "debootstrap")
        with _cache_lock("base-image"):
            build_rootfs_tarball(rootfs_tarball())

    def version(self) -> str:
        try:
            status, body = api_get("/version")
            if status == 200:
                return f"engine {json.loads(body)['Version']}"
        except OSError:
            pass
        out = run(["dockerd", "--version"]).stdout
        match = re.search(r"version (\S+?),", out)
        return f"dockerd {match.group(1) if match else out.strip()}"

    def storage_driver(self) -> str:
        """overlay2 where the kernel can mount overlay on the data-root; else fuse-overlayfs; else vfs.

        STRATA_DOCKER_STORAGE_DRIVER overrides the choice.
        """
        chosen = os.environ.get("STRATA_DOCKER_STORAGE_DRIVER")
        if chosen:
            return chosen
        if overlay_mount_works(DOCKER_CACHE / "tmp"):
            return "overlay2"
        try:
            apt_install("fuse-overlayfs")
            if Path("/dev/fuse").exists() and shutil.which("fuse-overlayfs"):
                return "fuse-overlayfs"
        except ServiceError:
            pass
        return "vfs"

    def prepare(self) -> None:
        others = _engines_on_data_root()
        if others:
            raise ServiceError(f"another dockerd (pid {others[0]}) already uses {DATA_ROOT}; two "
                               "engines on one data-root corrupt it (set STRATA_CACHE apart)")
        if Path("/run/containerd/containerd.sock").exists():
            # dockerd would use a system containerd instead of supervising its own.
            raise ServiceError("a system containerd listens on /run/containerd/containerd.sock; "
                               "our engine needs its own (stop that one or pass --containerd)")
        # Left-overs of a previous engine of ours that died without cleaning up.
        self._kill_leftovers()
        for stale in (SOCKET, self.state_dir / "dockerd.pid"):
            stale.unlink(missing_ok=True)
        if EXEC_ROOT.exists():
            _remove_tree(EXEC_ROOT)
        EXEC_ROOT.mkdir(parents=True)
        DATA_ROOT.mkdir(parents=True, exist_ok=True)
        self.driver_file.write_text(self.storage_driver())

    def command(self) -> list[str]:
        return [
            "dockerd",
            "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false",
            "--host", f"unix://{SOCKET}",
            "--data-root", str(DATA_ROOT),
            "--exec-root", str(EXEC_ROOT),
            "--pidfile", str(self.state_dir / "dockerd.pid"),
            "--storage-driver", self.driver_file.read_text().strip(),
            "--cgroup-parent", CGROUP_PARENT,
            "--userland-proxy=false",
            "--shutdown-timeout", "10",
            "--log-level", "warn",
        ]

    def environment(self) -> dict[str, str]:
        # dockerd finds containerd, runc and docker-init on PATH.
        return {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}

    def is_ready(self) -> bool:
        try:
            status, body = api_get("/_ping", timeout=2.0)
        except OSError:
            return False
        return status == 200 and body.strip() == b"OK"

    def after_start(self) -> None:
        ensure_base_image()

    def client_env(self) -> dict[str, str]:
        return {"DOCKER_HOST": f"unix://{SOCKET}", "TESTCONTAINERS_RYUK_DISABLED": "true"}

    def check(self) -> str:
        with socket.socket() as server:
            server.bind((HOST, 0))
            server.listen(1)
            server.settimeout(120)
            port = server.getsockname()[1]
            token = f"strata-{os.getpid()}-{port}"

            def answer() -> None:
                with contextlib.suppress(OSError):
                    conn, _ = server.accept()
                    with conn:
                        conn.sendall(token.encode() + b"\n")

            thread = threading.Thread(target=answer, daemon=True)
            thread.start()
            script = (f"readlink /proc/self/ns/net; exec 3<>/dev/tcp/{HOST}/{port}; "
                      "head -n1 <&3")
            out = docker("run", "--rm", "--network", "host", BASE_IMAGE, "bash", "-c", script,
                         timeout=300).stdout.split()
            thread.join(5)
        host_netns = os.readlink("/proc/self/ns/net")
        if out != [host_netns, token]:
            raise ServiceError(f"container output {out!r}, expected {[host_netns, token]!r}")
        info = json.loads(api_get("/info")[1])
        size = json.loads(api_get(f"/images/{BASE_IMAGE}/json")[1])["Size"]
        return (f"{self.version()}, driver {info['Driver']}, {BASE_IMAGE} "
                f"{size / 1e6:.0f} MB; host-network container shares {host_netns} and reached "
                f"{HOST}:{port}")

    # -- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        """SIGTERM dockerd and wait (it stops containers and its containerd); then make sure no
        containerd or shim of ours is left and nothing stays mounted under our state dir."""
        pid = self.running_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            if _wait_gone([pid], self.stop_timeout):
                terminate_group(pid, timeout=10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, 0)
                terminate_group(pid, timeout=10)
        self._kill_leftovers()
        self.pid_file.unlink(missing_ok=True)

    def _kill_leftovers(self) -> None:
        """End our engine's processes still alive, and those of its containers (by PID), then
        release their mounts."""
        # A container still running here has lost its engine: nothing will stop it but SIGKILL
        # (its init ignores SIGTERM sent from outside its PID namespace unless it handles it).
        orphans = container_processes()
        for pid in orphans:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(orphans, 10)
        leftovers = our_processes()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if not leftovers:
                break
            for pid in leftovers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            leftovers = _wait_gone(leftovers, 15)
        if not _engines_on_data_root():
            _unmount_all_under(DATA_ROOT)
        _unmount_all_under(self.state_dir)
