"""The README's runnable blocks run as written (strata_platform.readme_snippets), against the
services `make test` starts for the engine tests (MinIO, PostgreSQL); a block that stops working
fails here, naming its README line. The Trino and Spark groups run in integration_tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from strata_platform.readme_snippets import blocks, run_group

README = Path(__file__).resolve().parents[2] / "README.md"
GROUPS = {"", "trino", "spark"}  # "" runs here; the others in integration_tests/test_readme_snippets.py
SKIP_REASONS = ("docker", "kubernetes", "long-running", "fragment")


def test_every_mark_of_the_readme_is_known() -> None:
    found = blocks(README.read_text(encoding="utf-8"))
    assert {b.group for b in found if b.mark == "run"} == GROUPS
    odd = [(b.line, b.detail) for b in found if b.mark == "skip" and not b.detail.startswith(SKIP_REASONS)]
    assert not odd, f"skip marks need a reason starting with one of {SKIP_REASONS}: {odd}"


def test_a_failing_block_names_its_readme_line_and_unmarked_blocks_do_not_run(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("\n".join([
        "<!-- run -->", "```python", "x = 41", "```",
        "```python", "raise SystemExit('unmarked blocks do not run')", "```",
        "<!-- skip: long-running -->", "```sh", "sleep 600", "```",
        "<!-- run -->", "```sh", 'echo "x is $(python -c "print(41 + 1)")"', "```",
        "<!-- run -->", "```python", "assert x == 41", "x += 1", "1 / 0", "```", ""]))
    assert [(b.line, b.mark, b.group) for b in blocks(readme.read_text())] == [
        (3, "run", ""), (6, None, None), (10, "skip", None), (14, "run", ""), (18, "run", "")]
    done = run_group(readme)
    assert done.returncode == 1
    assert "x is 42" in done.stdout
    assert 'File "README.md", line 20' in done.stderr  # the traceback points at the README
    assert "FAILED: README.md line 18 (python block)" in done.stderr


@pytest.fixture(scope="module")
def service_env() -> Iterator[dict[str, str]]:
    """What `strata-services run minio postgres kafka` gives the engine tests (started here if not)."""
    from strata_platform.services.testing import provide

    with ExitStack() as stack:
        services = [stack.enter_context(contextmanager(provide)(name)) for name in ("minio", "postgres")]
        yield {key: value for service in services for key, value in service.client_env().items()}


def test_the_readme_runs_as_written(service_env: dict[str, str]) -> None:
    done = run_group(README, env=service_env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    ran = [b.line for b in blocks(README.read_text(encoding="utf-8")) if b.group == ""]
    assert done.stdout.count("--- README.md line ") == len(ran) > 10
