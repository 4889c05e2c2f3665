"""The dashboard in a real browser: headless Chromium (the system's, never one Playwright downloads)
driven by Playwright against a real `temper serve` on a free loopback port with its own database.

Skipped, with the reason, when Playwright or a `chromium` on PATH is missing (`./dev test` tries to
install Debian's chromium when it can). Screenshots go to $TEMPER_SCREENSHOTS or, by default,
`tests/service/browser/screenshots/` under pytest's temporary directory; the run's summary says where.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.service.api.server import LiveServer
from tests.service.browser.harness import CHROMIUM_ARGS, VIEWPORT, Dashboard, Watched, chromium_path, watch

if TYPE_CHECKING:
    from playwright.sync_api import Browser

_screenshot_dir = pytest.StashKey[Path]()


@pytest.fixture(scope="session")
def screenshots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("TEMPER_SCREENSHOTS")
    base = tmp_path_factory.getbasetemp()
    path = Path(given) if given else base / "tests" / "service" / "browser" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    request.config.stash[_screenshot_dir] = path
    return path


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    path = config.stash.get(_screenshot_dir, None)
    if path is not None:
        terminalreporter.write_line(f"dashboard screenshots: {path}")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (it is in the 'test' extra: pip install -e '.[test]')")
    executable = chromium_path()
    if executable is None:
        pytest.skip(
            "no chromium on PATH: these tests drive the system's Chromium (Debian: apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory, browser: Browser) -> Iterator[Dashboard]:
    """A real `temper serve` (embedded worker, SQLite in a temporary directory) for one test module."""
    data_dir = tmp_path_factory.mktemp("dashboard") / "data"
    env = {
        "TEMPER_DATA_DIR": str(data_dir),
        "TEMPER_JOB_POLL_S": "0.2",
        "TEMPER_WORKER_LEASE_S": "4",
        "TEMPER_EMBEDDED_WORKER": "true",
    }
    server = LiveServer(data_dir, env).start()
    try:
        yield Dashboard(server, server.create_key("browser", admin=True))
    finally:
        server.stop()


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Callable[..., Watched]]:
    """`open_page(width=1280, height=800)`: a new browser context (empty sessionStorage) and page."""
    contexts = []

    def make(width: int = VIEWPORT["width"], height: int = VIEWPORT["height"]) -> Watched:
        context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        contexts.append(context)
        return watch(context.new_page())

    yield make
    for context in contexts:
        context.close()
