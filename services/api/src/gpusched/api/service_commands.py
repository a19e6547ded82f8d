"""``gpusched collect | process | sink | forecast serve``: run one service in the foreground.

Each reads its settings from the environment (see the README's settings table); options
given here override them. SIGINT/SIGTERM stop the service after it has handed over what it
holds (the collector's buffer, the sink's current batch).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from rich.console import Console

from gpusched.collector import CollectorError, CollectorSettings, run_collector
from gpusched.forecaster import ForecasterSettings, run_forecaster
from gpusched.processor import ProcessorSettings, run_worker
from gpusched.sink import SinkSettings, run_sink
from gpusched.store import StoreError, StoreSettings

__all__ = ["collect", "forecast", "process", "sink"]

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
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )


def _until_signal(main: Callable[[asyncio.Event], Awaitable[T]]) -> T:
    async def runner() -> T:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        return await main(stop)

    return asyncio.run(runner())


def collect(
    source: Annotated[str | None, typer.Option(help="nvml or simulated")] = None,
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
    settings = _settings(SinkSettings)
    store = _settings(StoreSettings)
    try:
        _until_signal(lambda stop: run_sink(settings, store, stop))
    except StoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc


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
