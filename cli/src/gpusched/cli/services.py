"""``gpusched collect | process | sink | forecast serve``: run one service in the foreground.

Each reads its settings from the environment (see the README's settings table); options
given here override them. SIGINT/SIGTERM stop the service after it has handed over what it
holds (the collector's buffer, the sink's current batch).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
import uvicorn
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console

from gpusched.api import (
    ApiSettings,
    EventLogUnreachable,
    InvalidJob,
    SubmitJob,
    cluster_models,
    job_status,
    publish,
    rest_app,
)
from gpusched.collector import CollectorError, CollectorSettings, run_collector
from gpusched.contracts.logs import configure_logging, logging_config
from gpusched.core import CoreError, make_policy
from gpusched.dispatcher import BackendError, DispatcherSettings, run_dispatcher
from gpusched.forecaster import ForecasterSettings, run_forecaster
from gpusched.processor import ProcessorSettings, run_worker
from gpusched.sim import SimError, load_cluster
from gpusched.simcluster import SimCluster, SimClusterSettings, simcluster_app, trace_durations
from gpusched.sink import SinkSettings, run_sink, serve_store
from gpusched.store import StoreError, StoreSettings

__all__ = [
    "api",
    "collect",
    "dispatch",
    "forecast",
    "process",
    "simcluster",
    "sink",
    "status",
    "store_server",
    "submit",
]

console = Console(stderr=True)
S = TypeVar("S", bound=BaseSettings)
T = TypeVar("T")


def _settings(kind: type[S], **overrides: Any) -> S:
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return kind(**given)
    except ValidationError as exc:
        console.print(f"[red]invalid settings:[/] {exc}")
        raise typer.Exit(2) from exc


def _logging(level: str) -> None:
    """Log to stderr at ``level``, as text or as JSON lines (``GPUSCHED_LOG_FORMAT``)."""
    configure_logging(level)


def _until_signal(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    return asyncio.run(runner())


def _on_the_store(
    main: Callable[[SinkSettings, StoreSettings, asyncio.Event], Awaitable[object]],
    settings: SinkSettings,
) -> None:
    """``main`` on the store of the environment until a signal; a store it cannot use
    ends the command with its error (exit 2)."""
    store = _settings(StoreSettings)
    try:
        _until_signal(lambda stop: main(settings, store, stop))
    except StoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


def collect(
    source: Annotated[str | None, typer.Option(help="nvml, host (no GPUs) or simulated")] = None,
    cluster: Annotated[Path | None, typer.Option(help="*.cluster.csv to simulate")] = None,
    interval: Annotated[float | None, typer.Option(help="seconds between samples")] = None,
    speed: Annotated[float | None, typer.Option(help="simulated clock speed-up")] = None,
    rounds: Annotated[int | None, typer.Option(help="stop after this many rounds")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Publish GPU telemetry (NVML, or a simulated cluster) to the telemetry topic."""
    _logging(log_level)
    settings = _settings(
        CollectorSettings,
        collector_source=source,
        collector_cluster=cluster,
        collector_interval_s=interval,
        collector_speed=speed,
        collector_rounds=rounds,
    )
    try:
        stats = _until_signal(lambda stop: run_collector(settings, stop))
    except CollectorError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if stats.dropped or stats.buffered:
        console.print(f"[yellow]{stats.dropped} samples dropped, {stats.buffered} unsent[/]")
        raise typer.Exit(1)


def process(
    policy: Annotated[str | None, typer.Option(help="policy whose priorities it publishes")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Run the stream processor (one Faust worker): live view and priorities."""
    settings = _settings(ProcessorSettings, processor_policy=policy)
    run_worker(settings, loglevel=log_level)


def sink(
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Consume every topic into ClickHouse; serve read-only SQL for the embedded store."""
    _logging(log_level)
    _on_the_store(run_sink, _settings(SinkSettings))


def store_server(
    port: Annotated[int | None, typer.Option(help="port (GPUSCHED_STORE_SERVER_PORT)")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Serve the embedded store (GPUSCHED_STORE_DSN, chdb:///<dir>), writable, over
    ClickHouse's HTTP interface, for processes that reach it as a server."""
    _logging(log_level)
    _on_the_store(serve_store, _settings(SinkSettings, store_server_port=port))


def forecast(
    refit: Annotated[float | None, typer.Option(help="seconds between refits")] = None,
    rounds: Annotated[int | None, typer.Option(help="stop after this many refits")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Forecast GPU demand from the job events; publish to the forecasts topic."""
    _logging(log_level)
    settings = _settings(ForecasterSettings, forecaster_refit_s=refit)
    store = _settings(StoreSettings)
    published = _until_signal(lambda stop: run_forecaster(settings, store, stop, rounds))
    console.print(f"{published} forecasts published")


def simcluster(
    cluster: Annotated[Path | None, typer.Option(help="*.cluster.csv of the nodes")] = None,
    trace: Annotated[Path | None, typer.Option(help="*.jobs.csv giving run times by id")] = None,
    speed: Annotated[float | None, typer.Option(help="divide run times by this")] = None,
    port: Annotated[int | None, typer.Option(help="listen port")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "warning",
) -> None:
    """Run a simulated cluster (the `sim` backend's cluster) over HTTP."""
    _logging(log_level)
    settings = _settings(
        SimClusterSettings,
        simcluster_cluster=cluster,
        simcluster_trace=trace,
        simcluster_speed=speed,
        simcluster_port=port,
    )
    if settings.simcluster_cluster is None:
        console.print("[red]error:[/] give --cluster (or GPUSCHED_SIMCLUSTER_CLUSTER)")
        raise typer.Exit(2)
    try:
        nodes = load_cluster(settings.simcluster_cluster)
        durations = trace_durations(settings.simcluster_trace)
    except SimError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    sim = SimCluster(
        nodes, durations, settings.simcluster_speed, settings.simcluster_default_duration_s
    )
    uvicorn.run(
        simcluster_app(sim),
        host=settings.simcluster_host,
        port=settings.simcluster_port,
        log_level=log_level,
        log_config=logging_config(log_level),
    )


def dispatch(
    policy: Annotated[str | None, typer.Option(help="scheduling policy")] = None,
    sim_url: Annotated[str | None, typer.Option(help="the simulated cluster's URL")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "info",
) -> None:
    """Run the dispatcher: scheduling cycles applied through the cluster backend."""
    _logging(log_level)
    settings = _settings(DispatcherSettings, dispatcher_policy=policy, dispatcher_sim_url=sim_url)
    try:
        make_policy(settings.dispatcher_policy)
    except CoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    try:
        stats = _until_signal(lambda stop: run_dispatcher(settings, None, stop))
    except BackendError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    console.print(f"{stats.applied} decisions applied, {stats.refused} refused")


def api(
    port: Annotated[int | None, typer.Option(help="listen port")] = None,
    log_level: Annotated[str, typer.Option(help="logging level")] = "warning",
) -> None:
    """Serve the REST API (submit, status, cancel; OpenAPI at /openapi.json)."""
    _logging(log_level)
    settings = _settings(ApiSettings, api_port=port)
    app = rest_app(settings, _settings(StoreSettings))
    uvicorn.run(
        app,
        host=settings.api_host,
        port=settings.api_port,
        log_level=log_level,
        log_config=logging_config(log_level),
    )


def submit(
    gpus: Annotated[float, typer.Option(help="GPUs at once (0 < x < 1: a share of one)")],
    gpu_model: Annotated[str | None, typer.Option(help="GPU model (default: any)")] = None,
    tenant: Annotated[str, typer.Option(help="tenant / team")] = "default",
    priority_class: Annotated[str, typer.Option(help="priority class")] = "normal",
    job_id: Annotated[str | None, typer.Option(help="job id (default: a new one)")] = None,
) -> None:
    """Submit a job to the jobs topic; prints its id."""
    settings = _settings(ApiSettings)
    try:
        job = SubmitJob(
            gpus=gpus,
            gpu_model=gpu_model,
            tenant=tenant,
            priority_class=priority_class,
            job_id=job_id,
        )
        event = job.event(cluster_models())
    except ValidationError as exc:
        console.print(f"[red]invalid job:[/] {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}")
        raise typer.Exit(2) from exc
    except InvalidJob as exc:
        console.print(f"[red]invalid job:[/] {exc}")
        raise typer.Exit(2) from exc
    # aiokafka logs each failed connection attempt; the error below says it once
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    try:
        asyncio.run(publish(settings, settings.topic_prefix, [event]))
    except EventLogUnreachable as exc:
        console.print(f"[red]error:[/] {exc}; the job was not submitted")
        raise typer.Exit(1) from exc
    typer.echo(event.job_id)


def status(
    job_id: Annotated[str, typer.Argument(help="the job id `gpusched submit` printed")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """A job's state, node(s), priority, its components and why it is pending."""
    try:
        found = job_status(job_id)
    except InvalidJob as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    except StoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    if found is None:
        console.print(f"[yellow]no job {job_id} in the store (yet)[/]")
        raise typer.Exit(1)
    if as_json:
        typer.echo(json.dumps(found.as_dict(), default=str))
        return
    typer.echo(f"{found.job_id}: {found.state} since {found.since}")
    if found.node_ids:
        typer.echo(f"  nodes: {', '.join(found.node_ids)}")
    if found.priority:
        p = found.priority
        parts = ", ".join(f"{k} {v:.3g}" for k, v in p["components"].items())
        typer.echo(f"  priority ({p['policy']}): {p['score']:.3g} = {parts}")
        if p["pending_reason"]:
            typer.echo(f"  pending: {p['pending_reason']}")
