"""The docs site, as `make docs` builds it, checked once in a real headless Chromium (Debian's): the
home page and a generated reference page render, the search index loads and answers a query, and
the benchmark page shows its plots (its screenshot is kept in build/docs-check/ to look at).

Outside CI a machine without the browser skips this; under CI=true that is a failure."""

from __future__ import annotations

import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from strata_platform.services.base import HOST, Service
from strata_platform.services.chromium import HeadlessChromium
from strata_platform.services.testing import provide

REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOT = REPO_ROOT / "build" / "docs-check" / "benchmarks.png"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Service]:
    yield from provide("chromium")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built by mkdocs (strict), served on 127.0.0.1 as a web server would serve it."""
    out = tmp_path_factory.mktemp("site")
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                           check=False, cwd=REPO_ROOT, capture_output=True, text=True,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-3000:]
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer((HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def browser(chromium: Service) -> Iterator[HeadlessChromium]:
    with HeadlessChromium() as opened:
        yield opened


def test_the_home_page_renders_with_its_navigation(site: str, browser: HeadlessChromium) -> None:
    browser.open(f"{site}/")
    assert browser.evaluate("document.querySelector('.md-content h1').firstChild.textContent.trim()") == "Strata"
    sections = browser.evaluate(
        "Array.from(document.querySelectorAll('.md-nav--primary > .md-nav__list > .md-nav__item > label, "
        ".md-nav--primary > .md-nav__list > .md-nav__item > a')).map(e => e.textContent.trim())")
    assert {"Getting started", "Concepts", "Guides", "Reference", "Benchmarks"} <= set(sections)
    assert browser.evaluate("getComputedStyle(document.querySelector('.md-header')).position") == "sticky"


def test_a_generated_reference_page_renders_its_table(site: str, browser: HeadlessChromium) -> None:
    browser.open(f"{site}/reference/options/")
    rows = browser.evaluate("Array.from(document.querySelectorAll('table tbody tr'))"
                            ".map(r => r.cells[0].textContent.trim())")
    assert {"bucket", "merge-engine", "deletion-vectors.enabled", "metadata.iceberg.storage"} <= set(rows)


def test_the_search_index_loads_and_answers(site: str, browser: HeadlessChromium) -> None:
    browser.open(f"{site}/")
    browser.evaluate("fetch('search/search_index.json').then(r => r.ok)")
    browser.wait_for("document.querySelector('.md-search-result__meta').textContent.trim() "
                     "!== 'Initializing search'", "the search worker to load the index")
    browser.evaluate("""(() => {
        const input = document.querySelector('.md-search__input');
        input.focus();
        input.value = 'compaction';
        for (const kind of ['focus', 'input', 'keyup']) input.dispatchEvent(new Event(kind, {bubbles: true}));
    })()""")
    browser.wait_for("document.querySelectorAll('.md-search-result__item').length > 0", "search results")
    titles = browser.evaluate("Array.from(document.querySelectorAll('.md-search-result__item h1'))"
                              ".map(h => h.textContent)")
    assert any("compaction" in title.lower() for title in titles), titles


def test_the_benchmark_page_shows_its_plots(site: str, browser: HeadlessChromium) -> None:
    browser.open(f"{site}/benchmarks/")
    plots = browser.evaluate("Array.from(document.images).filter(i => i.src.endsWith('.svg'))"
                             ".map(i => [i.src.split('/').pop(), i.complete, i.naturalWidth])")
    assert sorted(name for name, _, _ in plots) == ["growth.svg", "peers.svg", "tpch.svg"]
    assert all(complete and width > 300 for _, complete, width in plots), plots
    assert browser.evaluate("document.body.innerText.includes('TPCH_TRINO')")
    picture = browser.screenshot(SCREENSHOT)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert picture.stat().st_size > 50_000  # a page of text and three plots, not a blank one
