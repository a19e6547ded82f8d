"""Power saving: suspend idle nodes, and wake parked nodes for the jobs that wait.

``SuspendIdle`` is Slurm's power saving (``SuspendTime``, resume on demand), given to
any policy by the suffix ``+powersave``. ``wake_for_waiting`` is its resume half, shared
with ``dynamic``: a parked node is woken only when a waiting job could use it (its GPU
model, GPUs, CPU and memory), found by placing the waiting jobs on a trial state where
every node is on.
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from gpusched.core.model import Decision, ParkNode, PowerState, WakeNode

if TYPE_CHECKING:
    from gpusched.core.scheduler import Scheduler

__all__ = ["SuspendIdle", "wake_for_waiting"]

_WAITING_TRIED = 64  # waiting jobs placed on the trial state per cycle, in queue order


def wake_for_waiting(scheduler: Scheduler, now: float) -> list[WakeNode]:
    """Parked nodes that the first waiting jobs (queue order) would be placed on if every
    node were on; waking nodes count as on (they are coming), so are not woken twice."""
    state = scheduler.state
    off = [n.node_id for n in state.nodes.values() if n.power is not PowerState.ON]
    parked = {nid for nid in off if state.nodes[nid].power is PowerState.PARKED}
    if not parked or not len(scheduler.queue):
        return []
    wake: dict[str, str] = {}
    mark = state.checkpoint()
    try:
        for node_id in off:
            state.set_power(node_id, PowerState.ON)
        for job_id in islice(scheduler.queue.walk(), _WAITING_TRIED):
            job = scheduler.jobs[job_id]
            allocs = scheduler.placement.place(state, job.request)
            if allocs is None:
                continue
            state.allocate(job_id, allocs)
            for a in allocs:
                if a.node_id in parked:
                    wake.setdefault(a.node_id, job_id)
    finally:
        state.rollback(mark)
        state.commit()
    return [WakeNode(node_id, f"job {job_id} waits for it") for node_id, job_id in wake.items()]


class SuspendIdle:
    """Slurm power saving: a node idle for ``powersave_suspend_time_s`` is suspended
    (parked); parked nodes are resumed when waiting jobs need them, ready after the power
    model's wake latency, the same as every parked node."""

    def decide(self, scheduler: Scheduler, now: float) -> list[Decision]:
        decisions: list[Decision] = list(wake_for_waiting(scheduler, now))
        after = scheduler.params.powersave_suspend_time_s
        held = scheduler.reserved_nodes()
        for node in scheduler.state.nodes.values():
            if node.power is not PowerState.ON or not node.idle or node.node_id in held:
                continue
            since = scheduler.idle_since.get(node.node_id, now)
            if now - since >= after:
                decisions.append(ParkNode(node.node_id, f"idle since {since:.0f} (SuspendTime)"))
        return decisions

    def next_time(self, scheduler: Scheduler, now: float) -> float | None:
        """The next time an idle node reaches the suspend time."""
        after = scheduler.params.powersave_suspend_time_s
        times = [
            scheduler.idle_since.get(node.node_id, now) + after
            for node in scheduler.state.nodes.values()
            if node.power is PowerState.ON and node.idle
        ]
        later = [t for t in times if t > now]
        return min(later) if later else None
