"""pypaimon (Apache Paimon's Python implementation) as an independent oracle, in its own venv.

pypaimon pins an older pyarrow than Strata, so it lives in ``build/pypaimon-venv`` and is driven
through a subprocess: the caller passes a Python script, which runs with pypaimon importable and
prints its answer (JSON by convention) to stdout.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import textwrap
from pathlib import Path

PYPAIMON_VERSION = "2.1.0"
REPO_ROOT = Path(__file__).resolve().parents[2]
VENV = Path(os.environ.get("STRATA_PYPAIMON_VENV", REPO_ROOT / "build" / "pypaimon-venv"))
PYTHON = VENV / "bin" / "python"
STAMP = VENV / f".pypaimon-{PYPAIMON_VERSION}"


def ensure_venv() -> Path:
    """pypaimon's venv, created once."""
    return venv_with(VENV, [f"pypaimon=={PYPAIMON_VERSION}"], STAMP)


def venv_with(venv: Path, requirements: list[str], stamp: Path) -> Path:
    """An oracle's own venv with `requirements`, created once (pip's own cache makes a re-creation
    fast); its python. Parallel test workers queue on a lock file: two creating it at once would
    clear each other's venv."""
    python = venv / "bin" / "python"
    if stamp.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():  # not made by the worker that held the lock before
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
            stamp.touch()
    return python


def run_pypaimon(script: str, *args: str, timeout: float = 300) -> str:
    """Run `script` under pypaimon's interpreter; return its stdout, raise with stderr on failure."""
    python = ensure_venv()
    proc = subprocess.run([str(python), "-c", textwrap.dedent(script), *args],
                          check=False, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"pypaimon script failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout
