"""Pages people open in a browser, loaded in a real one (Debian's Chromium) with no
request leaving the machine: the REST API's docs (Swagger UI and ReDoc from files shipped
with the package, not a CDN) and a replay report (Plotly's JS inside the file)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import Browser
from typer.testing import CliRunner

from gpusched.cli.main import app
from gpusched.sim import traces_dir
from tests.pipeline import Pipeline

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _outside(url: str, base: str) -> bool:
    """A request over the network to anywhere but the API (data: URLs stay in the page)."""
    return url.startswith(("http://", "https://")) and not url.startswith(base)


@pytest.mark.kafka
def test_docs_and_redoc_load_offline(pipeline: Pipeline, browser: Browser) -> None:
    base = pipeline.start_api()
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
    page.close()
    assert failed == []
    assert outside == []


def test_replay_report_draws_its_charts_offline(browser: Browser, tmp_path: Path) -> None:
    traces = traces_dir(Path(__file__).resolve().parents[2].parent / "shared" / "traces")
    report = tmp_path / "report.html"
    done = CliRunner().invoke(
        app,
        ["replay", "--jobs", str(traces / "tiresias_60job.jobs.csv"),
         "--cluster", str(traces / "tiresias_16x4.cluster.csv"),
         "--policies", "fifo,tiresias,dynamic", "--time-scale", "8",
         "--json", str(tmp_path / "r.json"), "--report", str(report)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(f"{r.url} ({r.failure})"))
    page.on("request", lambda r: failed.append(r.url) if r.url.startswith("http") else None)
    page.goto(report.as_uri())
    page.wait_for_selector(".plotly-graph-div .main-svg", timeout=30_000)
    assert page.locator(".plotly-graph-div .scatterlayer .trace").count() >= 5 * 3
    assert "tiresias" in page.locator("table").first.inner_text()
    if shot := os.environ.get("GPUSCHED_REPORT_SCREENSHOT"):
        page.screenshot(path=shot, full_page=False)  # docs/report.png is made this way
    page.close()
    assert failed == []
