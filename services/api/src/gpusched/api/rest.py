"""The REST API (FastAPI; OpenAPI at /openapi.json, docs at /docs and /redoc): submit, look
up and cancel jobs. Run it with ``gpusched api``.

Every route but the health check and the docs needs a bearer token (``gpusched.api.auth``):
reading needs ``viewer``, submitting and cancelling ``submitter`` acting for the job's
tenant.

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

from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi_offline import FastAPIOffline

from gpusched.api.auth import Access, require_tenant
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
from gpusched.api.params import current_params
from gpusched.api.settings import ApiSettings
from gpusched.api.tokens import Role, TokenFile, TokenRecord
from gpusched.contracts import JobEvent, JobEventType, encode
from gpusched.contracts.health import Dependency
from gpusched.contracts.topics import JOBS
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
    topic = JOBS.name(settings.topic_prefix)
    kafka: dict[str, AIOKafkaProducer] = {}
    catalog: dict[str, Any] = {"models": {}, "at": -1e9}
    access = Access(TokenFile(settings.api_tokens_file), settings.api_auth)
    # (defaults, not Annotated aliases: annotations are strings here, resolved in the
    # module's namespace, where these locals are not)
    viewer = Depends(access.needs(Role.VIEWER))
    submitter = Depends(access.needs(Role.SUBMITTER))
    accepted: OrderedDict[str, str] = OrderedDict()  # job id -> tenant, newest last
    event_log = Dependency("the event log (Kafka)", settings.kafka_bootstrap_servers, log)
    store_at = store.sql_url if store.dsn.startswith("chdb") else store.dsn.split("@")[-1]
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
        # a job the API could not hand over in time expires from the producer's buffer
        # soon after (request timeout = the bound) rather than arriving after its 503
        producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap_servers,
            acks="all",
            request_timeout_ms=int(settings.api_kafka_timeout_s * 1000),
        )
        await producer.start()
        kafka["producer"] = producer
        try:
            yield
        finally:
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

    async def send(event: JobEvent) -> None:
        """Hand one job event to Kafka, acknowledged within the bound, or 503."""
        bound = settings.api_kafka_timeout_s
        try:
            await asyncio.wait_for(
                kafka["producer"].send_and_wait(topic, encode(event), key=event.job_id.encode()),
                bound,
            )
        except (TimeoutError, KafkaError) as exc:
            why = kafka_failure(exc, bound)
            event_log.failed(why)
            unreachable = EventLogUnreachable(settings.kafka_bootstrap_servers, why)
            raise HTTPException(
                503,
                f"{unreachable}; nothing was accepted: retry later",
                headers={"Retry-After": str(_RETRY_AFTER_S)},
            ) from exc
        event_log.answered()

    @app.exception_handler(InvalidJob)
    async def invalid(_: Any, exc: InvalidJob) -> JSONResponse:
        detail = [{"loc": ["body", exc.field], "msg": exc.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.post("/jobs", status_code=201)
    async def submit(job: SubmitJob, who: TokenRecord = submitter) -> dict[str, str]:
        """Validate a job and publish it to the jobs topic; its id comes back."""
        require_tenant(who, job.tenant)
        event = job.event(await models())
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
            event_id=f"user-{uuid.uuid4().hex}", job_id=job_id, type=JobEventType.CANCELLED
        )
        await send(event)
        return {"job_id": job_id, "status": "cancel requested"}

    @app.get("/params")
    async def params(_: TokenRecord = viewer) -> list[dict[str, Any]]:
        """Every scheduling parameter: the value in force, its default, unit, bounds,
        whether only an admin may change it, its meaning, and who set it when."""
        try:
            return await asyncio.to_thread(current_params, store)
        except StoreError as exc:
            raise HTTPException(503, f"the store is not reachable: {exc}") from exc

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """The process answers (cheap; no dependency is asked)."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Each dependency (the event log, the store) with its state; 503 unless all up."""
        checks: dict[str, tuple[Dependency, Awaitable[Any]]] = {
            "kafka": (event_log, kafka["producer"].client.fetch_all_metadata()),
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
