"""The administrators' console, served by the API process under ``/console``: Jinja2
pages, htmx for partial updates and server-sent events for live parts, with JavaScript
vendored from npm at pinned versions (``static/vendor/VENDORED.json``; nothing is fetched
at run time).

Sign-in takes an API token (``sessions.Sessions``); every page and every stream checks
the role on the server, not only which controls it shows: a viewer reads, an operator
changes parameters within their bounds, an admin also those marked dangerous. Parameter
changes go through the same checks, revision numbering and audit as ``PATCH /params``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from gpusched.api.console.charts import fair_share_series, overview_series
from gpusched.api.console.forecasts import forecast_chart, forecast_series
from gpusched.api.console.pipeline import PipelineWatch
from gpusched.api.console.sessions import COOKIE, Session, Sessions
from gpusched.api.console.whatif import WhatIf, WhatIfRuns
from gpusched.api.jobs import InvalidJob, job_history
from gpusched.api.listing import NodeRow, list_nodes, list_queue
from gpusched.api.params import ParamLedger, RefusedChange, param_history
from gpusched.contracts import KafkaSettings
from gpusched.contracts.health import Dependency
from gpusched.contracts.tokens import Role, TokenFile, TokenRecord
from gpusched.store import StoreError, StoreSettings, query_pack, read_query

__all__ = ["GPU_STATES", "Console", "gpu_cells", "mount_console"]

_HERE = Path(__file__).parent
_STREAM_S = 0.5
_STREAM_FOR_S = 120.0
_AGES_SQL = (
    "SELECT (SELECT if(count() = 0, NULL, dateDiff('second', max(ts), now64(3))) "
    "FROM telemetry), (SELECT if(count() = 0, NULL, dateDiff('second', max(ts), now64(3))) "
    "FROM node_views)"
)  # how old the newest sample and node view are: is the pipeline flowing?
_TENANT_QUERIES = {  # query pack name -> the title it has on the tenants page
    "energy_per_tenant": "GPU time and energy per tenant",
    "queue_wait_by_class": "Queue wait by priority class",
}
_WHATIF_HOURS = 6.0
_SETTLE_S = 3.0  # the other services' reports come within this of the first

Change = Callable[[Request, TokenRecord, dict[str, Any], int, str], Awaitable[dict[str, Any]]]
Revert = Callable[[Request, TokenRecord, int, str | None], Awaitable[dict[str, Any]]]


@dataclass
class Console:
    """What the console's pages read and change, from the API that serves them."""

    tokens: TokenFile
    kafka: KafkaSettings
    store: StoreSettings
    ledger: ParamLedger
    read_ledger: Callable[[], Awaitable[None]]
    change: Change  # checks, numbers and publishes a revision (PATCH /params)
    revert: Revert  # publishes a past revision's values as a new one (POST /params/revert)
    dependencies: Sequence[Dependency] = ()  # the API's view of the event log and store


GPU_STATES = ("allocated", "idle", "parked", "waking", "stale", "ecc")


def gpu_cells(node: NodeRow) -> list[str]:
    """The state of each GPU of a node, for the heat map: one of GPU_STATES."""
    if node.power_state in ("parked", "waking"):
        return [node.power_state] * node.gpus_total
    out = ["stale"] * node.stale_gpus + ["ecc"] * node.error_gpus
    usable = max(node.gpus_total - len(out), 0)
    used = max(min(usable, math.ceil(usable - node.gpus_free - 1e-9)), 0)
    return ["allocated"] * used + ["idle"] * (usable - used) + out


def _shown(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def _bars(components: dict[str, float]) -> list[tuple[str, float, float]]:
    """(name, % of the bar, value) of each score component, by size."""
    total = sum(abs(v) for v in components.values()) or 1.0
    ranked = sorted(components.items(), key=lambda kv: -abs(kv[1]))
    return [(name, round(100 * abs(v) / total, 1), v) for name, v in ranked]


def _detail(exc: HTTPException) -> str:
    """An API refusal in words (409: its message; 422: each field's message)."""
    detail = exc.detail
    if isinstance(detail, dict):
        return str(detail.get("message", detail))
    if isinstance(detail, list):
        return "; ".join(str(d["msg"]) for d in detail)
    return str(detail)


def _revision(fields: dict[str, str]) -> int:
    try:
        return int(fields.get("revision", ""))
    except ValueError as exc:
        raise HTTPException(422, "revision: a whole number") from exc


def mount_console(app: FastAPI, console: Console) -> None:
    """Serve the console on ``app`` under /console (kept out of the OpenAPI document)."""
    sessions = Sessions(console.tokens)
    templates = Jinja2Templates(directory=_HERE / "templates")
    app.mount("/console/static", StaticFiles(directory=_HERE / "static"), name="console-static")
    router = APIRouter(prefix="/console", include_in_schema=False)
    whatifs = WhatIfRuns()
    pipeline = PipelineWatch(console.kafka)
    running: set[asyncio.Task[None]] = set()  # what-if threads (a reference each)

    def signed_in(request: Request, role: Role = Role.VIEWER) -> tuple[Session, TokenRecord]:
        found = sessions.current(request)
        if found is None:
            raise HTTPException(303, "sign in first", headers={"Location": "/console/login"})
        session, who = found
        if not who.role.holds(role):
            raise HTTPException(
                403, f"{who.name!r} has role {who.role.value}; this needs {role.value} or above"
            )
        return session, who

    async def form(request: Request, role: Role) -> tuple[TokenRecord, dict[str, str]]:
        """The fields of an unsafe request from a session holding ``role``, CSRF checked."""
        session, who = signed_in(request, role)
        fields = {k: str(v) for k, v in (await request.form()).items()}
        sessions.check_unsafe(request, session, fields.get("csrf"))
        return who, fields

    def page(request: Request, name: str, **context: Any) -> HTMLResponse:
        session, who = signed_in(request)
        return templates.TemplateResponse(
            request, f"{name}.html", {"page": name, "title": name, "session": session,
                                      "who": who, **context}
        )  # fmt: skip

    async def stored(read: Callable[[], Any]) -> Any:
        try:
            return await asyncio.to_thread(read)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc

    @router.get("/login")
    async def login_page(request: Request) -> HTMLResponse:
        return templates.TemplateResponse(request, "login.html", {"title": "sign in"})

    @router.post("/login")
    async def login(request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != f"{request.url.scheme}://{request.url.netloc}":
            raise HTTPException(403, f"cross-origin sign-in from {origin} refused")
        token = str((await request.form()).get("token", ""))
        signed = sessions.sign_in(token)
        if signed is None:
            context = {"title": "sign in", "error": "unknown, malformed or revoked token"}
            return templates.TemplateResponse(request, "login.html", context, status_code=401)
        sid, _ = signed
        response = RedirectResponse("/console", status_code=303)
        response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/console")
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        await form(request, Role.VIEWER)
        sessions.sign_out(request.cookies.get(COOKIE))
        response = RedirectResponse("/console/login", status_code=303)
        response.delete_cookie(COOKIE, path="/console")
        return response

    @router.get("")
    async def overview(request: Request) -> HTMLResponse:
        signed_in(request)
        nodes = await stored(lambda: list_nodes(console.store))
        jobs = await stored(lambda: list_queue(console.store, limit=100_000))
        shown = []
        counts = dict.fromkeys(GPU_STATES, 0)
        for n in nodes:
            cells = gpu_cells(n)
            for cell in cells:
                counts[cell] += 1
            used = round(n.gpus_total - n.stale_gpus - n.error_gpus - n.gpus_free, 2)
            shown.append({**n.as_dict(), "cells": cells, "used": used})
        ages = await stored(lambda: read_query(_AGES_SQL, console.store).rows[0])
        series = await stored(lambda: overview_series(console.store))
        return page(
            request,
            "overview",
            dependencies=[(d.name, d.as_dict()) for d in console.dependencies],
            pipeline=await pipeline.current(),
            series=series,
            telemetry_age_s=ages[0],
            view_age_s=ages[1],
            nodes=shown,
            gpu_counts=counts,
            total_gpus=sum(counts.values()),
            pending=sum(j.state == "pending" for j in jobs),
            running=sum(j.state == "running" for j in jobs),
        )

    @router.get("/queue")
    async def queue(
        request: Request,
        state: str | None = None,
        tenant: str | None = None,
        priority_class: str | None = None,
    ) -> HTMLResponse:
        signed_in(request)
        filters = {"state": state or None, "tenant": tenant or None,
                   "priority_class": priority_class or None}  # fmt: skip
        if filters["state"] not in (None, "pending", "running"):
            raise HTTPException(422, "state: pending or running")
        rows = await stored(
            lambda: list_queue(console.store, filters["state"], filters["tenant"],  # type: ignore[arg-type]
                               filters["priority_class"], limit=2000)
        )  # fmt: skip
        jobs = [{**r.as_dict(), "bars": _bars(r.components)} for r in rows]
        return page(request, "queue", jobs=jobs, filters=filters)

    @router.get("/jobs/{job_id}")
    async def job(request: Request, job_id: str) -> HTMLResponse:
        signed_in(request)
        try:
            history = await stored(lambda: job_history(job_id, console.store))
        except InvalidJob as exc:
            raise HTTPException(422, str(exc)) from exc
        if not history["events"]:
            raise HTTPException(404, f"no job {job_id} in the store (yet)")
        return page(request, "job", job_id=job_id, **history)

    def params_state() -> dict[str, Any]:
        state = console.ledger.describe()
        for p in state["params"]:
            p.update(shown=_shown(p["value"]), default_shown=_shown(p["default"]))
        return state

    @router.get("/params")
    async def params(request: Request) -> HTMLResponse:
        _, who = signed_in(request)
        await console.read_ledger()
        return page(
            request,
            "params",
            state=params_state(),
            can_edit=who.role.holds(Role.OPERATOR),
            is_admin=who.role.holds(Role.ADMIN),
        )

    def changes_in(fields: dict[str, str]) -> dict[str, Any]:
        return {k[2:]: v for k, v in fields.items() if k.startswith("p.") and v.strip()}

    @router.post("/params/preview")
    async def preview(request: Request) -> HTMLResponse:
        who, fields = await form(request, Role.OPERATOR)
        changes, reason = changes_in(fields), fields.get("reason", "").strip()
        revision = _revision(fields)
        context: dict[str, Any] = {"changes": changes, "reason": reason, "revision": revision}
        try:
            if not reason:
                raise RefusedChange(422, None, "a reason is required")
            if not changes:
                raise RefusedChange(422, None, "no new value given")
            context["planned"] = console.ledger.plan(changes, revision, who.role.holds(Role.ADMIN))
        except RefusedChange as exc:
            context["error"] = f"{exc.name + ': ' if exc.name else ''}{exc.message}"
        return templates.TemplateResponse(request, "preview.html", context)

    async def published(request: Request, making: Awaitable[dict[str, Any]]) -> HTMLResponse:
        """The fragment of a change made: 'sent', then its live state; or why refused."""
        context: dict[str, Any] = {}
        try:
            context["revision"] = (await making)["revision"]
        except HTTPException as exc:
            context["error"] = f"refused ({exc.status_code}): {_detail(exc)}"
        return templates.TemplateResponse(request, "applied.html", context)

    @router.post("/params/apply")
    async def apply(request: Request) -> HTMLResponse:
        who, fields = await form(request, Role.OPERATOR)
        revision, reason = _revision(fields), fields.get("reason", "")
        return await published(
            request, console.change(request, who, changes_in(fields), revision, reason)
        )

    @router.post("/params/revert")
    async def revert(request: Request) -> HTMLResponse:
        """Publish the values of a past revision as a new one (the audit page's button)."""
        who, fields = await form(request, Role.OPERATOR)
        return await published(request, console.revert(request, who, _revision(fields), None))

    @router.post("/whatif")
    async def whatif(request: Request) -> HTMLResponse:
        """Start a what-if replay of the candidate values (a background thread)."""
        _, fields = await form(request, Role.OPERATOR)
        try:
            hours = min(max(float(fields.get("hours") or _WHATIF_HOURS), 0.1), 7 * 24)
        except ValueError as exc:
            raise HTTPException(422, "hours: a number") from exc
        run = WhatIf(changes_in(fields), hours)
        run_id = whatifs.add(run)
        current, _ = console.ledger.params()
        task = asyncio.create_task(asyncio.to_thread(run.run, current, console.store))
        running.add(task)
        task.add_done_callback(running.discard)
        return templates.TemplateResponse(request, "whatif.html", {"run_id": run_id, "run": run})

    @router.get("/whatif/{run_id}/stream")
    async def whatif_stream(request: Request, run_id: str) -> StreamingResponse:
        """SSE: the replay's progress every 0.5 s, then the comparison table."""
        signed_in(request, Role.OPERATOR)
        run = whatifs.runs.get(run_id)
        if run is None:
            raise HTTPException(404, f"no what-if run {run_id} (it may have been forgotten)")
        status = templates.get_template("whatif_status.html")

        async def events() -> AsyncIterator[str]:
            while True:
                finished = run.finished
                html = status.render(run=run).replace("\n", "")
                yield f"event: progress\ndata: {html}\n\n"
                if finished:
                    break
                await asyncio.sleep(_STREAM_S)
            yield "event: done\ndata: \n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @router.get("/params/stream")
    async def stream(request: Request, revision: int) -> StreamingResponse:
        """SSE: the revision's state ('sent', then 'applied at ...' per service), every
        0.5 s until every service that reports has applied it, a few seconds after the
        first did (or two minutes)."""
        signed_in(request)
        status = templates.get_template("status.html")

        async def events() -> AsyncIterator[str]:
            for _ in range(int(_STREAM_FOR_S / _STREAM_S)):
                applied = console.ledger.applied_at.get(revision, {})
                html = status.render(
                    revision=revision,
                    applied={s: at.strftime("%H:%M:%S") for s, at in sorted(applied.items())},
                ).replace("\n", "")
                yield f"event: status\ndata: {html}\n\n"
                settled = applied and time.time() - min(applied.values()).timestamp() > _SETTLE_S
                if settled and set(applied) >= set(console.ledger.in_force):
                    break  # every service known to report has applied it, for a while now
                await asyncio.sleep(_STREAM_S)
            yield "event: done\ndata: \n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    @router.get("/forecasts")
    async def forecasts(request: Request, series: str = "gpu_demand/all") -> HTMLResponse:
        signed_in(request)
        known = await stored(lambda: forecast_series(console.store))
        chart = await stored(lambda: forecast_chart(series, console.store))
        return page(request, "forecasts", series=series, known=known, chart=chart)

    @router.get("/tenants")
    async def tenants(request: Request) -> HTMLResponse:
        """Fair share over time and the query pack's per-tenant and per-class answers."""
        signed_in(request)
        pack = query_pack()
        tables = {}
        for name in _TENANT_QUERIES:
            answer = await stored(partial(read_query, pack[name], console.store))
            tables[name] = (answer.columns, answer.rows)
        shares = await stored(lambda: fair_share_series(console.store))
        return page(request, "tenants", tables=tables, titles=_TENANT_QUERIES, shares=shares)

    @router.get("/audit")
    async def audit(request: Request) -> HTMLResponse:
        _, who = signed_in(request)
        rows = await stored(lambda: param_history(500, console.store))
        return page(request, "audit", rows=rows, can_edit=who.role.holds(Role.OPERATOR))

    app.include_router(router)
