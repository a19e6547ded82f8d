"""One scheduling cycle on the live cluster: decide, publish every decision, then apply
each through the backend; a decision the backend refuses is reverted in the scheduler."""

from __future__ import annotations

import logging
import time

from gpusched.contracts import encode
from gpusched.contracts.metrics import DISPATCH_CYCLE_SECONDS, DISPATCH_DECISIONS, PRODUCED
from gpusched.contracts.topics import PLACEMENTS
from gpusched.core import Decision, ParkNode, Place, Preempt, WakeNode
from gpusched.dispatcher.backend import AlreadyPlaced, BackendError, NotPlaceable
from gpusched.dispatcher.decisions import placement_decision
from gpusched.dispatcher.dispatcher import Dispatcher

__all__ = ["run_cycle"]

log = logging.getLogger(__name__)


async def run_cycle(d: Dispatcher) -> int:
    """One cycle: every decision is published (all of them, awaited) before the first is
    applied. Returns how many decisions it made."""
    now = time.time()
    with DISPATCH_CYCLE_SECONDS.time():
        decisions = d.scheduler.cycle(now, excluded=d.unhealthy).decisions
    numbered = []
    for decision in decisions:
        d.decisions_made += 1
        numbered.append((decision, f"{d.epoch}-{d.decisions_made}"))
    topic = PLACEMENTS.name(d.prefix)
    sent = [
        await d.producer.send(
            topic,
            encode(placement_decision(decision, decision_id, d.epoch)),
            key=decision_id.encode(),
        )
        for decision, decision_id in numbered
    ]
    await d.producer.delivered(sent)
    PRODUCED.labels(topic=PLACEMENTS.base).inc(len(numbered))
    for decision, decision_id in numbered:
        await _apply(d, decision, decision_id, now)
        DISPATCH_DECISIONS.labels(kind=type(decision).__name__).inc()
    return len(decisions)


async def _apply(d: Dispatcher, decision: Decision, decision_id: str, now: float) -> None:
    backend = d.backend
    try:
        if isinstance(decision, Place):
            job = d.scheduler.jobs[decision.job_id]
            await backend.place(job, decision.allocations, decision_id)
        elif isinstance(decision, Preempt):
            await backend.preempt(decision.job_id, decision_id)
        elif isinstance(decision, ParkNode):
            await backend.park(decision.node_id, decision_id)
        elif isinstance(decision, WakeNode):
            await backend.wake(decision.node_id, decision_id)
        d.stats.applied += 1
    except AlreadyPlaced as exc:
        d.stats.refused += 1
        log.warning("decision %s: %s", decision_id, exc)  # it runs: its events say where
    except NotPlaceable as exc:
        d.stats.refused += 1
        log.warning("decision %s refused (%s); reverted", decision_id, exc)
        d.scheduler.revert(decision, now)
    except BackendError as exc:
        d.stats.refused += 1
        log.error("decision %s not applied: %s", decision_id, exc)
        if isinstance(decision, Place):
            # Placing again is safe: a backend refuses a job that already runs, and if
            # this one did start, its 'placed' event puts it back to running here.
            d.scheduler.revert(decision, now)
