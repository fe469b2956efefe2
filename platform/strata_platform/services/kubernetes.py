"""A single-node Kubernetes on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, containerd and a kubelet, each a process of ours.

Binaries: Kubernetes' own from the Go module proxy (``kubernetes_build``, cached under
``CACHE_DIR/kubernetes/bin``), etcd, containerd, runc and the CNI loopback plugin from Debian.

What makes it fit a machine without a pod network or an image registry:

* pods run with ``hostNetwork: true``: the CNI configuration holds only ``loopback`` (enough for
  the node to be Ready) and there is no kube-proxy nor cluster DNS, so a pod reaches another
  through 127.0.0.1 (e.g. ``hostAliases`` naming its Services) and every port is a host port;
* images are imported into containerd's ``k8s.io`` namespace (``import_docker_images``) and used
  with ``imagePullPolicy: Never``; the sandbox image is built here from the ``pause`` binary;
* containerd has its own configuration, socket and state under this service's state dir, and its
  image store under the cache (imports survive restarts); ``restrict_oom_score_adj`` is on (a
  negative oom_score_adj is not permitted here and runc fails without it);
* the kubelet uses cgroupfs without QoS cgroups and tolerates cgroup v1 and swap; image garbage
  collection is off (a removed image cannot be pulled again). It refuses a loopback node IP and
  then publishes no address, so the service records 127.0.0.1 as the node's InternalIP: the API
  server reaches the kubelet there (logs, exec) and host-network pods get it as their IP;
* storage: PersistentVolumes of ``hostPath`` directories under the state dir (mode 0777: fsGroup
  does not apply to hostPath), with no StorageClass, so claims without a class bind to them.

Every start is a fresh cluster (etcd data, volumes and pods of a previous start are wiped).
Authentication is one bearer token (group system:masters) written into ``kubeconfig``.
The kubelet sets six kernel tunables at start (vm.overcommit_memory...); ``stop`` puts back the
values it found.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import secrets
import shutil
import signal
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strata_platform.services import kubernetes_build as build
from strata_platform.services.base import (
    CACHE_DIR,
    HOST,
    Service,
    ServiceError,
    apt_install,
    http_ok,
    run,
    terminate_group,
)

ETCD_CLIENT_PORT = 12379
ETCD_PEER_PORT = 12380
APISERVER_PORT = 16443
CONTROLLER_MANAGER_PORT = 17257
SCHEDULER_PORT = 17259
KUBELET_PORT = 17250
KUBELET_HEALTHZ_PORT = 17248
NODE_NAME = "strata-node"
SERVICE_CIDR = "10.96.0.0/16"
PAUSE_IMAGE = f"docker.io/strata/pause:{build.K8S_VERSION}"
CONTAINERD_ROOT = CACHE_DIR / "kubernetes" / "containerd-root"
NAMESPACE = "k8s.io"  # containerd namespace of the CRI plugin
VOLUME_COUNT = 12
VOLUME_CAPACITY = "100Gi"
# what the kubelet rewrites at start (container_manager_linux.go, setupKernelTunables)
KERNEL_TUNABLES = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                   "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes")
CNI_BIN_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class Component:
    name: str
    argv: Callable[[], list[str]]
    ready: Callable[[], bool]


def _insecure_https_ok(url: str) -> bool:
    """GET url over TLS without verifying the server (self-signed serving certs of the control plane)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


class KubernetesService(Service):
    name = "kubernetes"
    port = APISERVER_PORT
    startup_timeout = 240.0

    # -- layout -------------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def containerd_socket(self) -> Path:
        return self.state_dir / "containerd" / "containerd.sock"

    @property
    def kubelet_dir(self) -> Path:
        return self.state_dir / "kubelet"

    @property
    def volumes_dir(self) -> Path:
        return self.state_dir / "volumes"

    @property
    def pid_file(self) -> Path:
        return self._pid_file("kubelet")

    def _pid_file(self, component: str) -> Path:
        return self.state_dir / f"{component}.pid"

    def _log(self, component: str) -> Path:
        return self.state_dir / f"{component}.log"

    @property
    def log_file(self) -> Path:
        return self._log("kubelet")

    @property
    def token(self) -> str:
        return (self.pki / "token").read_text().strip()

    @property
    def snapshotter(self) -> str:
        return (self.state_dir / "snapshotter").read_text().strip()

    # -- install ------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install("etcd-server", "containerd", "runc", "containernetworking-plugins")
        build.ensure_built()
        if not shutil.which("openssl"):
            apt_install("openssl")

    def version(self) -> str:
        out = run([str(build.binary("kube-apiserver")), "--version"]).stdout.strip()
        return out.replace("Kubernetes ", "")

    def client_env(self) -> dict[str, str]:
        return {"KUBECONFIG": str(self.kubeconfig)}

    # -- configuration ------------------------------------------------------------------------
    def prepare(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        from strata_platform.services.docker import overlay_mount_works

        (self.state_dir / "snapshotter").write_text(
            "overlayfs" if overlay_mount_works(CONTAINERD_ROOT.parent / "tmp") else "native")
        self._write_pki()
        self._write_kubeconfigs()
        self._write_containerd_config()
        self._write_kubelet_config()
        self._save_kernel_tunables()

    def _openssl(self, *args: str) -> None:
        run(["openssl", *args], cwd=str(self.pki))

    def _write_pki(self) -> None:
        self.pki.mkdir(parents=True)
        days = "3650"
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
                      "-days", days, "-subj", "/CN=strata-kubernetes-ca")
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key",
                      "-out", "apiserver.crt", "-days", days, "-subj", "/CN=kube-apiserver",
                      "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-addext", "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,"
                                 "DNS:kubernetes.default,DNS:kubernetes.default.svc")
        self._openssl("genrsa", "-out", "service-account.key", "2048")
        self._openssl("rsa", "-in", "service-account.key", "-pubout", "-out", "service-account.pub")
        token = secrets.token_hex(24)
        (self.pki / "token").write_text(token + "\n")
        (self.pki / "tokens.csv").write_text(f'{token},strata-admin,strata-admin,"system:masters"\n')

    def _kubeconfig_text(self) -> str:
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "strata",
            "clusters": [{"name": "strata", "cluster": {
                "server": f"https://{HOST}:{APISERVER_PORT}", "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": "strata-admin", "user": {"token": self.token}}],
            "contexts": [{"name": "strata", "context": {"cluster": "strata", "user": "strata-admin",
                                                        "namespace": "default"}}],
        }
        return json.dumps(config, indent=2) + "\n"

    def _write_kubeconfigs(self) -> None:
        self.kubeconfig.write_text(self._kubeconfig_text())
        self.kubeconfig.chmod(0o600)

    def _write_containerd_config(self) -> None:
        base = self.state_dir / "containerd"
        cni_conf = self.state_dir / "cni" / "net.d"
        cni_conf.mkdir(parents=True)
        base.mkdir()
        (cni_conf / "10-loopback.conflist").write_text(json.dumps(
            {"cniVersion": "1.0.0", "name": "loopback", "plugins": [{"type": "loopback"}]}) + "\n")
        CONTAINERD_ROOT.mkdir(parents=True, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        (base / "config.toml").write_text(f"""version = 2
root = "{CONTAINERD_ROOT}"
state = "{base / 'state'}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{self.containerd_socket}"

[ttrpc]
  address = "{base / 'containerd-ttrpc.sock'}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{base / 'opt'}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "{HOST}"
  stream_server_port = "0"
  enable_selinux = false

[{cri}.containerd]
  snapshotter = "{self.snapshotter}"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  BinaryName = "{shutil.which('runc') or '/usr/sbin/runc'}"
  Root = "{base / 'runc'}"
  SystemdCgroup = false

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{cni_conf}"
""")

    def _write_kubelet_config(self) -> None:
        self.kubelet_dir.mkdir(parents=True)
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "address": HOST, "port": KUBELET_PORT, "readOnlyPort": 0,
            "healthzBindAddress": HOST, "healthzPort": KUBELET_HEALTHZ_PORT,
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs", "failCgroupV1": False, "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [], "failSwapOn": False,
            # loopback only: the API server (system:masters token) is the only client
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "podLogsDir": str(self.kubelet_dir / "pod-logs"),
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "makeIPTablesUtilChains": False,
            "serializeImagePulls": False,
            "resolvConf": "/etc/resolv.conf",
        }
        (self.kubelet_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    # -- kernel tunables the kubelet changes --------------------------------------------------
    def _save_kernel_tunables(self) -> None:
        saved = self.state_dir / "kernel-tunables.json"
        if saved.exists():
            return  # a previous start's values are the original ones
        values = {}
        for name in KERNEL_TUNABLES:
            with contextlib.suppress(OSError):
                values[name] = (Path("/proc/sys") / name).read_text().strip()
        saved.write_text(json.dumps(values))

    def _restore_kernel_tunables(self) -> None:
        saved = self.state_dir / "kernel-tunables.json"
        if not saved.exists():
            return
        for name, value in json.loads(saved.read_text()).items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / name).write_text(value)
        saved.unlink()

    # -- the components -----------------------------------------------------------------------
    def components(self) -> list[Component]:
        return [
            Component("etcd", self._etcd_argv, lambda: http_ok(f"http://{HOST}:{ETCD_CLIENT_PORT}/health")),
            Component("kube-apiserver", self._apiserver_argv, lambda: self.api_ok("/readyz")),
            Component("containerd", self._containerd_argv, self._containerd_ready),
            Component("kube-controller-manager", self._controller_manager_argv,
                      lambda: _insecure_https_ok(f"https://{HOST}:{CONTROLLER_MANAGER_PORT}/healthz")),
            Component("kube-scheduler", self._scheduler_argv,
                      lambda: _insecure_https_ok(f"https://{HOST}:{SCHEDULER_PORT}/healthz")),
            Component("kubelet", self._kubelet_argv,
                      lambda: http_ok(f"http://{HOST}:{KUBELET_HEALTHZ_PORT}/healthz")),
        ]

    def _etcd_argv(self) -> list[str]:
        client, peer = f"http://{HOST}:{ETCD_CLIENT_PORT}", f"http://{HOST}:{ETCD_PEER_PORT}"
        return ["etcd", "--name", "strata", "--data-dir", str(self.state_dir / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"strata={peer}", "--enable-v2=false", "--log-level", "warn"]

    def _apiserver_argv(self) -> list[str]:
        pki = self.pki
        return [str(build.binary("kube-apiserver")),
                f"--etcd-servers=http://{HOST}:{ETCD_CLIENT_PORT}",
                f"--bind-address={HOST}", f"--advertise-address={HOST}", f"--secure-port={APISERVER_PORT}",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--token-auth-file={pki / 'tokens.csv'}", "--authorization-mode=RBAC",
                f"--service-account-issuer=https://{HOST}:{APISERVER_PORT}",
                f"--service-account-key-file={pki / 'service-account.pub'}",
                f"--service-account-signing-key-file={pki / 'service-account.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--allow-privileged=true",
                "--kubelet-preferred-address-types=InternalIP", f"--cert-dir={pki}", "--profiling=false", "--v=0"]

    def _containerd_argv(self) -> list[str]:
        return ["containerd", "--config", str(self.state_dir / "containerd" / "config.toml"), "--log-level", "warn"]

    def _containerd_ready(self) -> bool:
        if not self.containerd_socket.exists():
            return False
        return self.ctr("version", check=False).returncode == 0

    def _controller_manager_argv(self) -> list[str]:
        pki = self.pki
        return [str(build.binary("kube-controller-manager")), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                f"--bind-address={HOST}", f"--secure-port={CONTROLLER_MANAGER_PORT}", "--leader-elect=false",
                f"--service-account-private-key-file={pki / 'service-account.key'}",
                f"--root-ca-file={pki / 'ca.crt'}", f"--cert-dir={pki / 'controller-manager'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--v=0"]

    def _scheduler_argv(self) -> list[str]:
        return [str(build.binary("kube-scheduler")), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                f"--bind-address={HOST}", f"--secure-port={SCHEDULER_PORT}", "--leader-elect=false",
                f"--cert-dir={self.pki / 'scheduler'}", "--profiling=false", "--v=0"]

    def _kubelet_argv(self) -> list[str]:
        return [str(build.binary("kubelet")), f"--config={self.kubelet_dir / 'config.json'}",
                f"--kubeconfig={self.kubeconfig}", f"--root-dir={self.kubelet_dir}",
                f"--hostname-override={NODE_NAME}", f"--node-ip={HOST}", "--v=0"]

    # -- start --------------------------------------------------------------------------------
    def component_pid(self, component: str) -> int | None:
        try:
            pid = int(self._pid_file(component).read_text().strip())
            os.kill(pid, 0)
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None
        return pid

    def start(self) -> float:
        began = time.monotonic()
        if self.running_pid() is not None and self.is_ready():
            return 0.0
        self.install()
        self.stop()  # what a previous start left behind (its pods included)
        if self.state_dir.exists():
            from strata_platform.services.docker import _remove_tree

            _remove_tree(self.state_dir)
        self.prepare()
        try:
            for component in self.components():
                self._start_component(component)
                if component.name == "containerd":
                    self._remove_leftover_pods()
                    self.import_image_archive(pause_image_archive(), [PAUSE_IMAGE])
            self._wait("node registered", lambda: self.api_ok(f"/api/v1/nodes/{NODE_NAME}"))
            self._wait("node Ready at 127.0.0.1", self._ready_with_address)
            self._create_volumes()
        except BaseException:
            self.stop()
            raise
        return time.monotonic() - began

    def _start_component(self, component: Component) -> None:
        env = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin:" + os.environ.get("PATH", "")}
        with open(self._log(component.name), "ab") as log:
            proc = subprocess.Popen(component.argv(), cwd=self.state_dir, env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self._pid_file(component.name).write_text(str(proc.pid))

        def ready() -> bool:
            if proc.poll() is not None:
                raise ServiceError(f"{component.name} exited with code {proc.returncode}; last log lines:\n"
                                   f"{self.log_tail_of(component.name)}")
            return component.ready()

        self._wait(f"{component.name} ready", ready, log_of=component.name)

    def _wait(self, what: str, probe: Callable[[], bool], log_of: str = "kubelet") -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            try:
                if probe():
                    return
            except ServiceError:
                raise
            except Exception:
                pass
            time.sleep(0.5)
        raise ServiceError(f"kubernetes: {what} not reached after {self.startup_timeout:.0f}s; "
                           f"last log lines of {log_of}:\n{self.log_tail_of(log_of)}")

    def log_tail_of(self, component: str, lines: int = 30) -> str:
        try:
            return "\n".join(self._log(component).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def is_ready(self) -> bool:
        try:
            node = self.api("GET", f"/api/v1/nodes/{NODE_NAME}")
        except (OSError, ServiceError, ValueError):
            return False
        conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        addresses = [a["address"] for a in node.get("status", {}).get("addresses", [])]
        return conditions.get("Ready") == "True" and addresses == [HOST]

    def _ready_with_address(self) -> bool:
        if not self.is_ready():
            self._set_node_address()  # (again, should a status update of the kubelet have raced ours)
            return False
        return True

    def _set_node_address(self) -> None:
        """Record 127.0.0.1 as the node's address. The kubelet refuses a loopback node IP and then
        publishes no address at all (it never overwrites one it did not set): without it the API
        server cannot reach the kubelet (logs, exec) and host-network pods get no IP."""
        self.api("PATCH", f"/api/v1/nodes/{NODE_NAME}/status",
                 {"status": {"addresses": [{"type": "InternalIP", "address": HOST}]}},
                 "application/merge-patch+json")

    def _create_volumes(self) -> None:
        """hostPath PersistentVolumes without a class: what claims of no StorageClass bind to."""
        for index in range(VOLUME_COUNT):
            path = self.volumes_dir / f"pv-{index:02d}"
            path.mkdir(parents=True)
            path.chmod(0o777)  # pods run as several uids, and fsGroup does not apply to hostPath
            self.api("POST", "/api/v1/persistentvolumes", {
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": f"strata-local-{index:02d}", "labels": {"strata.local/volume": "hostpath"}},
                "spec": {"capacity": {"storage": VOLUME_CAPACITY},
                         "accessModes": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"],
                         "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                         "hostPath": {"path": str(path), "type": "Directory"}}})

    def reclaim_released_volumes(self) -> list[str]:
        """Empty the volumes whose claim was deleted and make them Available again (what a
        provisioner's Delete policy would do); returns their names."""
        reclaimed = []
        for volume in self.api("GET", "/api/v1/persistentvolumes")["items"]:
            if volume["status"].get("phase") != "Released":
                continue
            path = Path(volume["spec"]["hostPath"]["path"])
            for entry in path.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            name = volume["metadata"]["name"]
            self.api("PATCH", f"/api/v1/persistentvolumes/{name}", [{"op": "remove", "path": "/spec/claimRef"}],
                     "application/json-patch+json")
            reclaimed.append(name)
        return reclaimed

    # -- check --------------------------------------------------------------------------------
    def check(self) -> str:
        """A host-network pod on the sandbox image runs to completion and the node reports it."""
        name = f"check-{secrets.token_hex(3)}"
        self.api("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"hostNetwork": True, "restartPolicy": "Never", "automountServiceAccountToken": False,
                     "containers": [{"name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
                                     "command": ["/pause"]}]}})
        self._wait("check pod Running",
                   lambda: self.api("GET", f"/api/v1/namespaces/default/pods/{name}")["status"].get("phase")
                   == "Running")
        pod = self.api("GET", f"/api/v1/namespaces/default/pods/{name}")
        self.api("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
        return f"node {NODE_NAME} Ready; pod {name} ran on {pod['status'].get('podIP')}"

    # -- clients ------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: dict[str, Any] | list[Any] | None = None,
                content_type: str = "application/json") -> bytes:
        """One request to the API server as the admin; returns the answer's body."""
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"https://{HOST}:{APISERVER_PORT}{path}", data=data, method=method,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as resp:
                answer: bytes = resp.read()
                return answer
        except urllib.error.HTTPError as exc:
            raise ServiceError(f"kubernetes API {method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def api(self, method: str, path: str, body: dict[str, Any] | list[Any] | None = None,
            content_type: str = "application/json") -> dict[str, Any]:
        """A JSON request to the API server; returns the JSON answer."""
        answer: dict[str, Any] = json.loads(self.request(method, path, body, content_type) or b"{}")
        return answer

    def api_ok(self, path: str) -> bool:
        try:
            self.request("GET", path)
        except (OSError, ServiceError):
            return False
        return True

    def kubectl(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return run([str(build.binary("kubectl")), f"--kubeconfig={self.kubeconfig}", *args], timeout=timeout)

    def ctr(self, *args: str, check: bool = True, stdin: Any = None,
            timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        argv = ["ctr", "--address", str(self.containerd_socket), "--namespace", NAMESPACE, *args]
        if check:
            return run(argv, timeout=timeout, stdin=stdin)
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=stdin, check=False)

    # -- images -------------------------------------------------------------------------------
    def image_ids(self) -> dict[str, str]:
        """name -> config digest of every image in containerd's k8s.io namespace."""
        out = self.ctr("images", "list").stdout.splitlines()[1:]
        return {cols[0]: cols[2] for cols in (line.split() for line in out) if len(cols) >= 3}

    def import_image_archive(self, archive: Path, names: list[str]) -> None:
        """Import a `docker save` archive unless every name in it is there already."""
        present = self.image_ids()
        if all(name in present for name in names):
            return
        with open(archive, "rb") as stdin:
            self.ctr("images", "import", "--snapshotter", self.snapshotter, "-", stdin=stdin, timeout=1800)

    def import_docker_images(self, tags: list[str]) -> list[str]:
        """Copy images from the project's Docker engine into the cluster (those not there yet, or whose
        image id changed); returns the tags imported."""
        from strata_platform.services.docker import docker_cli, docker_env

        present = self.image_ids()
        wanted = []
        for tag in tags:
            image_id = run([docker_cli(), "image", "inspect", "--format", "{{.Id}}", tag], env=docker_env()).stdout
            ours = present.get(_qualified(tag))
            if ours is None or not self._same_config(ours, image_id.strip()):
                wanted.append(tag)
        if wanted:
            with subprocess.Popen([docker_cli(), "save", *wanted], env=docker_env(),
                                  stdout=subprocess.PIPE) as save:
                self.ctr("images", "import", "--snapshotter", self.snapshotter, "-", stdin=save.stdout,
                         timeout=1800)
                if save.wait(600) != 0:
                    raise ServiceError(f"docker save {wanted} failed ({save.returncode})")
        return wanted

    def _same_config(self, manifest_digest: str, docker_image_id: str) -> bool:
        """Whether containerd's image (by manifest digest) has the config docker calls its image id."""
        manifest = json.loads(self.ctr("content", "get", manifest_digest).stdout)
        return bool(manifest.get("config", {}).get("digest") == docker_image_id)

    # -- stop ---------------------------------------------------------------------------------
    def running_pid(self) -> int | None:
        return self.component_pid("kube-apiserver") or self.component_pid("kubelet")

    def stop(self) -> None:
        """Kubelet first (no pod restarted meanwhile), then every pod's processes, containerd and
        its shims, the control plane, etcd; then unmount what the pods left mounted."""
        self._stop_component("kubelet")
        if self.component_pid("containerd") is not None:
            self._remove_leftover_pods()
        for component in ("containerd", "kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop_component(component)
        self._kill_shims()
        self._restore_kernel_tunables()
        if self.state_dir.exists():
            from strata_platform.services.docker import _unmount_all_under

            _unmount_all_under(self.state_dir)

    def _stop_component(self, component: str) -> None:
        pid = self.component_pid(component)
        if pid is not None:
            terminate_group(pid)
        self._pid_file(component).unlink(missing_ok=True)

    def _remove_leftover_pods(self) -> None:
        """SIGKILL every task in containerd's k8s.io namespace, then delete the tasks and containers."""
        tasks = self.ctr("tasks", "list", check=False).stdout.splitlines()[1:]
        ids = [line.split()[0] for line in tasks if line.split()]
        for task_id in ids:
            self.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", task_id, check=False)
        for task_id in ids:
            self.ctr("tasks", "delete", "--force", task_id, check=False)
        containers = self.ctr("containers", "list", "--quiet", check=False).stdout.split()
        if containers:
            self.ctr("containers", "delete", *containers, check=False)

    def _kill_shims(self) -> None:
        """containerd shims of our containerd (they name its socket in their arguments)."""
        marker = str(self.containerd_socket).encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if os.path.basename(argv[0]).startswith(b"containerd-shim") and any(marker in a for a in argv[1:]):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(entry.name), signal.SIGKILL)


def _qualified(tag: str) -> str:
    """The name containerd stores for a Docker tag (docker.io/library/ for single-component names)."""
    name = tag if "/" in tag else f"library/{tag}"
    first = name.split("/", 1)[0]
    return name if "." in first or ":" in first or first == "localhost" else f"docker.io/{name}"


def pause_image_archive() -> Path:
    """A `docker save` archive of the sandbox image: one layer holding the pause binary (cached)."""
    dest = build.K8S_DIR / f"pause-{build.K8S_VERSION}.tar"
    if dest.exists():
        return dest
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(build.binary("pause")), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755
        with open(build.binary("pause"), "rb") as binary:
            tar.addfile(info, binary)
    layer_bytes = layer.getvalue()
    layer_digest = hashlib.sha256(layer_bytes).hexdigest()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    config = json.dumps({"architecture": arch, "os": "linux",
                         "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]}}).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [PAUSE_IMAGE.removeprefix("docker.io/")],
                            "Layers": [f"{layer_digest}/layer.tar"]}]).encode()
    partial = dest.with_suffix(".part")
    with tarfile.open(partial, mode="w") as archive:
        for name, data in ((f"{layer_digest}/layer.tar", layer_bytes), (config_name, config),
                           ("manifest.json", manifest)):
            entry = tarfile.TarInfo(name)
            entry.size = len(data)
            archive.addfile(entry, io.BytesIO(data))
    partial.rename(dest)
    return dest


def main(argv: list[str] | None = None) -> int:
    """``python -m strata_platform.services.kubernetes import-images [TAG...]``: copy images from the
    project's Docker engine into the running cluster (default: every image of ``make images``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m strata_platform.services.kubernetes")
    parser.add_argument("action", choices=["import-images"])
    parser.add_argument("tags", nargs="*")
    args = parser.parse_args(argv)
    if args.tags:
        tags = args.tags
    else:
        from strata_platform import images

        tags = sorted(images.tags().values())
    imported = KubernetesService().import_docker_images(tags)
    print(f"imported: {', '.join(imported) or 'nothing (all there already)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
