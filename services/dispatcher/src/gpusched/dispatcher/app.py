"""The dispatcher: the core's scheduling cycle on a live cluster.

State is a ``gpusched.core.Scheduler`` (the simulator's code), rebuilt on every start from
the record (``rebuild``): the jobs topic and the backend's event log after the last step
recorded, so a restart neither loses a job nor places one twice: a placement only counts
once the backend reports it, and the backend refuses to start a job that already runs.

Each decision of a cycle is published to the placements topic (decision id
``<epoch>-<n>``; the epoch grows with every start) before it is applied through the
backend (``cycle``). The backend's lifecycle events are applied to the scheduler and
recorded on the jobs topic under deterministic event ids (``<backend>-<log id>-<seq>``),
which is how the next start knows where to resume the backend's log (``dispatcher``).

    rebuild.py     the state as of now, from the topics and the backend
    dispatcher.py  the state and its event handlers (on_job_event, on_backend_event, ...)
    cycle.py       decide, publish, apply; revert what the backend refuses
    decisions.py   a core decision as the placements topic records it
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from gpusched.contracts import (
    ControlParameter,
    DemandForecast,
    JobEvent,
    NodeView,
    PriorityUpdate,
)
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.health import service_health
from gpusched.contracts.producer import Producer
from gpusched.contracts.topics import CONTROL, FORECASTS, JOBS, PRIORITIES, VIEW
from gpusched.dispatcher.backend import Backend
from gpusched.dispatcher.cycle import run_cycle
from gpusched.dispatcher.dispatcher import DispatcherStats
from gpusched.dispatcher.rebuild import rebuild
from gpusched.dispatcher.settings import DispatcherSettings

__all__ = ["run_dispatcher"]

log = logging.getLogger(__name__)


async def run_dispatcher(
    settings: DispatcherSettings, backend: Backend | None = None, stop: asyncio.Event | None = None
) -> DispatcherStats:
    """Dispatch until ``stop`` is set (through the backend the settings name by default).
    Meanwhile the broker is watched and, with ``health_port``, ``GET /healthz`` served."""
    async with service_health(settings, "dispatcher", log):
        return await _run_dispatcher(settings, backend, stop)


async def _run_dispatcher(
    settings: DispatcherSettings, backend: Backend | None = None, stop: asyncio.Event | None = None
) -> DispatcherStats:
    stop = stop or asyncio.Event()
    if backend is None:
        from gpusched.dispatcher.backends import make_backend

        backend = await make_backend(settings)
    kafka, prefix = settings, settings.topic_prefix
    producer = Producer(kafka, linger_ms=2)
    await producer.start()
    tasks: list[asyncio.Task[None]] = []
    try:
        d = await rebuild(settings, backend, producer)

        async def pump() -> None:
            async for event in backend.events(d.seq_done):
                await d.on_backend_event(event)

        tasks.append(asyncio.create_task(pump()))
        followers = (
            follow_topic(kafka, JOBS.name(prefix), JobEvent, d.on_job_event, asyncio.Event()),
            follow_topic(
                kafka, FORECASTS.name(prefix), DemandForecast, d.outlook.apply, asyncio.Event()
            ),
            follow_topic(
                kafka, CONTROL.name(prefix), ControlParameter, d.on_control, asyncio.Event()
            ),
            follow_topic(kafka, VIEW.name(prefix), NodeView, d.on_node_view, asyncio.Event()),
            follow_topic(
                kafka, PRIORITIES.name(prefix), PriorityUpdate, d.on_priority, asyncio.Event()
            ),
            d.forward_priorities(),
            d.report_control(),
        )
        tasks += [asyncio.create_task(f) for f in followers]
        while not stop.is_set():
            for task in tasks:
                if task.done() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            d.wanted.clear()  # what arrives during the cycle wakes the next one
            await run_cycle(d)
            wake = d.scheduler.next_wakeup(time.time())
            wait_s = settings.dispatcher_tick_s
            if wake is not None:
                wait_s = min(wait_s, max(wake - time.time(), 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_first(d.wanted, stop), wait_s)
            await asyncio.sleep(settings.dispatcher_min_cycle_s)
        return d.stats
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()
        await backend.close()


async def _first(*events: asyncio.Event) -> None:
    waiters = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
