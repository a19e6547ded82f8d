"""The dispatcher as of now, rebuilt on every start from the record.

Nodes come from the backend; jobs from the jobs topic (everything ever submitted and
every lifecycle step recorded, replayed in time order); the epoch from the placements
topic (one more than the last). The backend's log is then read from just after the last
of its events the topic recorded, so a restart neither loses a job nor places one twice.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Iterable
from typing import Any

from gpusched.contracts import DecisionAction, JobEvent, PlacementDecision
from gpusched.contracts.follow import follow_topic
from gpusched.contracts.producer import Producer
from gpusched.contracts.settings import KafkaSettings
from gpusched.contracts.topics import JOBS, PLACEMENTS
from gpusched.core import (
    MOVE_REASON,
    JobState,
    NodeSpec,
    Params,
    PowerState,
    Scheduler,
    make_placement,
    make_policy,
)
from gpusched.dispatcher.backend import Backend
from gpusched.dispatcher.dispatcher import Dispatcher
from gpusched.dispatcher.outlook import LiveOutlook
from gpusched.dispatcher.settings import DispatcherSettings

__all__ = ["last_move", "rebuild"]

log = logging.getLogger(__name__)
_CATCH_UP_S = 120.0


async def _read_all(kafka: KafkaSettings, topic: str, model: type[Any], into: list[Any]) -> None:
    caught_up = asyncio.Event()
    task = asyncio.create_task(follow_topic(kafka, topic, model, into.append, caught_up))
    try:
        await asyncio.wait_for(caught_up.wait(), _CATCH_UP_S)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def last_move(decisions: Iterable[PlacementDecision]) -> float:
    """When the last consolidation move was decided (-inf if none was): ``dynamic`` keeps
    its fixed headroom for a look-ahead after one, also across a restart."""
    return max(
        (
            d.ts.timestamp()
            for d in decisions
            if d.action is DecisionAction.PREEMPT and d.reason.startswith(MOVE_REASON)
        ),
        default=-math.inf,
    )


async def rebuild(settings: DispatcherSettings, backend: Backend, producer: Producer) -> Dispatcher:
    """The scheduler as of now: nodes from the backend, jobs from the topic's record."""
    prefix = settings.topic_prefix
    nodes = await backend.nodes()
    decisions: list[PlacementDecision] = []
    await _read_all(settings, PLACEMENTS.name(prefix), PlacementDecision, decisions)
    epoch = max((d.epoch for d in decisions), default=-1) + 1
    outlook = LiveOutlook()
    scheduler = Scheduler(
        [NodeSpec(n.node_id, n.gpu_model, n.num_gpus, n.cpu_milli, n.memory_mib) for n in nodes],
        make_policy(settings.dispatcher_policy),
        make_placement(settings.dispatcher_placement),
        Params(),
        outlook=outlook,
    )
    scheduler.migrated_at = last_move(decisions)
    for n in nodes:
        if n.power is not PowerState.ON:
            scheduler.state.set_power(n.node_id, n.power)
    d = Dispatcher(settings, backend, producer, scheduler, epoch, await backend.log_id(), outlook)
    events: list[JobEvent] = []
    await _read_all(settings, JOBS.name(prefix), JobEvent, events)
    for event in sorted(events, key=lambda e: e.ts):
        d.on_recorded_job_event(event)
    for running in await backend.jobs():
        job = scheduler.jobs.get(running.job_id)
        if job is not None and job.state is JobState.FINISHED:
            # cancelled (by a user) while no dispatcher ran: the cluster still runs it
            log.info("cancelling %s: it ended on the record but still runs", running.job_id)
            await backend.cancel(running.job_id)
    log.info(
        "epoch %d: %d job events replayed (%d jobs, %d running); backend log %s after %d",
        epoch, len(events), len(scheduler.jobs), len(scheduler.running), d.log_id, d.seq_done,
    )  # fmt: skip
    return d
