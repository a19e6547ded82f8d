"""Reservations for blocked jobs, planned from the predicted ends of running jobs.

A running job's predicted end is set when it starts and revised only once it is overrun
(as Slurm's backfill plans with time limits), kept per node across cycles, so a plan
costs a walk over candidate nodes, not over every running job.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass

from gpusched.core.cluster import ClusterState
from gpusched.core.model import EPS, Job
from gpusched.core.runtime import RuntimePredictor

__all__ = ["Reservation", "ReservationPlanner"]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for a blocked job from ``start`` on (backfill's shadow time): one node,
    or for a gang larger than any node the whole nodes it will span. ``spare``: GPUs of
    each node predicted free at ``start`` beyond what the job needs (other jobs may use
    them meanwhile, as Slurm reserves only what a job asks for)."""

    job_id: str
    node_ids: tuple[str, ...]
    start: float
    spare: tuple[float, ...] = ()


class ReservationPlanner:
    """Where a blocked job fits soonest; the scheduler tells it which jobs start and stop."""

    def __init__(self, state: ClusterState, predictor: RuntimePredictor) -> None:
        self.state, self.predictor = state, predictor
        # node -> sorted (predicted end, GPUs it frees, job); a heap to revise overruns
        self._frees: dict[str, list[tuple[float, float, str]]] = {}
        self._run_end: dict[str, float] = {}  # running job -> predicted end
        self._end_heap: list[tuple[float, str]] = []
        self._last: dict[str, Reservation] = {}

    def remember(self, reservations: dict[str, Reservation]) -> None:
        """This cycle's reservations, kept for the next while still ahead."""
        self._last = reservations

    def plan(
        self, job: Job, now: float, taken: set[str], running: dict[str, Job]
    ) -> Reservation | None:
        """Last cycle's reservation of ``job`` while still ahead and its nodes are free of
        other reservations (jobs only leave them), else a new one; ``taken``: nodes held
        by reservations of jobs ahead of it."""
        last = self._last.get(job.job_id)
        if last is not None and last.start > now and taken.isdisjoint(last.node_ids):
            return last
        return self._reserve(job, now, taken, running)

    def started(self, job: Job, now: float) -> None:
        """Record a running job's predicted end: set when it starts and revised only once
        overrun (as Slurm's backfill plans with time limits), so plans are cheap and
        stable."""
        end = self._run_end[job.job_id] = now + self.predictor.expected_remaining(job, now)
        for a in job.allocations:
            gpus = len(a.gpu_indices) * a.share
            bisect.insort(self._frees.setdefault(a.node_id, []), (end, gpus, job.job_id))
        heapq.heappush(self._end_heap, (end, job.job_id))

    def stopped(self, job: Job) -> None:
        """A running job stopped: its predicted end no longer frees anything."""
        if self._run_end.pop(job.job_id, None) is None:
            return
        for a in job.allocations:
            ends = self._frees.get(a.node_id, [])
            ends[:] = [e for e in ends if e[2] != job.job_id]

    def _predicted_frees(
        self, now: float, running: dict[str, Job]
    ) -> dict[str, list[tuple[float, float, str]]]:
        """node -> (predicted end, GPUs it frees, job) of its running jobs, soonest first;
        predictions already overrun are revised first."""
        heap = self._end_heap
        while heap and heap[0][0] <= now:
            end, job_id = heapq.heappop(heap)
            if self._run_end.get(job_id) == end:
                job = running[job_id]
                self.stopped(job)
                self.started(job, now)
        return self._frees

    def _reserve(
        self, job: Job, now: float, taken: set[str], running: dict[str, Job]
    ) -> Reservation | None:
        """The node (or, for a gang larger than any node, the whole nodes) where ``job``
        fits soonest once running jobs end as predicted; nodes in ``taken`` are held by
        reservations of jobs ahead of it."""
        req = job.request
        need = req.num_gpu
        if need == 0:
            return None
        frees = self._predicted_frees(now, running)
        models = [m for m in self.state.models if req.allows(m)]
        if req.whole_gpus > max((self.state.max_gpus[m] for m in models), default=0):
            return self._reserve_spanning(job, now, taken, models, frees)
        best: tuple[float, str, float] | None = None
        for node in self.state.on_nodes():
            if node.node_id in taken or node.spec.gpu_model not in models:
                continue
            if node.spec.num_gpus < need:
                continue
            free = float(node.free_whole) if req.whole_gpus else max(node.gpu_free, default=0.0)
            t = now
            for end, gpus, _ in frees.get(node.node_id, ()):
                if free >= need - EPS or (best is not None and end >= best[0]):
                    break
                free, t = free + gpus, end
            if free >= need - EPS and t > now and (best is None or t < best[0]):
                best = (t, node.node_id, free - need)
        if best is None:
            return None
        return Reservation(job.job_id, (best[1],), best[0], (best[2],))

    def _reserve_spanning(
        self,
        job: Job,
        now: float,
        taken: set[str],
        models: list[str],
        frees: dict[str, list[tuple[float, float, str]]],
    ) -> Reservation | None:
        """Whole nodes of one model for a gang larger than any node: the nodes that empty
        soonest, from the time the last of them is predicted to be empty."""
        best: Reservation | None = None
        for model in models:
            size = self.state.max_gpus[model]
            count = -(-job.request.whole_gpus // size)
            empty_at = sorted(
                (max((end for end, _, _ in frees.get(n.node_id, ())), default=now), n.node_id)
                for n in self.state.on_nodes()
                if n.spec.gpu_model == model and n.spec.num_gpus == size and n.node_id not in taken
            )
            if len(empty_at) < count:
                continue
            start = empty_at[count - 1][0]
            if start > now and (best is None or start < best.start):
                nodes = tuple(nid for _, nid in empty_at[:count])
                best = Reservation(job.job_id, nodes, start, (0.0,) * count)
        return best
