"""A pytest plugin that records what a run did and how long each test took, as JSON, and says
while it runs how far it is.

``pytest -p strata_platform.pytest_timing --timing-json FILE``: at the end of the session FILE holds
the exit status, the wall time, pytest's own outcome counts (the numbers of its summary line:
passed, failed, error, skipped, xfailed, xpassed, deselected) and every test's setup, call and
teardown seconds. Under pytest-xdist only the controlling process writes it: it receives every
worker's reports. ``python -m strata_platform.test_run summary`` reads these files.

A copy of FILE is kept in ``<FILE's folder>-history/`` (``make test`` empties FILE's folder at its
start). While the session runs, every ``--progress-every`` seconds (60 by default) a line says how
many tests are done out of how many, the time so far and an estimate of what is left: from that
copy's durations of the tests not yet run, scaled by this run's pace, or, on a first run, from the
pace alone. A long run then never looks like a hang.
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
# --dist loadgroup appends "@<group>" to a test's id; a parameter's "@" sits inside the brackets
_GROUP_SUFFIX = re.compile(r"@[^\]@]+$")


def history_path(path: Path) -> Path:
    """Where the last finished run's copy of the timing file `path` is kept."""
    return path.parent.with_name(path.parent.name + "-history") / path.name


def _durations(path: Path) -> dict[str, float]:
    """Each test's seconds in the timing file `path` (none if it is missing or unreadable)."""
    try:
        tests = json.loads(path.read_text())["tests"]
        return {test["nodeid"]: float(test["seconds"]) for test in tests}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def minutes(seconds: float) -> str:
    whole = round(seconds)
    return f"{whole // 60}m{whole % 60:02d}s"


def estimate_left(elapsed: float, done: set[str], pending: Iterable[str],
                  previous: dict[str, float]) -> tuple[float, str]:
    """Seconds left and how they were estimated. The previous run's durations say how the work
    left compares with the work done (tests differ by 1000x); this run's pace converts that to
    seconds here. A test the previous run did not have counts as its average."""
    pending = list(pending)
    if not done or not pending:
        return 0.0, "pace"
    if previous:
        average = sum(previous.values()) / len(previous)
        done_before = sum(previous.get(nodeid, average) for nodeid in done)
        left_before = sum(previous.get(nodeid, average) for nodeid in pending)
        if done_before > 0:
            return elapsed * left_before / done_before, "the last run's durations"
    return elapsed * len(pending) / len(done), "the pace so far"


class Timing:
    def __init__(self, config: pytest.Config, path: Path) -> None:
        self.config = config
        self.path = path
        self.began = time.time()
        self.phases: dict[str, dict[str, float]] = defaultdict(dict)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        nodeid = _GROUP_SUFFIX.sub("", report.nodeid)
        self.phases[nodeid][report.when] = round(report.duration, 3)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        stats = reporter.stats if reporter is not None else {}
        counts = {outcome: len(stats.get(outcome, [])) for outcome in OUTCOMES}
        tests = [{"nodeid": nodeid, "seconds": round(sum(phases.values()), 3), **phases}
                 for nodeid, phases in self.phases.items()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({
            "exitstatus": int(exitstatus), "began": self.began, "seconds": round(time.time() - self.began, 3),
            "workers": getattr(self.config.option, "numprocesses", None) or 0,
            "counts": counts, "tests": tests}, indent=1) + "\n")
        if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):  # a whole run: worth estimating from
            history = history_path(self.path)
            history.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.path, history)


class Progress:
    """Prints, every `every` seconds, the tests done out of those collected, the time so far and
    the estimate of what is left. Under xdist a timer thread of the controller prints (a slow test
    sends no report for minutes; the controller runs no test, so nothing captures its output); a
    serial run prints when a test reports, since its output is captured while a test runs."""

    def __init__(self, config: pytest.Config, every: float, previous: dict[str, float], label: str) -> None:
        self.config = config
        self.every = every
        self.previous = previous
        self.label = label
        self.collected: list[str] = []
        self.done: set[str] = set()
        self.began = self.said = time.monotonic()
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.timed = False  # a timer thread prints (xdist), not the reports

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not self.collected:
            self._collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        if not self.timed:  # every worker collects the same tests
            self.timed = True
            self._collected(ids)
            threading.Thread(target=self._tick, name="test-progress", daemon=True).start()

    def _collected(self, ids: list[str]) -> None:
        with self.lock:
            self.collected = [_GROUP_SUFFIX.sub("", nodeid) for nodeid in ids]
            self.began = self.said = time.monotonic()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "teardown" or (report.when == "setup" and not report.passed):
            with self.lock:
                self.done.add(_GROUP_SUFFIX.sub("", report.nodeid))
        if not self.timed and report.when == "teardown" and time.monotonic() - self.said >= self.every:
            self._say()

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        self.stopped.set()

    def line(self) -> str:
        with self.lock:
            done = set(self.done)
            pending = [nodeid for nodeid in self.collected if nodeid not in done]
            total = len(self.collected)
        elapsed = time.monotonic() - self.began
        text = f"{self.label}: {len(done)} of {total} tests done, {minutes(elapsed)} so far"
        if done and pending:
            left, source = estimate_left(elapsed, done, pending, self.previous)
            text += f", about {minutes(left)} left (from {source})"
        return text

    def _say(self) -> None:
        self.said = time.monotonic()
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(self.line())

    def _tick(self) -> None:
        while not self.stopped.wait(self.every):
            with self.lock:
                finished = len(self.done) >= len(self.collected)
            if finished:
                return
            self._say()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timing-json", default=None, metavar="FILE",
                     help="write the run's outcome counts and each test's durations to FILE (JSON)")
    parser.addoption("--progress-every", default=60.0, type=float, metavar="SECONDS",
                     help="with --timing-json: print tests done, time so far and an estimate of what is "
                          "left every SECONDS (0: never)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--timing-json")
    if not path or hasattr(config, "workerinput"):  # an xdist worker: the controller writes the file
        return
    config.pluginmanager.register(Timing(config, Path(path)), "strata-timing")
    every = config.getoption("--progress-every")
    if every > 0:
        previous = _durations(history_path(Path(path)))
        config.pluginmanager.register(Progress(config, every, previous, Path(path).stem), "strata-progress")
