"""The Helm CLI, built from source with ``go install`` and cached under ``CACHE_DIR/helm/bin``.

A tool, not a server (no registry entry): the chart's tests run ``helm lint`` and ``helm template``
with it. The Go module proxy serves only some Helm releases; ``PINNED_VERSION`` is one it serves.
The module and build caches are removed after a successful build: the binary is the cache.

    python -m strata_platform.services.helm        # installs if needed, prints the path
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from strata_platform.services.base import CACHE_DIR, ServiceError, file_lock, go_binary, run

MODULE = "helm.sh/helm/v3"
PINNED_VERSION = "v3.21.4"
HELM_DIR = CACHE_DIR / "helm"
BINARY = HELM_DIR / "bin" / "helm"
STAMP = HELM_DIR / "bin" / "helm.version"


def installed() -> bool:
    return BINARY.is_file() and STAMP.is_file() and STAMP.read_text().strip() == PINNED_VERSION


def helm_binary() -> Path:
    """Path of the pinned helm, building it once (a few minutes on a cold machine)."""
    if installed():
        return BINARY
    HELM_DIR.mkdir(parents=True, exist_ok=True)
    with file_lock(HELM_DIR / "install.lock"):
        if installed():
            return BINARY
        gopath = HELM_DIR / "gopath"
        env = {
            **os.environ,
            "GOBIN": str(BINARY.parent),
            "GOPATH": str(gopath),
            "GOMODCACHE": str(gopath / "pkg" / "mod"),
            "GOCACHE": str(HELM_DIR / "gocache"),
            "GOFLAGS": "-modcacherw",
            "GOTOOLCHAIN": "local",
            "CGO_ENABLED": "0",
        }
        ldflags = f"-s -w -X {MODULE}/internal/version.version={PINNED_VERSION}"
        STAMP.unlink(missing_ok=True)
        run([go_binary("helm"), "install", "-trimpath", f"-ldflags={ldflags}", f"{MODULE}/cmd/helm@{PINNED_VERSION}"],
            env=env, cwd=str(HELM_DIR), timeout=1800)
        if not BINARY.is_file():
            raise ServiceError(f"helm: go install finished but {BINARY} is missing")
        STAMP.write_text(PINNED_VERSION + "\n")
        for scratch in (gopath, HELM_DIR / "gocache"):
            shutil.rmtree(scratch, ignore_errors=True)
    return BINARY


def helm(*args: str, home: Path | None = None, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run helm with its config/cache/data dirs under `home` (default: the cache dir)."""
    base = home or HELM_DIR / "home"
    env = {**os.environ,
           "HELM_CONFIG_HOME": str(base / "config"),
           "HELM_CACHE_HOME": str(base / "cache"),
           "HELM_DATA_HOME": str(base / "data")}
    return subprocess.run([str(helm_binary()), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


if __name__ == "__main__":
    print(helm_binary())
    sys.exit(0)
