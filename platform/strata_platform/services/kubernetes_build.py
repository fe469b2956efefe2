"""Kubernetes' binaries, built from the Go module proxy and cached under ``CACHE_DIR/kubernetes/bin``.

``k8s.io/kubernetes`` cannot be fetched with ``go install``: its go.mod points the ``k8s.io/*``
staging modules at ``./staging`` with ``replace`` lines. A small wrapper module requires it and
repeats every such line, pointing each staging module at its published twin (v0.X.Y for v1.X.Y).
One ``go build`` then compiles the control plane, the kubelet and kubectl (they share most
packages), plus ``pause``: the pod sandbox's process, a few lines of Go written here (no image
registry to pull one from). The module and build caches are removed after a successful build:
the binaries are the cache.

    python -m strata_platform.services.kubernetes_build     # builds if needed, prints the bin dir
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from strata_platform.services.base import CACHE_DIR, ServiceError, file_lock, go_binary, run

K8S_VERSION = "v1.34.3"
STAGING_VERSION = "v0.34.3"  # every k8s.io staging module is tagged v0.X.Y for Kubernetes v1.X.Y
K8S_DIR = CACHE_DIR / "kubernetes"
BIN_DIR = K8S_DIR / "bin"
STAMP = BIN_DIR / "kubernetes.version"
WRAPPER_MODULE = "strata.local/kubernetes-build"

# binary -> (package to build, a library package it imports: listed in the wrapper so that
# `go mod tidy` records every dependency; a main package cannot be imported)
COMPONENTS: dict[str, tuple[str, str]] = {
    "kube-apiserver": ("k8s.io/kubernetes/cmd/kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver/app"),
    "kube-controller-manager": ("k8s.io/kubernetes/cmd/kube-controller-manager",
                                "k8s.io/kubernetes/cmd/kube-controller-manager/app"),
    "kube-scheduler": ("k8s.io/kubernetes/cmd/kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler/app"),
    "kubelet": ("k8s.io/kubernetes/cmd/kubelet", "k8s.io/kubernetes/cmd/kubelet/app"),
    "kubectl": ("k8s.io/kubernetes/cmd/kubectl", "k8s.io/kubectl/pkg/cmd"),
}
BINARIES = (*COMPONENTS, "pause")

# The sandbox process of every pod: holds the pod's namespaces, reaps orphans, exits on TERM/INT.
PAUSE_SOURCE = """package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsignals := make(chan os.Signal, 8)
\tsignal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
\tfor sig := range signals {
\t\tif sig != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\tfor {
\t\t\tif pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 || err != nil {
\t\t\t\tbreak
\t\t\t}
\t\t}
\t}
}
"""


def installed() -> bool:
    return (STAMP.is_file() and STAMP.read_text().strip() == K8S_VERSION
            and all((BIN_DIR / name).is_file() for name in BINARIES))


def binary(name: str) -> Path:
    """Path of one built binary (kube-apiserver, kubelet, kubectl, pause...), building all once."""
    ensure_built()
    return BIN_DIR / name


def _go_env(work: Path) -> dict[str, str]:
    return {
        **os.environ,
        "GOPATH": str(work / "gopath"),
        "GOMODCACHE": str(work / "gopath" / "pkg" / "mod"),
        "GOCACHE": str(work / "gocache"),
        "GOFLAGS": "-modcacherw -buildvcs=false",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The k8s.io modules that kubernetes' go.mod replaces with a ./staging directory."""
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.MULTILINE)))


def wrapper_go_mod(staging: list[str]) -> str:
    replaces = "\n".join(f"\t{module} => {module} {STAGING_VERSION}" for module in staging)
    return (f"module {WRAPPER_MODULE}\n\ngo 1.24\n\nrequire k8s.io/kubernetes {K8S_VERSION}\n\n"
            f"replace (\n{replaces}\n)\n")


def wrapper_imports() -> str:
    imports = "\n".join(f'\t_ "{library}"' for _, library in COMPONENTS.values())
    return ("// Package deps makes `go mod tidy` keep what the built commands need.\n"
            f"package deps\n\nimport (\n{imports}\n)\n")


def _write_wrapper(work: Path, env: dict[str, str]) -> Path:
    src = work / "src"
    shutil.rmtree(src, ignore_errors=True)
    (src / "deps").mkdir(parents=True)
    (src / "pause").mkdir()
    info = json.loads(run([go_binary("kubernetes"), "mod", "download", "-json", f"k8s.io/kubernetes@{K8S_VERSION}"],
                          env=env, cwd=str(work), timeout=1800).stdout)
    staging = staging_modules(Path(info["GoMod"]).read_text())
    if not staging:
        raise ServiceError(f"kubernetes: no ./staging replace lines found in {info['GoMod']}")
    (src / "go.mod").write_text(wrapper_go_mod(staging))
    (src / "deps" / "deps.go").write_text(wrapper_imports())
    (src / "pause" / "main.go").write_text(PAUSE_SOURCE)
    return src


def _ldflags() -> str:
    major, minor = K8S_VERSION.lstrip("v").split(".")[:2]
    version_pkg = "k8s.io/component-base/version"
    return " ".join(["-s", "-w", f"-X {version_pkg}.gitVersion={K8S_VERSION}", f"-X {version_pkg}.gitMajor={major}",
                     f"-X {version_pkg}.gitMinor={minor}", f"-X {version_pkg}.gitTreeState=clean"])


def ensure_built() -> Path:
    """Build every binary once (several minutes on a cold machine, at the lowest CPU priority)."""
    if installed():
        return BIN_DIR
    K8S_DIR.mkdir(parents=True, exist_ok=True)
    with file_lock(K8S_DIR / "install.lock"):
        if installed():
            return BIN_DIR
        work = K8S_DIR / "build"
        work.mkdir(exist_ok=True)
        env = _go_env(work)
        src = _write_wrapper(work, env)
        run([go_binary("kubernetes"), "mod", "tidy"], env=env, cwd=str(src), timeout=1800)
        STAMP.unlink(missing_ok=True)
        BIN_DIR.mkdir(exist_ok=True)
        packages = [package for package, _ in COMPONENTS.values()]
        # nice: the build takes every core for minutes; whatever else runs keeps priority
        run(["nice", "-n", "19", go_binary("kubernetes"), "build", "-trimpath", f"-ldflags={_ldflags()}",
             "-o", str(BIN_DIR), *packages, "./pause"], env=env, cwd=str(src), timeout=3600)
        missing = [name for name in BINARIES if not (BIN_DIR / name).is_file()]
        if missing:
            raise ServiceError(f"kubernetes: go build finished but {missing} are missing from {BIN_DIR}")
        STAMP.write_text(K8S_VERSION + "\n")
        shutil.rmtree(work, ignore_errors=True)
    return BIN_DIR


if __name__ == "__main__":
    began = time.monotonic()
    print(ensure_built(), f"({time.monotonic() - began:.0f}s)")
    sys.exit(0)
