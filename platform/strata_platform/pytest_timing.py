"""A pytest plugin that records what a run did and how long each test took, as JSON.

``pytest -p strata_platform.pytest_timing --timing-json FILE``: at the end of the session FILE holds
the exit status, the wall time, pytest's own outcome counts (the numbers of its summary line:
passed, failed, error, skipped, xfailed, xpassed, deselected) and every test's setup, call and
teardown seconds. Under pytest-xdist only the controlling process writes it: it receives every
worker's reports. ``python -m strata_platform.test_run summary`` reads these files.
"""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "deselected")
# --dist loadgroup appends "@<group>" to a test's id; a parameter's "@" sits inside the brackets
_GROUP_SUFFIX = re.compile(r"@[^\]@]+$")


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


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--timing-json", default=None, metavar="FILE",
                     help="write the run's outcome counts and each test's durations to FILE (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--timing-json")
    if path and not hasattr(config, "workerinput"):  # an xdist worker: the controller writes the file
        config.pluginmanager.register(Timing(config, Path(path)), "strata-timing")
