"""The REST API's docs pages load in a real browser with no request leaving the machine
(Swagger UI and ReDoc come from files shipped with the package, not a CDN)."""

from __future__ import annotations

import httpx
import pytest
from playwright.sync_api import sync_playwright

from gpusched.local.browser import CHROMIUM_ARGS, chromium
from tests.pipeline import Pipeline, free_port

pytestmark = [pytest.mark.browser, pytest.mark.kafka, pytest.mark.slow]


def _outside(url: str, base: str) -> bool:
    """A request over the network to anywhere but the API (data: URLs stay in the page)."""
    return url.startswith(("http://", "https://")) and not url.startswith(base)


def test_docs_and_redoc_load_offline(pipeline: Pipeline) -> None:
    port = free_port()
    pipeline.start("api", "--port", str(port))
    base = f"http://127.0.0.1:{port}"
    pipeline.wait_for("the API", lambda: httpx.get(f"{base}/healthz").status_code == 200, 60)
    executable = chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(executable), args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page()
            failed: list[str] = []
            outside: list[str] = []
            page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
            page.on("request", lambda r: outside.append(r.url) if _outside(r.url, base) else None)
            page.goto(f"{base}/docs")
            page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)  # operations drawn
            assert page.locator(".opblock-summary-path").filter(has_text="/jobs").count() >= 1
            page.goto(f"{base}/redoc")
            page.wait_for_selector("h1", timeout=30_000)  # ReDoc drew the API's title
            assert "gpusched" in page.locator("h1").first.inner_text()
        finally:
            browser.close()
    assert failed == []
    assert outside == []
