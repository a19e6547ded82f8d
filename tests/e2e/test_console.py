"""The console in a real browser (Debian's Chromium through Playwright) against the
platform started as `make run` starts it: sign-in per role, the heat map of every GPU,
the queue, a parameter change applied live and audited, and the server refusing what a
role may not do and what comes without the CSRF token."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page

from gpusched.core import Params
from tests.e2e.conftest import Platform

pytestmark = [pytest.mark.browser, pytest.mark.kafka, pytest.mark.slow]

NODES = 16  # the platform fixture's cluster: 16 nodes x 8 GPUs
# GPUSCHED_CONSOLE_SCREENSHOTS=docs/console: each page's screenshot, for the README
SHOTS = os.environ.get("GPUSCHED_CONSOLE_SCREENSHOTS")


@pytest.fixture(scope="module")
def platform_env() -> dict[str, str]:
    """One-minute forecast steps: a forecast within a minute or two of the start; jobs
    that run two minutes of wall time (2 h of cluster time at 60x), so that some wait."""
    return {"GPUSCHED_FORECASTER_STEP_S": "60", "GPUSCHED_SIMCLUSTER_DEFAULT_DURATION_S": "7200"}


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def _reloaded(page: Page) -> bool:
    """Reload the page (for a condition polled by wait_for); always True."""
    page.reload()
    return True


def _qos_terms(page: Page) -> set[str]:
    """The values of the QoS component of the waiting jobs on the queue page."""
    bars = page.locator("tr.pending td.bar span[title^='qos ']")
    return {(bars.nth(i).get_attribute("title") or "").split()[-1] for i in range(bars.count())}


def _sign_in(browser: Browser, api: str, token: str, errors: list[str]) -> Page:
    page = browser.new_page()
    page.on(
        "console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
    )
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.url}: {r.status}")
            if r.status >= 400 and "/console/params/apply" not in r.url
            else None
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(f"{api}/console")
    assert page.url.endswith("/console/login")  # not signed in: sent to sign in
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{api}/console")
    return page


def test_console_roles_heat_map_and_a_live_parameter_change(
    platform: Platform, browser: Browser
) -> None:
    p = platform.pipeline
    viewer = p.token("--role", "viewer", "--name", "watcher")
    operator = p.token("--role", "operator", "--name", "tuner")
    with platform.client() as client:
        for i in range(NODES + 6):  # a node each, then 4 high-class and 2 normal jobs wait
            body = {"gpus": 8, "tenant": "team-a", "job_id": f"console-{i}",
                    "priority_class": "normal" if i >= NODES + 4 else "high"}  # fmt: skip
            assert client.post("/jobs", json=body).status_code == 201
    errors: list[str] = []

    # a viewer sees every GPU and the queue, and no edit control; the server refuses
    # a forged change (role) whatever the page shows
    page = _sign_in(browser, platform.api, viewer, errors)
    p.wait_for(
        "the heat map to show every GPU",
        lambda: _reloaded(page) and page.locator(".heat i").count() == NODES * 8,
        timeout=60,
    )
    page.wait_for_selector("#activity .uplot canvas", timeout=10_000)  # jobs and power
    health = page.inner_text("section.health")
    assert "the event log (Kafka): up" in health
    assert "newest telemetry:" in health
    assert "none yet" not in health  # the collector and the processor are flowing
    pipeline = page.inner_text("#pipeline")
    assert "sink lag:" in pipeline  # the consumer groups' lag, read from Kafka
    assert "jobs.v1.dlq: 0 dead letters" in pipeline
    _shot(page, "overview")
    page.goto(f"{platform.api}/console/queue?state=pending&priority_class=high")
    p.wait_for(
        "waiting high-class jobs with their reasons, estimated starts and QoS term",
        lambda: _reloaded(page) and _qos_terms(page),
        timeout=60,
    )
    waiting = page.locator("table.queue tr.pending")
    assert waiting.count() >= 4
    assert all(waiting.nth(i).locator("td.reason").inner_text() for i in range(waiting.count()))
    assert all(waiting.nth(i).locator("td.start").inner_text() for i in range(waiting.count()))
    assert _qos_terms(page) == {f"{-math.log(Params().dynamic_qos_factor):.3g}"}  # one step
    _shot(page, "queue")
    page.goto(f"{platform.api}/console/params")
    assert page.locator("tr[data-param=dynamic_qos_factor]").count() == 1
    assert page.locator("input[name^='p.']").count() == 0
    csrf = page.locator("form.who input[name=csrf]").get_attribute("value")
    forged = page.request.post(
        f"{platform.api}/console/params/apply",
        form={"csrf": csrf or "", "revision": "0", "reason": "x", "p.dynamic_qos_factor": "5"},
    )
    assert forged.status == 403
    assert "needs operator" in forged.text()
    page.close()

    # an operator changes a parameter with a reason: applied live, then audited
    page = _sign_in(browser, platform.api, operator, errors)
    no_csrf = page.request.post(
        f"{platform.api}/console/params/apply",
        form={"revision": "0", "reason": "x", "p.dynamic_qos_factor": "5"},
    )
    assert no_csrf.status == 403
    assert "CSRF" in no_csrf.text()
    page.goto(f"{platform.api}/console/params")
    assert page.locator("input[name='p.dynamic_tick_s']").count() == 0  # admin only
    page.fill("input[name='p.dynamic_qos_factor']", "20")
    page.fill("input[name=reason]", "favour high-class jobs more")
    # what-if first: the last hours replayed with and without the change
    page.click("#whatif")
    page.wait_for_selector(".whatif .state:text('done')", timeout=60_000)
    table = page.inner_text("table.whatif-table")
    assert "wait avg (normal)" in table
    assert "preemptions" in table
    _shot(page, "whatif")
    page.click("#change button[type=submit]")
    page.wait_for_selector("#apply", timeout=10_000)
    assert str(Params().dynamic_qos_factor) in page.locator("table.diff").inner_text()
    _shot(page, "params-preview")
    page.click("#apply")
    page.wait_for_selector(".revision .state:text('applied')", timeout=15_000)
    _shot(page, "params-applied")
    page.goto(f"{platform.api}/console/queue?state=pending&priority_class=high")
    p.wait_for(
        "the queue's QoS component to follow the new factor",
        lambda: _reloaded(page) and _qos_terms(page) == {f"{-math.log(20):.3g}"},
        timeout=60,
    )
    page.goto(f"{platform.api}/console/audit")
    p.wait_for(
        "the change in the audit page",
        lambda: _reloaded(page) and "favour high-class jobs more" in page.inner_text("table.audit"),
        timeout=60,
    )
    _shot(page, "audit")
    row = page.locator("tr[data-revision='1']").first.inner_text()
    assert "dynamic_qos_factor" in row
    assert "tuner" in row

    # one-click revert from the audit page: after an admin's revision 2, restore 1
    with platform.client() as client:
        body = {"changes": {"dynamic_qos_factor": 25}, "reason": "try 25", "revision": 1}
        assert client.patch("/params", json=body).status_code == 200
    p.wait_for(
        "revision 2 on the audit page",
        lambda: _reloaded(page) and page.locator("tr[data-revision='2']").count() == 1,
        timeout=60,
    )
    page.on("dialog", lambda dialog: dialog.accept())
    page.click("tr[data-revision='1'] button.restore")
    page.wait_for_selector(".revision .state:text('applied')", timeout=15_000)
    with platform.client() as client:
        shown = client.get("/params").json()
    assert shown["revision"] == 3
    assert {p["name"]: p["value"] for p in shown["params"]}["dynamic_qos_factor"] == 20.0

    # the demand forecast, drawn by uPlot over what happened
    page.goto(f"{platform.api}/console/forecasts")
    p.wait_for(
        "a forecast chart",
        lambda: _reloaded(page) and page.locator("#chart .uplot canvas").count() == 1,
        timeout=120,
    )
    _shot(page, "forecasts")

    # an admin also edits the parameters marked dangerous
    admin = _sign_in(browser, platform.api, platform.token, errors)
    admin.goto(f"{platform.api}/console/params")
    assert admin.locator("input[name='p.dynamic_tick_s']").count() == 1
    admin.close()

    # the query pack's per-tenant answers: team-a's jobs drew energy
    page.goto(f"{platform.api}/console/tenants")
    p.wait_for(
        "team-a's energy on the tenants page",
        lambda: (
            _reloaded(page) and "team-a" in page.inner_text("table[data-query=energy_per_tenant]")
        ),
        timeout=60,
    )
    assert page.locator("table[data-query=queue_wait_by_class]").count() == 1
    page.wait_for_selector("#shares .uplot canvas", timeout=10_000)  # fair share per hour
    _shot(page, "tenants")

    # a job's page: its lifecycle with who submitted it
    page.goto(f"{platform.api}/console/jobs/console-0")
    assert "submitted" in page.inner_text("table.timeline")
    assert "e2e" in page.locator("tr[data-step=submitted]").inner_text()
    _shot(page, "job")
    page.close()

    # The console's reads through the server-DSN code path (clickhouse-connect's HTTP
    # client): a second API whose store DSN is the platform sink's ClickHouse HTTP
    # interface, reached as a ClickHouse server would be. No ClickHouse server runs here
    # (README): this checks our SQL and the client path, with the same engine behind it.
    reader = p.token("--role", "viewer", "--name", "console-reader")
    api = p.start_api(GPUSCHED_STORE_DSN=f"http://console-reader:{reader}@127.0.0.1:{p.sql_port}")
    page = _sign_in(browser, api, reader, errors)
    p.wait_for(
        "the heat map through the server DSN",
        lambda: _reloaded(page) and page.locator(".heat i").count() == NODES * 8,
        timeout=60,
    )
    assert "the store (ClickHouse): up" in page.inner_text("section.health")
    page.goto(f"{api}/console/jobs/console-0")
    assert "e2e" in page.locator("tr[data-step=submitted]").inner_text()
    page.goto(f"{api}/console/tenants")
    assert "team-a" in page.inner_text("table[data-query=energy_per_tenant]")
    for path in ("/queue?state=pending", "/forecasts", "/audit", "/params"):
        page.goto(f"{api}/console{path}")
    page.close()
    assert errors == []
