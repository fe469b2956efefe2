"""The runnable blocks of the README and of every docs page (strata_platform.readme_snippets) run as
written, against the services `make test` starts for the engine tests (MinIO, PostgreSQL); a block
that stops working fails here, naming its file and line. The Trino and Spark groups run in
integration_tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from strata_platform.readme_snippets import blocks, display_name, documents, run_group

README = Path(__file__).resolve().parents[2] / "README.md"
DOCUMENTS = documents()
GROUPS = {"", "trino", "spark"}  # "" runs here; the others in integration_tests/test_readme_snippets.py
SKIP_REASONS = ("docker", "kubernetes", "long-running", "fragment")


def _runnable(group: str) -> list[Path]:
    return [d for d in DOCUMENTS if any(b.group == group for b in blocks(d.read_text(encoding="utf-8")))]


def test_every_mark_of_the_readme_and_the_docs_is_known() -> None:
    found = {display_name(d): blocks(d.read_text(encoding="utf-8")) for d in DOCUMENTS}
    assert len(found) > 20  # the docs pages are found, not only the README
    groups = {b.group for page in found.values() for b in page if b.mark == "run"}
    assert groups == GROUPS
    odd = [(name, b.line, b.detail) for name, page in found.items() for b in page
           if b.mark == "skip" and not b.detail.startswith(SKIP_REASONS)]
    assert not odd, f"skip marks need a reason starting with one of {SKIP_REASONS}: {odd}"


def test_the_readmes_links_point_at_files_of_the_repository() -> None:
    """The docs build checks the site's links; the README lives outside it, so its own are checked here."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    assert local
    missing = [t for t in local if not (README.parent / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


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


def test_each_page_runs_on_its_own_namespace(tmp_path: Path) -> None:
    """A page that uses a name only another page defines fails: pages share nothing."""
    (tmp_path / "first.md").write_text("<!-- run -->\n```python\norders = 1\n```\n", encoding="utf-8")
    second = tmp_path / "second.md"
    second.write_text("<!-- run -->\n```python\nprint(orders)\n```\n", encoding="utf-8")
    assert run_group(tmp_path / "first.md").returncode == 0
    done = run_group(second)
    assert done.returncode == 1
    assert "NameError: name 'orders' is not defined" in done.stderr
    assert "FAILED: second.md line 3 (python block)" in done.stderr


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
    assert done.stdout.count("--- README.md line ") == len(ran) >= 1


@pytest.mark.parametrize("page", [d for d in _runnable("") if d != README], ids=display_name)
def test_each_docs_page_runs_as_written(page: Path, service_env: dict[str, str]) -> None:
    done = run_group(page, env=service_env)
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    ran = [b.line for b in blocks(page.read_text(encoding="utf-8")) if b.group == ""]
    assert done.stdout.count(f"--- {display_name(page)} line ") == len(ran) > 0
