"""The REST API (FastAPI; OpenAPI at /openapi.json, docs at /docs and /redoc): submit, look
up and cancel jobs; read, change and revert the scheduling parameters. Run it with
``gpusched api``.

Every route but the health checks and the docs needs a bearer token (``gpusched.api.auth``):
reading needs ``viewer``, submitting and cancelling ``submitter`` acting for the job's
tenant, changing parameters ``operator`` (``admin`` for those marked dangerous).

The docs pages load Swagger UI and ReDoc from files shipped in the fastapi-offline package,
never from a CDN: they work on an air-gapped cluster. ReDoc's bundle fetches its footer
logo from cdn.redoc.ly (hard-coded); ``/redoc`` serves that bundle with the logo pointed at
an inline image instead, so no request leaves the machine."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from functools import cache
from importlib import resources
from typing import Annotated, Any

from aiokafka.errors import KafkaError
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpusched.api.auth import Access, require_tenant
from gpusched.api.console import Console, mount_console
from gpusched.api.jobs import (
    EventLogUnreachable,
    InvalidJob,
    JobStatus,
    SubmitJob,
    cluster_models,
    job_status,
    kafka_failure,
)
from gpusched.api.listing import JobState, NodeState, list_nodes, list_queue
from gpusched.api.params import (
    ParamChange,
    ParamLedger,
    ParamRevert,
    RefusedChange,
    differs,
    param_history,
    refusal,
    values_at,
)
from gpusched.api.settings import ApiSettings
from gpusched.contracts import ControlParameter, ControlStatus, JobEvent, JobEventType, encode
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.health import Dependency, watch_kafka
from gpusched.contracts.producer import Producer
from gpusched.contracts.tokens import Role, TokenFile, TokenRecord
from gpusched.contracts.topics import CONTROL, CONTROL_STATUS, JOBS
from gpusched.store import StoreError, StoreSettings, read_query

__all__ = ["rest_app"]

log = logging.getLogger(__name__)

_REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"
_BLANK_SVG = "data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"
_RECENT_JOBS = 100_000  # submissions remembered for cancels the store has not caught up to
_RETRY_AFTER_S = 5
_READY_TIMEOUT_S = 2.0


@cache
def _redoc_bundle() -> str:
    bundle = resources.files("fastapi_offline") / "static" / "redoc.standalone.js"
    return bundle.read_text().replace(_REDOC_LOGO, _BLANK_SVG)


def rest_app(settings: ApiSettings, store: StoreSettings) -> FastAPI:
    prefix = settings.topic_prefix
    kafka: dict[str, Producer] = {}
    catalog: dict[str, Any] = {"models": {}, "at": -1e9}
    access = Access(TokenFile(settings.api_tokens_file), settings.api_auth)
    # (defaults, not Annotated aliases: annotations are strings here, resolved in the
    # module's namespace, where these locals are not)
    viewer = Depends(access.needs(Role.VIEWER))
    submitter = Depends(access.needs(Role.SUBMITTER))
    operator = Depends(access.needs(Role.OPERATOR))
    ledger = ParamLedger()
    ledger_read = asyncio.Event()
    changing = asyncio.Lock()  # one revision number at a time
    accepted: OrderedDict[str, str] = OrderedDict()  # job id -> tenant, newest last
    event_log = Dependency("the event log (Kafka)", settings.kafka_bootstrap_servers, log)
    store_at = store.sql_url if store.dsn.startswith("chdb") else store.shown_dsn
    the_store = Dependency("the store (ClickHouse)", store_at, log)

    async def models() -> dict[str, int]:
        if time.monotonic() - catalog["at"] > settings.api_catalog_ttl_s:
            catalog["models"] = await asyncio.to_thread(cluster_models, store)
            catalog["at"] = time.monotonic()
        known: dict[str, int] = catalog["models"]
        return known

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # aiokafka objects belong to the loop they are made on: uvicorn's, here.
        # a job the API could not hand over within the bound is dropped from the
        # producer's buffer at once (delivery timeout = the bound: the producer is
        # closed) rather than arriving after its 503; started by the first send
        producer = Producer(settings, delivery_timeout_s=settings.api_kafka_timeout_s)
        kafka["producer"] = producer
        control, status = CONTROL.name(prefix), CONTROL_STATUS.name(prefix)
        followers = [
            asyncio.create_task(watch_kafka(settings, event_log)),
            asyncio.create_task(
                follow_topic(settings, control, ControlParameter, ledger.on_control, ledger_read)
            ),
            asyncio.create_task(
                follow_topic(settings, status, ControlStatus, ledger.on_status, asyncio.Event())
            ),
        ]
        try:
            yield
        finally:
            for task in followers:
                task.cancel()
            await asyncio.gather(*followers, return_exceptions=True)
            await producer.stop()

    app = FastAPIOffline(title="gpusched", version="1", lifespan=lifespan, redoc_url=None)

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="gpusched - ReDoc",
            redoc_js_url="/redoc.standalone.js",
            redoc_favicon_url="/static-offline-docs/favicon.png",
            with_google_fonts=False,
        )

    @app.get("/redoc.standalone.js", include_in_schema=False)
    async def redoc_bundle() -> Response:
        return Response(_redoc_bundle(), media_type="application/javascript")

    def unavailable(why: str, what: str = "nothing was accepted") -> HTTPException:
        # (the event log's state is the watcher's and /readyz's, both metadata probes: a
        # request that fails while the broker comes back must not make the log flap)
        unreachable = EventLogUnreachable(settings.kafka_bootstrap_servers, why)
        return HTTPException(
            503, f"{unreachable}; {what}: retry later", headers={"Retry-After": str(_RETRY_AFTER_S)}
        )

    async def send(*events: JobEvent | ControlParameter) -> None:
        """Hand events to Kafka (job events by job id, parameters by name), acknowledged
        within the bound, or 503."""
        bound = settings.api_kafka_timeout_s
        producer = kafka["producer"]
        try:
            async with asyncio.timeout(bound):
                sent = [
                    await producer.send(
                        JOBS.name(prefix) if isinstance(e, JobEvent) else CONTROL.name(prefix),
                        encode(e),
                        key=(e.job_id if isinstance(e, JobEvent) else e.name).encode(),
                    )
                    for e in events
                ]
                await producer.delivered(sent)
        except (TimeoutError, KafkaError) as exc:
            await producer.discard("a request's events not acknowledged within the bound")
            partly = "it may be partly published: read it back" if len(events) > 1 else None
            raise unavailable(kafka_failure(exc, bound), partly or "nothing was accepted") from exc

    @app.exception_handler(InvalidJob)
    async def invalid(_: Any, exc: InvalidJob) -> JSONResponse:
        detail = [{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.post("/jobs", status_code=201)
    async def submit(job: SubmitJob, who: TokenRecord = submitter) -> dict[str, str]:
        """Validate a job and publish it to the jobs topic; its id comes back."""
        require_tenant(who, job.tenant)
        event = job.event(await models(), actor=who.name)
        await send(event)
        accepted[event.job_id] = job.tenant
        if len(accepted) > _RECENT_JOBS:
            accepted.popitem(last=False)
        return {"job_id": event.job_id, "status": f"/jobs/{event.job_id}"}

    @app.get("/jobs")
    async def queue(
        _: TokenRecord = viewer,
        state: JobState | None = None,
        tenant: str | None = None,
        priority_class: str | None = None,
        limit: Annotated[int, Query(ge=1, le=100_000)] = 1000,
    ) -> list[dict[str, Any]]:
        """Jobs not ended: pending ones by priority with why they wait, then running ones."""
        try:
            rows = await asyncio.to_thread(list_queue, store, state, tenant, priority_class, limit)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc
        return [r.as_dict() for r in rows]

    @app.get("/nodes")
    async def nodes(
        _: TokenRecord = viewer, state: NodeState | None = None
    ) -> list[dict[str, Any]]:
        """Every node's latest live view (GPUs free of total, power, health, jobs)."""
        try:
            rows = await asyncio.to_thread(list_nodes, store, state)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc
        return [r.as_dict() for r in rows]

    @app.get("/jobs/{job_id}")
    async def status(job_id: str, _: TokenRecord = viewer) -> dict[str, Any]:
        """State, nodes, priority with its components, and why it waits (from the store)."""
        found = await _lookup(job_id)
        if found is None:
            raise HTTPException(404, f"no job {job_id} in the store (yet)")
        return found.as_dict()

    async def _lookup(job_id: str) -> JobStatus | None:
        try:
            return await asyncio.to_thread(job_status, job_id, store)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc

    @app.delete("/jobs/{job_id}", status_code=202)
    async def cancel(job_id: str, who: TokenRecord = submitter) -> dict[str, str]:
        """Ask for a job to be cancelled (pending: withdrawn; running: stopped): a job of a
        tenant the token acts for; 404 for a job neither this API accepted nor the store
        knows."""
        tenant = accepted.get(job_id)
        if tenant is None:
            found = await _lookup(job_id)
            if found is None:
                raise HTTPException(404, f"no job {job_id}")
            tenant = found.tenant
        require_tenant(who, tenant)
        event = JobEvent(
            event_id=f"user-{uuid.uuid4().hex}",
            job_id=job_id,
            type=JobEventType.CANCELLED,
            tenant=tenant,
            actor=who.name,
        )
        await send(event)
        return {"job_id": job_id, "status": "cancel requested"}

    async def read_ledger() -> None:
        """Wait (within the bound) until the control topic is read to its end."""
        try:
            await asyncio.wait_for(ledger_read.wait(), settings.api_kafka_timeout_s)
        except TimeoutError as exc:
            raise unavailable("the control topic could not be read", "nothing changed") from exc

    @app.get("/params")
    async def params(_: TokenRecord = viewer) -> dict[str, Any]:
        """The revision in force and when each service applied it, and every scheduling
        parameter: its value, default, unit, bounds, whether only an admin may change it,
        its meaning, and who set it when in which revision."""
        await read_ledger()
        return ledger.describe()

    async def publish(
        request: Request, who: TokenRecord, changes: dict[str, Any], against: int, reason: str
    ) -> dict[str, Any]:
        """Check ``changes`` and publish them as the next revision."""
        await read_ledger()
        try:
            planned = ledger.plan(changes, against, who.role.holds(Role.ADMIN))
        except RefusedChange as exc:
            raise refusal(exc, ledger) from exc
        asked = {
            "set_by": who.name,
            "role": who.role.value,
            "source": request.client.host if request.client else None,
            "changeset": uuid.uuid4().hex,
            "reason": reason,
        }
        messages = [ledger.message(name, old, new, **asked) for name, old, new in planned]
        await send(*messages)
        for message in messages:
            ledger.on_control(message)
        return {
            "revision": ledger.revision,
            "changeset": asked["changeset"],
            "changes": {name: {"old": old, "new": new} for name, old, new in planned},
        }

    @app.patch("/params")
    async def change_params(
        change: ParamChange, request: Request, who: TokenRecord = operator
    ) -> dict[str, Any]:
        """Change parameters as one new revision (operator; admin for those marked
        dangerous): 409 with the values in force when ``revision`` is not the one in force,
        422 naming the parameter and the bound it breaks."""
        return await change_locked(request, who, change.changes, change.revision, change.reason)

    @app.post("/params/revert")
    async def revert_params(
        revert: ParamRevert, request: Request, who: TokenRecord = operator
    ) -> dict[str, Any]:
        """Publish the values of a past revision as a new revision (from the store, so a
        revision it has not stored yet is a 409)."""
        return await revert_locked(request, who, revert.revision, revert.reason)

    async def revert_locked(
        request: Request, who: TokenRecord, revision: int, reason: str | None
    ) -> dict[str, Any]:
        async with changing:
            await read_ledger()
            try:
                values = await asyncio.to_thread(values_at, revision, store)
            except StoreError as exc:
                raise HTTPException(503, f"the store is not reachable: {exc}") from exc
            if values is None or revision > ledger.revision:
                raise HTTPException(
                    409, f"revision {revision} is not in the store (yet): retry shortly"
                )
            current, _ = ledger.params()
            changes = {n: v for n, v in values.items() if differs(current, n, v)}
            reason = reason or f"revert to revision {revision}"
            return await publish(request, who, changes, ledger.revision, reason)

    async def change_locked(
        request: Request, who: TokenRecord, changes: dict[str, Any], against: int, reason: str
    ) -> dict[str, Any]:
        async with changing:
            return await publish(request, who, changes, against, reason)

    mount_console(
        app,
        Console(
            access.tokens,
            settings,
            store,
            ledger,
            read_ledger,
            change_locked,
            revert_locked,
            (event_log, the_store),
        ),
    )

    @app.get("/params/history")
    async def params_history(
        _: TokenRecord = viewer, limit: Annotated[int, Query(ge=1, le=100_000)] = 200
    ) -> list[dict[str, Any]]:
        """The audit trail of parameter changes, newest first: who, role, from where, old
        and new value, why, and what the services did with it (outcome, applied at)."""
        try:
            return await asyncio.to_thread(param_history, limit, store)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        """The process's Prometheus metrics (gpusched.contracts.metrics and the runtime's)."""
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers (cheap; no dependency is asked)."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Each dependency (the event log, the store) with its state; 503 unless all up."""
        checks: dict[str, tuple[Dependency, Awaitable[Any]]] = {
            "kafka": (event_log, kafka["producer"].metadata()),
            "store": (
                the_store,
                asyncio.to_thread(read_query, "SELECT 1", store, _READY_TIMEOUT_S),
            ),
        }
        for dependency, probe in checks.values():
            try:
                await asyncio.wait_for(probe, _READY_TIMEOUT_S)
                dependency.answered()
            except (TimeoutError, KafkaError, StoreError, OSError) as exc:
                dependency.failed(kafka_failure(exc, _READY_TIMEOUT_S))
        report = {name: dependency.as_dict() for name, (dependency, _) in checks.items()}
        ready = all(dependency.up for dependency, _ in checks.values())
        return JSONResponse(report, status_code=200 if ready else 503)

    return app
