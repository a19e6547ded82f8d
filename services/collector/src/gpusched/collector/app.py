"""The collector's loop: read every GPU each interval, publish, survive broker outages."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpusched.collector.errors import NoGpuSource
from gpusched.collector.nvml import NvmlSource
from gpusched.collector.occupancy import Occupancy
from gpusched.collector.publisher import TelemetryPublisher
from gpusched.collector.settings import CollectorSettings
from gpusched.collector.simulated import SimulatedSource
from gpusched.contracts import JobEvent
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.topics import JOBS, TELEMETRY
from gpusched.sim import load_cluster

__all__ = ["CollectorStats", "build_source", "run_collector"]

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


def build_source(settings: CollectorSettings, occupancy: Occupancy) -> NvmlSource | SimulatedSource:
    """The configured GPU source; NoGpuSource says what is missing."""
    if settings.collector_source == "simulated":
        if settings.collector_cluster is None:
            raise NoGpuSource(
                "GPUSCHED_COLLECTOR_SOURCE=simulated needs GPUSCHED_COLLECTOR_CLUSTER=<cluster.csv>"
            )
        return SimulatedSource(
            load_cluster(settings.collector_cluster),
            occupancy,
            settings.collector_interval_s,
            seed=settings.collector_seed,
        )
    return NvmlSource(occupancy, settings.collector_interval_s, settings.collector_node_id)


async def run_collector(
    settings: CollectorSettings, stop: asyncio.Event | None = None
) -> CollectorStats:
    """Sample until ``stop`` is set or ``collector_rounds`` are done; return what happened."""
    stop = stop or asyncio.Event()
    occupancy = Occupancy()
    source = build_source(settings, occupancy)
    prefix, bootstrap = settings.topic_prefix, settings.kafka_bootstrap_servers
    publisher = TelemetryPublisher(
        bootstrap, TELEMETRY.name(prefix), settings.collector_buffer_samples
    )
    caught_up = asyncio.Event()
    follower = asyncio.create_task(
        follow_topic(bootstrap, JOBS.name(prefix), JobEvent, occupancy.apply, caught_up)
    )
    try:  # start from what the backend says runs now, not from an empty cluster
        await asyncio.wait_for(caught_up.wait(), _CATCH_UP_S)
    except TimeoutError:
        log.warning("jobs topic not read within %.0f s; GPUs read idle until it is", _CATCH_UP_S)
    interval, speed = settings.collector_interval_s, settings.collector_speed
    simulated = isinstance(source, SimulatedSource)
    start, wall0 = datetime.now(UTC), time.monotonic()
    log.info("collecting %d %s GPUs every %.3g s", source.gpu_count, source.source, interval)
    rounds = 0
    try:
        while not stop.is_set() and rounds != settings.collector_rounds:
            now = start + timedelta(seconds=rounds * interval) if simulated else datetime.now(UTC)
            publisher.offer(source.read(now))
            await publisher.drain()
            rounds += 1
            delay = wall0 + rounds * interval / (speed if simulated else 1.0) - time.monotonic()
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
