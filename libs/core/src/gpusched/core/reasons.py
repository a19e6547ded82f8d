"""Why a job is pending, in words an operator can act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpusched.core.model import EPS, Job, PendingCategory, PendingReason, PowerState

if TYPE_CHECKING:
    from gpusched.core.scheduler import Scheduler

__all__ = ["explain", "never_fits"]


def never_fits(scheduler: Scheduler, job: Job) -> str | None:
    """Why no node of the cluster, even empty, could ever hold ``job``; None if one could."""
    req = job.request
    state = scheduler.state
    models = [m for m in state.models if req.allows(m)]
    if req.num_gpu > 0 and not models:
        return f"no node has GPU model {'|'.join(sorted(req.gpu_models))}"
    if req.whole_gpus:
        most = max((state.model_gpus[m] for m in models), default=0)
        if req.whole_gpus > most:
            models_text = "|".join(sorted(req.gpu_models)) or "any one model"
            return f"{req.whole_gpus} GPUs at once, but the cluster has {most} of {models_text}"
    largest = max((state.max_gpus[m] for m in models), default=0)
    parts = max(1, -(-req.whole_gpus // largest)) if largest and req.whole_gpus else 1
    cpu, mem = req.cpu_milli // parts, req.memory_mib // parts
    for node in state.nodes.values():
        if req.num_gpu > 0 and node.spec.gpu_model not in models:
            continue
        if node.spec.cpu_milli >= cpu and node.spec.memory_mib >= mem:
            return None
    return f"no node has {cpu} mCPU and {mem} MiB free even when empty"


def explain(
    scheduler: Scheduler, job: Job, position: int, now: float, start: float | None = None
) -> PendingReason:
    """The reason ``job`` (at ``position`` in the queue) is still pending; ``start``: its
    estimated start from the queue played forward (``estimate_starts``), if any."""
    impossible = never_fits(scheduler, job)
    if impossible:
        return PendingReason(PendingCategory.NEVER, f"cannot ever run: {impossible}")
    res = scheduler.reservations.get(job.job_id)
    if res is not None:
        where = (
            f"node {res.node_ids[0]} is"
            if len(res.node_ids) == 1
            else (f"nodes {', '.join(res.node_ids)} are")
        )
        return PendingReason(
            PendingCategory.RESERVATION,
            f"waiting for {job.request.describe()}; {where} reserved for it from "
            f"~t={res.start:.0f}s",
            res.node_ids,
            res.start,
        )
    state = scheduler.state
    req = job.request
    need = req.num_gpu
    soonest: tuple[float, str, str] | None = None
    fits_now = 0
    for node in state.nodes.values():
        if not req.allows(node.spec.gpu_model) or node.spec.num_gpus < min(need, 1.0):
            continue
        free = float(node.free_whole) if req.whole_gpus else max(node.gpu_free, default=0.0)
        if node.power is PowerState.ON and free >= need - EPS:
            fits_now += 1
            continue
        for jid in node.jobs:
            other = scheduler.jobs[jid]
            end = now + scheduler.predictor.expected_remaining(other, now)
            if soonest is None or end < soonest[0]:
                soonest = (end, node.node_id, jid)
    ahead = f"{position} job(s) ahead in {scheduler.policy.name} order"
    if fits_now:
        return PendingReason(
            PendingCategory.PRIORITY,
            f"{ahead}; {fits_now} node(s) fit {req.describe()} but are taken first",
            start_estimate=start,
        )
    parked = sum(1 for n in state.nodes.values() if n.power is not PowerState.ON)
    tail = f"; {parked} node(s) parked or waking" if parked else ""
    if soonest is None:
        return PendingReason(
            PendingCategory.CAPACITY,
            f"waiting for {req.describe()}; {ahead}{tail}",
            start_estimate=start,
        )
    end, node_id, blocker = soonest
    return PendingReason(
        PendingCategory.CAPACITY,
        f"waiting for {req.describe()} on one node; {node_id} frees up after job {blocker} "
        f"ends at ~t={end:.0f}s; {ahead}{tail}",
        (blocker,),
        start if start is not None else end,
    )
