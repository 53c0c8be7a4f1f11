"""A real browser on the decision playground: Debian's `chromium` driven by Playwright.

The page is served by the real gateway (in-process, on a free port) in front of the real
server on the default model (`server_url` from tests/conftest.py). Playwright's own browser
download is not used: it launches the `chromium` found on PATH.

Without Playwright or chromium these tests skip, except where `STRATA_BROWSER_REQUIRED=1`
(the `browser` nox session sets it): there a missing browser is a failure.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from strata_decide.gateway import GatewayConfig
from strata_decide.gateway.serve import background

KEY = "playground-test-key"
ROOT = Path(__file__).resolve().parents[2]


def _required() -> bool:
    return os.environ.get("STRATA_BROWSER_REQUIRED") == "1"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        reason = "Debian's chromium is not on PATH (apt-get install chromium)"
        if _required():
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    """Chromium for one module: Playwright's sync API runs an event loop on this thread until
    it stops, which tests elsewhere that call asyncio.run() must not find still running."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if _required():
            pytest.fail("playwright is not installed (pip install playwright)")
        pytest.skip("playwright is not installed (pip install playwright)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def gateway(server_url: str) -> Iterator[str]:
    """The gateway without auth, serving the page at `/`."""
    with background(GatewayConfig(upstream=server_url, upstream_timeout=300)) as url:
        yield url


@pytest.fixture(scope="session")
def keyed_gateway(server_url: str) -> Iterator[str]:
    """The gateway with `--api-key KEY`."""
    with background(GatewayConfig(upstream=server_url, api_key=KEY, upstream_timeout=300)) as url:
        yield url


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go (gitignored): $STRATA_ARTIFACTS or <repo>/artifacts/playground."""
    folder = Path(os.environ.get("STRATA_ARTIFACTS", ROOT / "artifacts")) / "playground"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh tab (own session storage) at desktop size; console errors in `page.errors`."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(600_000)  # a loaded 2-core host can take minutes per request
    tab.errors = []
    tab.on("console", lambda m: tab.errors.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.errors.append(f"uncaught: {e}"))
    yield tab
    context.close()
