"""Priorities from the job and node records, computed by gpusched.core (not a copy of it).

Each computation builds a ``Scheduler`` snapshot of the cluster (nodes from the live view)
and of every pending and running job, replays the ended ones into the run-time predictor
and fair share, then asks the policy for each job's score components and the scheduler
for every pending job's reason. A snapshot, not a long-lived mirror: the records in the
Faust tables stay the only state, so a restarted worker computes the same priorities.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpusched.contracts import PriorityUpdate
from gpusched.contracts.convert import core_job
from gpusched.core import (
    NodeSpec,
    Params,
    RecordedJob,
    Scheduler,
    held_on,
    make_placement,
    make_policy,
)
from gpusched.processor.records import NO_GPU, JobRecord, NodeRecord

__all__ = ["PriorityResult", "compute_priorities"]

log = logging.getLogger(__name__)

_UNLIMITED = 1 << 40  # the view knows GPUs, not the CPU or memory of a GPU node


@dataclass
class PriorityResult:
    updates: list[PriorityUpdate] = field(default_factory=list)
    allocated: dict[str, float] = field(default_factory=dict)  # node id -> GPUs in use


def _recorded(record: JobRecord, now: float) -> RecordedJob:
    job = core_job(
        record.job_id,
        record.request,
        record.submit_ts,
        record.tenant,
        record.priority_class,
        record.executed_s,
        record.preemptions,
    )
    if record.state == "ended":
        return RecordedJob(job, ended_at=record.end_ts or 0.0)
    if record.state == "running":
        where = held_on(job.request, record.node_ids, record.gpu_indices)
        return RecordedJob(job, where, started_at=record.run_start or now)
    return RecordedJob(job)


def _when(t: float | None) -> datetime | None:
    return datetime.fromtimestamp(t, UTC) if t is not None else None


def compute_priorities(
    records: Iterable[JobRecord],
    nodes: Iterable[NodeRecord],
    params: Params,
    policy: str,
    now: float,
    epoch: int,
    params_revision: int = 0,
) -> PriorityResult:
    """A PriorityUpdate for every pending and running job at ``now``, under ``params``
    (the values of parameter revision ``params_revision``)."""
    records = list(records)
    specs = [
        NodeSpec(n.node_id, n.gpu_model, len(n.gpus), n.cpu_milli or _UNLIMITED,
                 n.memory_mib or _UNLIMITED)
        for n in nodes
    ]  # fmt: skip
    specs += _hosts(records, {s.node_id for s in specs})
    scheduler, misplaced = Scheduler.restore(
        specs,
        make_policy(policy),
        make_placement("bestfit"),
        params,
        [_recorded(r, now) for r in records],
        now,
    )
    for why in misplaced.values():
        log.warning("a running job where the view has no room for it: %s", why)
    running = list(scheduler.running)
    pending = scheduler.explain_all(now)
    stamp = datetime.fromtimestamp(now, UTC)
    result = PriorityResult()
    for job_id in [*pending, *running]:
        job = scheduler.jobs[job_id]
        components = scheduler.policy.components(job, now)
        reason = pending.get(job_id)
        result.updates.append(
            PriorityUpdate(
                ts=stamp,
                job_id=job_id,
                policy=policy,
                score=sum(components.values()),
                components=components,
                pending_reason=f"{reason.category}: {reason.message}" if reason else None,
                estimated_start=_when(reason.start_estimate) if reason else None,
                epoch=epoch,
                params_revision=params_revision,
            )
        )
    for node_id, node in scheduler.state.nodes.items():
        if node.spec.num_gpus:
            result.allocated[node_id] = node.spec.num_gpus - node.free_gpu
    return result


def _hosts(records: list[JobRecord], known: set[str]) -> list[NodeSpec]:
    """Nodes without GPUs that running CPU-only jobs hold but the view has no reading of
    yet (a collector that does not report hosts): they join the snapshot as GPU-less
    nodes of unlimited size, not as "unknown node"."""
    hosts = {
        node_id
        for r in records
        if r.state == "running" and r.request.num_gpu == 0
        for node_id in r.node_ids
        if node_id not in known
    }
    return [NodeSpec(node_id, NO_GPU, 0, _UNLIMITED, _UNLIMITED) for node_id in sorted(hosts)]
