"""Run the code blocks of the README and of the docs site's pages (``docs/**/*.md``) that are marked
runnable, as a new user would: in order, in a scratch directory, against the local services.

A fenced ``python`` or ``sh`` block runs when the line before its fence is ``<!-- run -->`` (with
the local disk, MinIO, PostgreSQL and Kafka) or ``<!-- run: NAME -->`` (a group that also needs the
service NAME, such as trino or spark; its blocks run on their own). ``<!-- skip: REASON -->`` says
why a block is not run (docker, kubernetes, long-running, fragment); an unmarked block is not run.
The python blocks of a group share one namespace, as in one session; sh blocks run in bash with
``-euo pipefail`` and this venv's commands first on the PATH.

Each document runs on its own: a page's blocks share one namespace and scratch directory, and
never see another page's.

``python -m strata_platform.readme_snippets [--group NAME] [FILE.md ...]`` runs one group (default:
the plain ``run`` blocks) of each file given (default: the README and every docs page) and exits 1
naming the file and line of the first block that fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DEFAULT_GROUP = ""
REPO_ROOT = Path(__file__).resolve().parents[2]
_MARK = re.compile(r"^<!--\s*(run|skip)(?:\s*:\s*(.*?))?\s*-->$")
_FENCE = re.compile(r"^```(\w+)\s*$")
LANGUAGES = ("python", "sh")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int  # 1-based line of the block's first code line in the README
    mark: str | None  # "run", "skip" or None
    detail: str  # the group of a run mark, the reason of a skip mark

    @property
    def group(self) -> str | None:
        return self.detail if self.mark == "run" else None


def blocks(text: str) -> list[Block]:
    """Every fenced python/sh block of a Markdown text, with the mark on the line before its fence."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
        if fence.group(1) in LANGUAGES:
            previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
            mark = _MARK.match(previous)
            found.append(Block(fence.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 2,
                               mark.group(1) if mark else None, (mark.group(2) or "") if mark else ""))
        i = end + 1
    return found


def documents(root: Path = REPO_ROOT) -> list[Path]:
    """The Markdown files whose blocks run: the README and the docs site's pages."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def display_name(path: Path) -> str:
    """How tracebacks and failures name a document: its path in the repository, else its name."""
    try:
        return str(path.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return path.name


def run_group(readme: Path, group: str = DEFAULT_GROUP, env: dict[str, str] | None = None,
              timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
    """Run the group's blocks in a fresh scratch directory, in a new Python process (and session:
    past the timeout it is killed with everything it started, a Spark JVM too)."""
    selected = [b for b in blocks(readme.read_text(encoding="utf-8")) if b.group == group]
    if not selected:
        raise ValueError(f"{readme} has no block marked '<!-- run{': ' + group if group else ''} -->'")
    venv_bin = str(Path(sys.executable).parent)
    full_env = {**os.environ, **(env or {})}
    full_env["PATH"] = f"{venv_bin}{os.pathsep}{full_env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="readme-snippets-") as scratch:
        payload = json.dumps({"readme": display_name(readme), "blocks": [b.__dict__ for b in selected]})
        argv = [sys.executable, "-c", _DRIVER]
        process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   cwd=scratch, env=full_env, text=True, start_new_session=True)
        try:
            out, err = process.communicate(payload, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            err += f"\nFAILED: timed out after {timeout:.0f} s"
        return subprocess.CompletedProcess(argv, process.returncode, out, err)


# Runs in the scratch process: python blocks compiled under the README's name and line numbers, so
# a traceback points at the README line; the first failing block ends the run with exit code 1.
_DRIVER = r"""
import json, subprocess, sys, time, traceback
spec = json.load(sys.stdin)
namespace = {"__name__": "__main__"}
for block in spec["blocks"]:
    where = f"{spec['readme']} line {block['line']} ({block['language']} block)"
    print(f"--- {where} at {time.process_time():.1f} s CPU, {time.perf_counter():.1f} s", flush=True)
    if block["language"] == "python":
        try:
            exec(compile("\n" * (block["line"] - 1) + block["code"], spec["readme"], "exec"), namespace)
        except BaseException:
            traceback.print_exc()
            sys.exit(f"FAILED: {where}")
    else:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block["code"]])
        if done.returncode != 0:
            sys.exit(f"FAILED: {where}: exit code {done.returncode}")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md and docs/**/*.md)")
    parser.add_argument("--group", default=DEFAULT_GROUP, help="run the blocks marked '<!-- run: GROUP -->'")
    args = parser.parse_args(argv)
    for path in [p.resolve() for p in args.files] or documents():
        if not any(b.group == args.group for b in blocks(path.read_text(encoding="utf-8"))):
            continue
        done = run_group(path, args.group)
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        if done.returncode != 0:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
