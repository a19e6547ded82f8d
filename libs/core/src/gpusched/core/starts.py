"""When pending jobs are likely to start: the queue played forward on predicted run times.

A what-if plan like Slurm's backfill ``StartTime`` estimate: running jobs end when the
run-time predictor expects; pending jobs, taken in queue order, each start at the soonest
time some node they may use holds their GPUs for their whole predicted run, and hold them
from then on. The plan counts GPU capacity per node (shares summed, CPU and memory left
out), a parked node counts from when a wake would finish, and nothing arrives later: an
estimate, revised on every recomputation, never a promise.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import TYPE_CHECKING

from gpusched.core.model import EPS, Job, PowerState

if TYPE_CHECKING:
    from gpusched.core.scheduler import Scheduler

__all__ = ["estimate_starts"]

# Pending jobs estimated per call, in queue order; later ones get no estimate. Bounds
# the cost of a recomputation on a long queue (the plan is O(jobs x nodes x steps)).
MAX_ESTIMATED = 200


class _Profile:
    """A node's free GPU capacity over time: ``free[i]`` holds from ``times[i]`` until
    ``times[i + 1]`` (the last step for ever)."""

    __slots__ = ("free", "size", "times")

    def __init__(self, start: float, free: float, size: int) -> None:
        self.times, self.free, self.size = [start], [free], size

    def add(self, t: float, gpus: float) -> None:
        """``gpus`` more free from ``t`` on (from the first step, if ``t`` is before it)."""
        i = self._split(max(t, self.times[0]))
        for j in range(i, len(self.free)):
            self.free[j] += gpus

    def hold(self, start: float, end: float, gpus: float) -> None:
        i, j = self._split(start), self._split(end)
        for k in range(i, j):
            self.free[k] -= gpus

    def soonest(
        self, need: float, duration: float, after: float, before: float = math.inf
    ) -> float | None:
        """The soonest time in ``[after, before)`` that ``need`` GPUs stay free for
        ``duration``; None if none."""
        times, free = self.times, self.free
        if free[-1] < need - EPS:
            return None  # the lasting step is too full: nothing fits for ever after
        n = len(times)
        i = max(bisect.bisect_right(times, after) - 1, 0)
        while i < n:
            start = max(times[i], after)
            if start >= before:
                return None
            j = i
            while j < n and times[j] < start + duration and free[j] >= need - EPS:
                j += 1
            if j == n or times[j] >= start + duration:
                return start
            i = j + 1  # step j is too full: no start before it ends can fit
        return None

    def _split(self, t: float) -> int:
        """The index of the step that starts at ``t``, splitting the step around it."""
        i = bisect.bisect_left(self.times, t)
        if i < len(self.times) and self.times[i] == t:
            return i
        self.times.insert(i, t)
        self.free.insert(i, self.free[i - 1] if i else 0.0)
        return i


def estimate_starts(scheduler: Scheduler, now: float) -> dict[str, float]:
    """Pending job -> its estimated start (scheduler time), for the first
    ``MAX_ESTIMATED`` pending jobs in queue order that some node could ever hold."""
    predictor = scheduler.predictor
    wake = scheduler.power.wake_latency_s
    profiles: dict[str, _Profile] = {}
    for node in scheduler.state.nodes.values():
        if node.power is PowerState.ON:
            profile = _Profile(now, node.free_gpu, node.spec.num_gpus)
        else:
            ready = node.ready_at if node.power is PowerState.WAKING else now + wake
            profile = _Profile(now, 0.0, node.spec.num_gpus)
            profile.add(max(ready, now), node.free_gpu)
        profiles[node.node_id] = profile
    for job in scheduler.running.values():
        end = now + predictor.expected_remaining(job, now)
        for a in job.allocations:
            profiles[a.node_id].add(end, len(a.gpu_indices) * a.share)
    by_model: dict[str, list[_Profile]] = {}
    for node in scheduler.state.nodes.values():
        by_model.setdefault(node.spec.gpu_model, []).append(profiles[node.node_id])
    starts: dict[str, float] = {}
    for job_id in itertools.islice(scheduler.queue.ids(), MAX_ESTIMATED):
        job = scheduler.jobs[job_id]
        candidates = [p for m, ps in by_model.items() if job.request.allows(m) for p in ps]
        when = _plan(job, now, predictor.expected_remaining(job, now), candidates)
        if when is not None:
            starts[job_id] = when
    return starts


def _plan(job: Job, now: float, duration: float, profiles: list[_Profile]) -> float | None:
    """Hold ``job``'s GPUs in the profiles where it starts soonest; that start."""
    need = job.request.num_gpu
    if need <= 0:
        return now
    single = [p for p in profiles if p.size >= need - EPS]
    if single:
        best: tuple[float, _Profile] | None = None
        for p in single:
            t = p.soonest(need, duration, now, best[0] if best else math.inf)
            if t is not None:
                best = (t, p)
                if t <= now:
                    break
        if best is None:
            return None
        best[1].hold(best[0], best[0] + duration, need)
        return best[0]
    return _plan_spanning(need, now, duration, profiles)


def _plan_spanning(
    need: float, now: float, duration: float, profiles: list[_Profile]
) -> float | None:
    """A gang larger than any node: whole nodes of one size, from when enough of them are
    empty together for the whole run."""
    best: tuple[float, list[_Profile]] | None = None
    for size in {p.size for p in profiles if p.size > 0}:  # nodes without GPUs hold no gang
        same = [p for p in profiles if p.size == size]
        count = int(-(-need // size))
        if len(same) < count:
            continue
        t = now
        for _ in range(len(same)):  # each round moves t later, or settles
            fits = sorted((w, i) for i, p in enumerate(same)
                          if (w := p.soonest(size, duration, t)) is not None)  # fmt: skip
            if len(fits) < count:
                break
            later = fits[count - 1][0]
            if later == t:
                chosen = [same[i] for _, i in fits[:count]]
                if best is None or t < best[0]:
                    best = (t, chosen)
                break
            t = later
    if best is None:
        return None
    for p in best[1]:
        p.hold(best[0], best[0] + duration, p.size)
    return best[0]
