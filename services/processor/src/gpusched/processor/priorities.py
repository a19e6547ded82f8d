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
from gpusched.core import (
    Allocation,
    InvalidDecision,
    Job,
    NodeSpec,
    Params,
    Request,
    Scheduler,
    make_placement,
    make_policy,
)
from gpusched.processor.records import JobRecord, NodeRecord

__all__ = ["PriorityResult", "compute_priorities"]

log = logging.getLogger(__name__)

_UNLIMITED = 1 << 40  # the view knows GPUs, not host CPU or memory


@dataclass
class PriorityResult:
    updates: list[PriorityUpdate] = field(default_factory=list)
    allocated: dict[str, float] = field(default_factory=dict)  # node id -> GPUs in use


def _job(record: JobRecord) -> Job:
    return Job(
        job_id=record.job_id,
        request=Request(
            num_gpu=record.num_gpu,
            gpu_models=frozenset(record.gpu_models),
            cpu_milli=record.cpu_milli,
            memory_mib=record.memory_mib,
        ),
        submit_time=record.submit_ts,
        tenant=record.tenant,
        qos=record.priority_class,
        executed_s=record.executed_s,
        attained_gpu_s=record.executed_s * record.num_gpu,
        preemptions=record.preemptions,
    )


def _allocations(record: JobRecord) -> tuple[Allocation, ...]:
    share = record.num_gpu if 0 < record.num_gpu < 1 else 1.0
    return tuple(
        Allocation(node_id, tuple(indices), share, 0, 0)
        for node_id, indices in zip(record.node_ids, record.gpu_indices, strict=False)
    )


def compute_priorities(
    records: Iterable[JobRecord],
    nodes: Iterable[NodeRecord],
    params: Params,
    policy: str,
    now: float,
    epoch: int,
) -> PriorityResult:
    """A PriorityUpdate for every pending and running job at ``now``."""
    specs = [NodeSpec(n.node_id, n.gpu_model, len(n.gpus), _UNLIMITED, _UNLIMITED) for n in nodes]
    scheduler = Scheduler(specs, make_policy(policy), make_placement("bestfit"), params)
    ended: list[JobRecord] = []
    live: list[JobRecord] = []
    for record in records:
        (ended if record.state == "ended" else live).append(record)
    for record in sorted(ended, key=lambda r: r.end_ts or 0.0):
        job = _job(record)
        scheduler.predictor.observe(job, record.executed_s)
        scheduler.fairshare.charge(record.tenant, record.executed_s * record.num_gpu, now)
    running: list[str] = []
    for record in sorted(live, key=lambda r: r.submit_ts):
        scheduler.submit(_job(record), record.submit_ts)
        if record.state == "running":
            try:
                scheduler.assume(record.job_id, _allocations(record), record.run_start or now)
                running.append(record.job_id)
            except (InvalidDecision, KeyError) as exc:
                log.warning("job %s runs where the view has no room: %s", record.job_id, exc)
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
                epoch=epoch,
            )
        )
    for node_id, node in scheduler.state.nodes.items():
        result.allocated[node_id] = node.spec.num_gpus - node.free_gpu
    return result
