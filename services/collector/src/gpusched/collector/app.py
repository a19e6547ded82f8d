"""The collector's loop: read every GPU each interval, publish, survive broker outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from gpusched.collector.errors import NoGpuSource
from gpusched.collector.host import HostSource
from gpusched.collector.nvml import NvmlSource
from gpusched.collector.occupancy import Occupancy
from gpusched.collector.publisher import TelemetryPublisher
from gpusched.collector.settings import CollectorSettings
from gpusched.collector.simulated import SimulatedSource
from gpusched.contracts import JobEvent
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.health import service_health
from gpusched.contracts.topics import JOBS
from gpusched.sim import load_cluster

__all__ = [
    "Clock",
    "CollectorStats",
    "SimulatedClock",
    "WallClock",
    "build_source",
    "run_collector",
]

log = logging.getLogger(__name__)

# How long a stopping collector keeps trying to hand over what it still buffers.
_FINAL_DRAIN_S = 30.0
# How long a starting collector waits to learn which jobs hold which GPUs.
_CATCH_UP_S = 15.0


@dataclass(frozen=True)
class CollectorStats:
    rounds: int
    sent: int
    dropped: int
    buffered: int


class Clock(Protocol):
    """When round ``n`` of a run that started at ``start`` is stamped, and when (seconds
    after the start) it is due."""

    def stamp(self, start: datetime, n: int) -> datetime: ...

    def due_s(self, n: int) -> float: ...


@dataclass(frozen=True)
class WallClock:
    """Real GPUs: samples carry the time they are read; rounds are interval_s apart."""

    interval_s: float

    def stamp(self, start: datetime, n: int) -> datetime:
        return datetime.now(UTC)

    def due_s(self, n: int) -> float:
        return n * self.interval_s


@dataclass(frozen=True)
class SimulatedClock:
    """Simulated GPUs: rounds are interval_s apart in sample time from the start, and
    ``speed`` times closer together on the wall clock."""

    interval_s: float
    speed: float

    def stamp(self, start: datetime, n: int) -> datetime:
        return start + timedelta(seconds=n * self.interval_s)

    def due_s(self, n: int) -> float:
        return n * self.interval_s / self.speed


def build_source(
    settings: CollectorSettings, occupancy: Occupancy
) -> tuple[NvmlSource | HostSource | SimulatedSource, Clock]:
    """The configured source and its clock; NoGpuSource says what is missing."""
    interval = settings.collector_interval_s
    if settings.collector_source == "host":
        return HostSource(interval, settings.collector_node_id), WallClock(interval)
    if settings.collector_source == "simulated":
        if settings.collector_cluster is None:
            raise NoGpuSource(
                "GPUSCHED_COLLECTOR_SOURCE=simulated needs GPUSCHED_COLLECTOR_CLUSTER=<cluster.csv>"
            )
        source = SimulatedSource(
            load_cluster(settings.collector_cluster),
            occupancy,
            interval,
            seed=settings.collector_seed,
        )
        return source, SimulatedClock(interval, settings.collector_speed)
    nvml = NvmlSource(occupancy, interval, settings.collector_node_id)
    return nvml, WallClock(interval)


async def run_collector(
    settings: CollectorSettings, stop: asyncio.Event | None = None
) -> CollectorStats:
    """Sample until ``stop`` is set or ``collector_rounds`` are done; return what happened.
    Meanwhile the broker is watched and, with ``health_port``, ``GET /healthz`` served."""
    async with service_health(settings, "collector", log):
        return await _run_collector(settings, stop)


async def _run_collector(
    settings: CollectorSettings, stop: asyncio.Event | None = None
) -> CollectorStats:
    stop = stop or asyncio.Event()
    occupancy = Occupancy()
    source, clock = build_source(settings, occupancy)
    prefix = settings.topic_prefix
    publisher = TelemetryPublisher(settings, prefix, settings.collector_buffer_samples)
    caught_up = asyncio.Event()
    follower = asyncio.create_task(
        follow_topic(settings, JOBS.name(prefix), JobEvent, occupancy.apply, caught_up)
    )
    try:  # start from what the backend says runs now, not from an empty cluster
        await asyncio.wait_for(caught_up.wait(), _CATCH_UP_S)
    except TimeoutError:
        log.warning("jobs topic not read within %.0f s; GPUs read idle until it is", _CATCH_UP_S)
    start, wall0 = datetime.now(UTC), time.monotonic()
    log.info(
        "collecting %d %s GPUs%s every %.3g s",
        source.gpu_count,
        source.source,
        f" and {source.host_count} node(s) without GPUs" if source.host_count else "",
        settings.collector_interval_s,
    )
    rounds = 0
    try:
        while not stop.is_set() and rounds != settings.collector_rounds:
            publisher.offer(source.read(clock.stamp(start, rounds)))
            await publisher.drain()
            rounds += 1
            delay = wall0 + clock.due_s(rounds) - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
        deadline = time.monotonic() + _FINAL_DRAIN_S
        while len(publisher) and time.monotonic() < deadline:
            if not await publisher.drain():
                await asyncio.sleep(1.0)
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await publisher.close()
    stats = CollectorStats(rounds, publisher.sent, publisher.dropped, len(publisher))
    log.info(
        "collector stopped: %d rounds, %d samples sent, %d dropped, %d unsent",
        *(stats.rounds, stats.sent, stats.dropped, stats.buffered),
    )
    return stats
