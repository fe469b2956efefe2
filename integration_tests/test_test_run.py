"""The bookkeeping of `make test`: the counts it reports are pytest's, a failing background job or
test run fails it, and the integration suite's grouping names modules that exist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import conftest
import pytest

from strata_platform.pytest_timing import estimate_left

HERE = Path(__file__).resolve().parent

SAMPLE = '''
import pytest

@pytest.fixture
def broken():
    raise RuntimeError("set-up fails")

def test_passes():
    pass

def test_fails():
    assert 1 == 2

def test_skips():
    pytest.skip("not here")

@pytest.mark.xfail(strict=True, reason="known")
def test_expected_failure():
    assert False

def test_errors(broken):
    pass

@pytest.mark.parametrize("who", ["a@b", "c"])
def test_param(who):
    pass
'''


def run_pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("workers", [[], ["-n", "2", "--dist", "loadgroup"]], ids=["serial", "xdist"])
def test_timing_json_has_pytest_counts_and_each_test(tmp_path: Path, workers: list[str]) -> None:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    out = tmp_path / "times.json"
    proc = run_pytest("test_sample.py", "-p", "strata_platform.pytest_timing", "--timing-json", str(out),
                      "-o", "addopts=", *workers, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["exitstatus"] == 1
    assert {k: v for k, v in report["counts"].items() if v} == {
        "passed": 3, "failed": 1, "skipped": 1, "xfailed": 1, "error": 1}
    assert "3 passed" in proc.stdout and "1 error" in proc.stdout  # the same numbers as pytest's line
    ids = {test["nodeid"] for test in report["tests"]}
    assert "test_sample.py::test_param[a@b]" in ids and "test_sample.py::test_passes" in ids
    assert all("@" not in i.replace("[a@b]", "") for i in ids)  # no xdist group suffix
    errored = next(t for t in report["tests"] if t["nodeid"].endswith("test_errors"))
    assert "setup" in errored and errored["seconds"] >= errored["setup"]


def test_run_fails_on_a_failed_job_or_test_run_and_reports_phases(tmp_path: Path) -> None:
    env = {**os.environ, "STRATA_TEST_RUN_DIR": str(tmp_path)}

    def test_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strata_platform.test_run", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    (tmp_path / "phases").write_text("began 1000.0\n")
    assert test_run("spawn", "builds", sys.executable, "-c", "print('built'); raise SystemExit(3)").returncode == 0
    waited = test_run("wait", "builds")
    assert waited.returncode == 3 and "built" in waited.stdout
    assert test_run("mark", "engine").returncode == 0
    (tmp_path / "engine.json").write_text(json.dumps({
        "exitstatus": 0, "began": 1.0, "seconds": 61.0, "workers": 3, "counts": {"passed": 5, "skipped": 1},
        "tests": [{"nodeid": "t.py::slow", "seconds": 40.0, "setup": 39.0, "call": 1.0}]}))
    summary = test_run("summary")
    assert summary.returncode == 1, summary.stdout  # the background job failed
    lines = summary.stdout.splitlines()
    assert lines[0].startswith("make test phases: engine ")
    assert "background builds: exit 3" in summary.stdout
    assert "engine: 5 passed, 1 skipped in 1m01s, 3 workers (exit 0)" in summary.stdout
    assert "40.0s  t.py::slow  (setup 39s, call 1s)" in summary.stdout
    assert lines[-1].startswith("make test: 5 passed, 1 skipped in ") and lines[-1].endswith("FAILED (builds)")
    (tmp_path / "builds.done").write_text(json.dumps({"exitstatus": 0, "began": 1.0, "seconds": 2.0}))
    assert test_run("summary").stdout.splitlines()[-1].endswith(": PASSED")
    assert test_run("failed", "integration").returncode == 0
    assert test_run("summary").returncode == 1


def test_groups_name_modules_that_exist() -> None:
    modules = {path.name for path in HERE.glob("test_*.py")}
    named = {m for group in conftest.GROUPS.values() for m in group} | conftest.NEEDS_BACKGROUND_BUILDS
    named |= {m for m in conftest.LONGEST_FIRST + conftest.LAST if m.endswith(".py")}
    assert named <= modules, f"grouped modules that do not exist: {named - modules}"
    groups = [m for m in conftest.LONGEST_FIRST + conftest.LAST if not m.endswith(".py")]
    assert set(groups) <= set(conftest.GROUPS)
    for test in conftest.EXCLUSIVE_TESTS:
        module, _, name = test.partition("::")
        assert module in modules and (not name or f"def {name}(" in (HERE / module).read_text()), test


def test_exclusive_tests_split_the_suite_without_loss() -> None:
    modules = sorted({test.split("::")[0] for test in conftest.EXCLUSIVE_TESTS})
    files = [str(HERE / name) for name in [*modules, "test_serve.py"]]

    def collected(*args: str) -> set[str]:
        proc = run_pytest(*files, "--collect-only", "-q", *args, cwd=HERE.parent)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return {line for line in proc.stdout.splitlines() if "::" in line}

    everything, only, skip = collected(), collected("--exclusive-modules=only"), collected("--exclusive-modules=skip")
    assert {test.split("/")[-1].split("[")[0] for test in only} == set(conftest.EXCLUSIVE_TESTS)
    assert only | skip == everything and not only & skip
    proc = run_pytest(str(HERE / "test_serve.py"), "--collect-only", "-q", "--exclusive-modules=only", cwd=HERE.parent)
    assert proc.returncode == 4 and "leaves no test" in proc.stdout + proc.stderr  # never an empty run


def test_tests_wait_for_the_background_jobs_of_a_run_in_progress(tmp_path: Path) -> None:
    env = {**os.environ, "STRATA_TEST_RUN_DIR": str(tmp_path)}
    job = [sys.executable, "-m", "strata_platform.test_run", "spawn", "builds", sys.executable, "-c",
           "import time; time.sleep(2); raise SystemExit(1)"]
    subprocess.run(job, env=env, check=True, capture_output=True, timeout=60)
    probe = ("import json, time; from strata_platform import test_run; began = time.monotonic(); "
             "print(json.dumps([test_run.wait_for_jobs(), time.monotonic() - began]))")
    waited = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                            check=True)
    failed, seconds = json.loads(waited.stdout)
    assert failed == ["builds"] and seconds >= 1  # it waited for the job, and reports its failure
    (tmp_path / "summary.txt").write_text("the run is over\n")
    after = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60,
                           check=True)
    assert json.loads(after.stdout)[0] == []  # once the run is over, nothing is waited for


PROGRESS_SAMPLE = '''
import time

import pytest

@pytest.mark.parametrize("i", range(4))
def test_step(i):
    time.sleep(0.4)
'''


def test_a_run_prints_its_progress_and_estimates_from_the_last_run(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(PROGRESS_SAMPLE)
    out = tmp_path / "run" / "engine.json"
    args = ("test_sample.py", "-p", "strata_platform.pytest_timing", "--timing-json", str(out),
            "--progress-every", "0.3", "-o", "addopts=")
    first = run_pytest(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert re.search(r"engine: [1-3] of 4 tests done, \dm\d\ds so far, about \dm\d\ds left \(from the pace so far\)",
                     first.stdout), first.stdout
    history = tmp_path / "run-history" / "engine.json"
    assert json.loads(history.read_text())["counts"]["passed"] == 4  # kept for the next run's estimate
    second = run_pytest(*args, cwd=tmp_path)
    assert "left (from the last run's durations)" in second.stdout, second.stdout


def test_the_estimate_weighs_tests_by_their_last_durations() -> None:
    previous = {"fast": 1.0, "slow": 9.0, "gone": 100.0}
    # 1 s of last run's work took 2 s here: the 9 s left take 18 s
    assert estimate_left(2.0, {"fast"}, ["slow"], previous) == (18.0, "the last run's durations")
    # a new test counts as the last run's average (110 / 3)
    left, _ = estimate_left(2.0, {"fast"}, ["new"], previous)
    assert left == pytest.approx(2.0 * (110 / 3))
    assert estimate_left(10.0, {"a", "b"}, ["c"], {}) == (5.0, "the pace so far")


def test_waiting_for_a_background_job_says_what_it_is_doing(tmp_path: Path) -> None:
    env = {**os.environ, "STRATA_TEST_RUN_DIR": str(tmp_path), "STRATA_PROGRESS_EVERY": "0.3"}

    def test_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "strata_platform.test_run", *args], env=env,
                              capture_output=True, text=True, timeout=120, check=False)

    job = "import time; print('installing minio', flush=True); time.sleep(1.5)"
    assert test_run("spawn", "services-install", sys.executable, "-c", job).returncode == 0
    waited = test_run("wait", "services-install")
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert re.search(r"services-install: still running after \dm\d\ds; last: installing minio", waited.stdout), \
        waited.stdout


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="the kernel schedules without autogroups")
def test_a_background_job_takes_the_lowest_cpu_share_of_its_session(tmp_path: Path) -> None:
    """A job runs in a session of its own, and Linux shares the CPU between sessions before nice
    values count: the job's session (its autogroup) must be at nice 19, not only its process."""
    env = {**os.environ, "STRATA_TEST_RUN_DIR": str(tmp_path)}
    script = "print(open('/proc/self/autogroup').read().split()[-1])"
    subprocess.run([sys.executable, "-m", "strata_platform.test_run", "spawn", "shares", sys.executable, "-c", script],
                   env=env, check=True, timeout=60)
    waited = subprocess.run([sys.executable, "-m", "strata_platform.test_run", "wait", "shares"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert waited.returncode == 0, waited.stdout
    assert (tmp_path / "shares.log").read_text().split()[-1] == "19"


def test_groups_that_wait_for_running_builds_are_handed_out_last(tmp_path: Path) -> None:
    """The containers group is the longest and goes first, unless the background builds it waits
    for still run: then every other group goes first, so that no worker sits idle waiting."""
    env = {**os.environ, "STRATA_TEST_RUN_DIR": str(tmp_path)}
    modules = [str(HERE / name) for name in ("test_serve.py", "test_compose.py")]

    def collected() -> list[str]:
        listing = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                  *modules], env=env, capture_output=True, text=True, timeout=120, check=False)
        return [line.split("::")[0].rsplit("/", 1)[-1] for line in listing.stdout.splitlines() if "::" in line]

    assert collected()[0] == "test_compose.py"
    subprocess.run([sys.executable, "-m", "strata_platform.test_run", "spawn", "builds", "sleep", "60"],
                   env=env, check=True, timeout=60)
    try:
        order = collected()
        assert order[0] == "test_serve.py" and order[-1] == "test_compose.py"
    finally:
        subprocess.run([sys.executable, "-m", "strata_platform.test_run", "stop", "builds"], env=env,
                       check=False, timeout=60)
