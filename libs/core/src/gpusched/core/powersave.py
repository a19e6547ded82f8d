"""Power saving: suspend idle nodes, and wake parked nodes for the jobs that wait.

``SuspendIdle`` is Slurm's power saving (``SuspendTime``, resume on demand), given to
any policy by the suffix ``+powersave``. ``wake_for_waiting`` is its resume half, shared
with ``dynamic``: a parked node is woken only when a waiting job could use it (its GPU
model, GPUs, CPU and memory), found by placing the waiting jobs on a trial state where
every node is on. The idle nodes that are on and take part in that trial placement are
held too (not parked): a gang waiting for one node to wake must not see its other node
suspended meanwhile, as Slurm does not suspend a node allocated to a job whose other
nodes are powering up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING

from gpusched.core.model import Decision, ParkNode, PowerState, WakeNode

if TYPE_CHECKING:
    from gpusched.core.cluster import ClusterState
    from gpusched.core.scheduler import Scheduler

__all__ = [
    "SuspendIdle",
    "WaitingNeeds",
    "every_node_on",
    "next_idle_deadline",
    "wake_for_waiting",
]

_WAITING_TRIED = 64  # waiting jobs placed on the trial state per cycle, in queue order


@dataclass(frozen=True, slots=True)
class WaitingNeeds:
    """What the first waiting jobs (queue order) would be placed on if every node were
    on: the parked nodes to wake, and the nodes that are on which they need as well."""

    wake: list[WakeNode]
    held: set[str]


@contextmanager
def every_node_on(state: ClusterState, off: list[str]) -> Iterator[None]:
    """A trial state with the nodes ``off`` (parked or waking) on; rolled back after."""
    mark = state.checkpoint()
    try:
        for node_id in off:
            state.set_power(node_id, PowerState.ON)
        yield
    finally:
        state.rollback(mark)
        state.commit()


def wake_for_waiting(scheduler: Scheduler, now: float) -> WaitingNeeds:
    """Parked nodes that the first waiting jobs (queue order) would be placed on if every
    node were on, and the nodes on that those placements use beside them; waking nodes
    count as on (they are coming), so are not woken twice."""
    state = scheduler.state
    if state.all_on() or not len(scheduler.queue):
        return WaitingNeeds([], set())
    off = [n.node_id for n in state.nodes.values() if n.power is not PowerState.ON]
    parked = {nid for nid in off if state.nodes[nid].power is PowerState.PARKED}
    if not parked:
        return WaitingNeeds([], set())
    wake: dict[str, str] = {}
    held: set[str] = set()
    with every_node_on(state, off):
        for job_id in islice(scheduler.queue.walk(), _WAITING_TRIED):
            job = scheduler.jobs[job_id]
            allocs = scheduler.placement.place(state, job.request)
            if allocs is None:
                continue
            state.allocate(job_id, allocs)
            nodes = [a.node_id for a in allocs]  # in allocation order: the wakes' order
            asleep = [nid for nid in nodes if nid in parked]
            for node_id in asleep:
                wake.setdefault(node_id, job_id)
            if asleep:
                held.update(nid for nid in nodes if nid not in parked)
    return WaitingNeeds(
        [WakeNode(node_id, f"job {job_id} waits for it") for node_id, job_id in wake.items()],
        held,
    )


class SuspendIdle:
    """Slurm power saving: a node idle for ``powersave_suspend_time_s`` is suspended
    (parked); parked nodes are resumed when waiting jobs need them, ready after the power
    model's wake latency, the same as every parked node."""

    def decide(self, scheduler: Scheduler, now: float) -> list[Decision]:
        needs = wake_for_waiting(scheduler, now)
        decisions: list[Decision] = list(needs.wake)
        after = scheduler.params.powersave_suspend_time_s
        held = scheduler.reserved_nodes() | needs.held
        for node in scheduler.state.nodes.values():
            if node.power is not PowerState.ON or not node.idle or node.node_id in held:
                continue
            since = scheduler.idle_since.get(node.node_id, now)
            if now - since >= after:
                decisions.append(ParkNode(node.node_id, f"idle since {since:.0f} (SuspendTime)"))
        return decisions

    def next_time(self, scheduler: Scheduler, now: float) -> float | None:
        """The next time an idle node reaches the suspend time."""
        return next_idle_deadline(scheduler, now, scheduler.params.powersave_suspend_time_s)


def next_idle_deadline(scheduler: Scheduler, now: float, after: float) -> float | None:
    """The next time after ``now`` that a node which is on and idle will have been idle
    for ``after`` seconds (when a power policy may park it), or None."""
    times = [
        scheduler.idle_since.get(node.node_id, now) + after
        for node in scheduler.state.nodes.values()
        if node.power is PowerState.ON and node.idle
    ]
    later = [t for t in times if t > now]
    return min(later) if later else None
