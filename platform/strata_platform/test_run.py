"""The bookkeeping of ``make test``: phase times, a background job, and the closing summary.

``python -m strata_platform.test_run COMMAND`` keeps its files in ``build/test-run`` (the Makefile
writes the first line of ``phases``, ``began <epoch>``, before the venv exists):

* ``mark PHASE``: PHASE ended now (it lasted since the previous mark);
* ``failed PHASE``: PHASE failed; the run goes on and ``summary`` exits 1;
* ``fail PHASE``: PHASE failed and the run stops here: background jobs are stopped, the summary
  printed, exit 1;
* ``spawn NAME COMMAND...``: run COMMAND in the background (its own process group), output in
  ``NAME.log``; ``wait NAME`` waits for it, prints its log and exits with its status; ``stop NAME``
  ends it (SIGTERM to its group). Tests that need a job's work wait for it with ``wait_for_jobs``;
* ``summary``: one line of phase times, the background jobs, each pytest run's counts (from the
  ``*.json`` files of ``strata_platform.pytest_timing``), the 10 slowest tests and a closing line;
  also written to ``summary.txt``. Exit 1 if a phase failed or a pytest run did not pass.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from strata_platform.pytest_timing import minutes
from strata_platform.services.base import REPO_ROOT

RUN_DIR = Path(os.environ.get("STRATA_TEST_RUN_DIR", REPO_ROOT / "build" / "test-run"))
PHASES = RUN_DIR / "phases"
FAILURES = RUN_DIR / "failures"
SLOWEST = 10
PROGRESS_EVERY = float(os.environ.get("STRATA_PROGRESS_EVERY", "60"))  # seconds between "still running" lines
COUNT_ORDER = ("passed", "failed", "error", "xfailed", "xpassed", "skipped", "deselected")


def shown(path: Path) -> str:
    """A path as the reader of make's output finds it: relative to the repository when inside it."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


# -- phases -----------------------------------------------------------------------------------------
def mark(phase: str) -> None:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with PHASES.open("a") as out:
        out.write(f"{phase} {time.time():.3f}\n")
    times = phase_times()
    if times:
        print(f"make test: {phase} done in {minutes(times[-1][1])}, {minutes(sum(t for _, t in times))} so far",
              flush=True)


def record_failure(phase: str) -> None:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with FAILURES.open("a") as out:
        out.write(phase + "\n")


def phase_times() -> list[tuple[str, float]]:
    """(phase, seconds) in order, from the marks (the first mark is the start)."""
    if not PHASES.exists():
        return []
    marks = [(name, float(stamp)) for name, stamp in (line.split() for line in PHASES.read_text().splitlines())]
    return [(name, stamp - marks[i][1]) for i, (name, stamp) in enumerate(marks[1:])]


def failures() -> list[str]:
    return FAILURES.read_text().split() if FAILURES.exists() else []


# -- background jobs ------------------------------------------------------------------------------
def _files(name: str) -> tuple[Path, Path, Path]:
    return RUN_DIR / f"{name}.log", RUN_DIR / f"{name}.pid", RUN_DIR / f"{name}.done"


def spawn(name: str, command: list[str]) -> None:
    log, pid_file, done = _files(name)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    done.unlink(missing_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "strata_platform.test_run", "job", name, *command],
                                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    pid_file.write_text(str(proc.pid))
    print(f"{name}: running in the background, log {shown(log)}", flush=True)


def job(name: str, command: list[str]) -> int:
    """Run the command (the spawned process) at the lowest CPU priority, then record its exit
    status and wall time."""
    _, _, done = _files(name)
    yield_cpu()
    began = time.time()
    status = subprocess.run(command, check=False).returncode
    partial = done.with_suffix(".part")
    partial.write_text(json.dumps({"exitstatus": status, "began": began, "seconds": round(time.time() - began, 3)}))
    partial.rename(done)
    return status


def yield_cpu() -> None:
    """Give this session's processes the lowest share of the CPU. A job runs in a session of its
    own (so that it can be stopped as a group), and Linux's autogroup scheduling shares the CPU
    between sessions before it looks at a process's nice value: `nice -n 19` alone left a
    background build an equal share beside the tests. The autogroup's own nice value is what
    counts (a kernel without autogroups has no such file; nice alone is then enough)."""
    with contextlib.suppress(OSError):
        Path("/proc/self/autogroup").write_text("19")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a dead job whose parent has not reaped it yet


def _group_alive(pgid: int) -> bool:
    """Whether a live process of the group is left (the job's command outlives the job on SIGTERM
    while it stops what it started)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # after the command: state, ppid, pgrp
            return True
    return False


def job_pid(name: str) -> int | None:
    _, pid_file, _ = _files(name)
    try:
        return int(pid_file.read_text())
    except (OSError, ValueError):
        return None


def job_result(name: str) -> dict[str, Any] | None:
    _, _, done = _files(name)
    return json.loads(done.read_text()) if done.exists() else None


def wait(name: str) -> int:
    log, _, _ = _files(name)
    pid = job_pid(name)
    if pid is None:
        print(f"{name}: no such background job (was it spawned?)", file=sys.stderr)
        return 1
    began = time.monotonic()
    if job_result(name) is None and _alive(pid):
        print(f"{name}: waiting for it to finish", flush=True)
    said = time.monotonic()
    while (result := job_result(name)) is None and _alive(pid):
        time.sleep(1)
        if time.monotonic() - said >= PROGRESS_EVERY:
            print(progress_line(name), flush=True)
            said = time.monotonic()
    result = job_result(name)  # it may have finished between the two checks
    print(log.read_text(errors="replace").rstrip(), flush=True)
    if result is None:
        print(f"{name}: ended without recording a status (killed?); log {shown(log)}", file=sys.stderr)
        return 1
    print(f"{name}: exit {result['exitstatus']} after {minutes(result['seconds'])}, "
          f"waited {minutes(time.monotonic() - began)} for it", flush=True)
    return int(result["exitstatus"])


def progress_line(name: str) -> str:
    """What a background job is doing: how long it has run and its log's last line (which names
    the service being installed or the image being built)."""
    log, pid_file, _ = _files(name)
    try:
        running = time.time() - pid_file.stat().st_mtime
        last = next((line for line in reversed(log.read_text(errors="replace").splitlines()) if line.strip()), "")
    except OSError:
        return f"{name}: still running"
    return f"{name}: still running after {minutes(running)}" + (f"; last: {last.strip()[:160]}" if last else "")


def stop(name: str, grace: float = 120.0) -> None:
    """SIGTERM the job's process group (a prebuild then stops the services it started), then SIGKILL."""
    pid = job_pid(name)
    if pid is None or not _group_alive(pid):
        return
    for sig, patience in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + patience
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _group_alive(pid):
            return


def spawned_jobs() -> list[str]:
    return sorted(path.stem for path in RUN_DIR.glob("*.pid")) if RUN_DIR.exists() else []


def _at_work(name: str) -> bool:
    """The job has no status yet and a process of its group lives."""
    pid = job_pid(name)
    return job_result(name) is None and pid is not None and _group_alive(pid)


def jobs_running() -> bool:
    """Whether a background job of a run in progress is still at work."""
    return not (RUN_DIR / "summary.txt").exists() and any(_at_work(name) for name in spawned_jobs())


def wait_for_jobs() -> list[str]:
    """Wait for the background jobs of a run in progress (none once its summary is written: a test
    run after make test waits for nothing); return those that failed or ended without a status."""
    if (RUN_DIR / "summary.txt").exists():
        return []
    failed = []
    for name in spawned_jobs():
        while _at_work(name):
            time.sleep(1)
        result = job_result(name)
        if result is None or result["exitstatus"] != 0:
            failed.append(name)
    return failed


# -- summary --------------------------------------------------------------------------------------
def pytest_runs() -> list[tuple[str, dict[str, Any]]]:
    if not RUN_DIR.exists():
        return []
    runs = [(path.stem, json.loads(path.read_text())) for path in RUN_DIR.glob("*.json")]
    return sorted(runs, key=lambda run: run[1]["began"])


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[key]} {key}" for key in COUNT_ORDER if counts.get(key)) or "no tests"


def summary_lines() -> tuple[list[str], bool]:
    """The summary, and whether the whole run passed."""
    phases = phase_times()
    total = sum(seconds for _, seconds in phases)
    lines = ["make test phases: " + " | ".join(f"{name} {minutes(seconds)}" for name, seconds in phases)
             + f" | total {minutes(total)}"]
    failed = failures()
    for name in spawned_jobs():
        result = job_result(name)
        state = (f"exit {result['exitstatus']} after {minutes(result['seconds'])}" if result
                 else "no status recorded")
        lines.append(f"  background {name}: {state} (log {shown(_files(name)[0])})")
        if result is None or result["exitstatus"] != 0:
            failed.append(name)
    runs = pytest_runs()
    totals: dict[str, int] = {}
    for name, run in runs:
        workers = f", {run['workers']} workers" if run.get("workers") else ""
        lines.append(f"  {name}: {counts_text(run['counts'])} in {minutes(run['seconds'])}{workers}"
                     f" (exit {run['exitstatus']})")
        for key, value in run["counts"].items():
            if key != "deselected":  # what one run leaves out, another runs
                totals[key] = totals.get(key, 0) + value
        if run["exitstatus"] != 0:
            failed.append(name)
    tests = sorted((test for _, run in runs for test in run["tests"]), key=lambda t: -t["seconds"])[:SLOWEST]
    if tests:
        lines.append(f"  {len(tests)} slowest tests (setup + call + teardown):")
        for test in tests:
            parts = ", ".join(f"{when} {test[when]:.0f}s" for when in ("setup", "call", "teardown")
                              if test.get(when, 0) >= 1)
            lines.append(f"    {test['seconds']:7.1f}s  {test['nodeid']}  ({parts})")
    passed = not failed and bool(runs)
    verdict = "PASSED" if passed else f"FAILED ({', '.join(dict.fromkeys(failed)) or 'no test run recorded'})"
    lines.append(f"make test: {counts_text(totals)} in {minutes(total)}: {verdict}")
    return lines, passed


def summary() -> int:
    lines, passed = summary_lines()
    text = "\n".join(lines)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    (RUN_DIR / "summary.txt").write_text(text + "\n")
    print(text, flush=True)
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m strata_platform.test_run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    for command in ("mark", "failed", "fail", "wait", "stop"):
        commands.add_parser(command).add_argument("name")
    for command in ("spawn", "job"):
        sub = commands.add_parser(command)
        sub.add_argument("name")
        sub.add_argument("argv", nargs=argparse.REMAINDER)
    commands.add_parser("summary")
    args = parser.parse_args(argv)
    if args.command == "mark":
        mark(args.name)
    elif args.command == "failed":
        record_failure(args.name)
    elif args.command == "fail":
        record_failure(args.name)
        mark(args.name)
        for name in spawned_jobs():
            stop(name)
        summary()
        return 1
    elif args.command == "spawn":
        spawn(args.name, args.argv)
    elif args.command == "job":
        return job(args.name, args.argv)
    elif args.command == "wait":
        return wait(args.name)
    elif args.command == "stop":
        stop(args.name)
    else:
        return summary()
    return 0


if __name__ == "__main__":
    sys.exit(main())
