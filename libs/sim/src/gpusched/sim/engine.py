"""A deterministic discrete-event simulator that drives ``gpusched.core.Scheduler``.

It plays the backend: it tells the scheduler about arrivals, finishes and nodes that
finished waking, runs a cycle after every batch of simultaneous events (and when the
scheduler asks for a timer), and carries out the decisions — a placed job finishes after
its remaining true run time, a preempted one loses ``preemption_cost_s`` of progress, a
woken node is ready after the power model's wake latency. Energy is integrated exactly
between events. Nothing here is random, so a trace and a seed always give the same run.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol

from gpusched.core import (
    Decision,
    DemandOutlook,
    EnergyMeter,
    Job,
    NodeSpec,
    Params,
    ParkNode,
    Place,
    PowerModel,
    PowerState,
    Preempt,
    Scheduler,
    WakeNode,
    make_placement,
    make_policy,
    never_fits,
)
from gpusched.sim.traces import TraceJob

__all__ = ["JobOutcome", "RunResult", "Simulation", "TraceOutlook"]


class TraceOutlook(DemandOutlook, Protocol):
    """A demand forecast that learns from the simulated cluster as it runs: it is told
    every arrival and end, and ``advance`` before each cycle (when it may refit on what
    it has seen so far, never on the trace's future)."""

    def submitted(self, job: Job, now: float) -> None: ...

    def ended(self, job_id: str, now: float) -> None: ...

    def advance(self, now: float) -> None: ...

    def close(self) -> None: ...


class _Kind(IntEnum):  # order of events that share a time
    FINISH = 0
    WAKE = 1
    ARRIVAL = 2
    TIMER = 3


@dataclass(frozen=True, slots=True)
class JobOutcome:
    job_id: str
    tenant: str
    qos: str
    num_gpu: float
    submit: float
    first_start: float
    finish: float
    run_s: float  # wall time it ran, restarts included
    duration_s: float  # true run time from the trace
    preemptions: int


@dataclass(slots=True)
class RunResult:
    policy: str
    placement: str
    outcomes: list[JobOutcome] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    submitted: int = 0  # jobs of the trace that some node could hold
    unfinished: list[str] = field(default_factory=list)  # queueing: never ended (a bug)
    window: tuple[float, float] = (0.0, 0.0)
    total_gpus: int = 0
    allocated_gpu_s: float = 0.0
    energy_j: float = 0.0
    floor_energy_j: float = 0.0
    preemptions: int = 0  # every preemption, the moves of consolidation included
    migrations: int = 0  # jobs moved to empty a node so it can be parked
    makespan_s: float = 0.0
    parked_node_s: float = 0.0  # node-seconds parked (not waking) within the window
    # time jobs waited, between their submission and their start, for a node they were
    # then placed on to finish waking
    wake_wait_s: float = 0.0
    wall_s: float = 0.0
    # packing
    alloc_frac_at_first_failure: float | None = None
    alloc_frac_final: float | None = None
    unallocated_gpus_final: float | None = None
    failed: int = 0
    # time series (t, queue length, cluster watts, allocated GPUs, nodes parked or
    # waking), downsampled
    series: list[tuple[float, int, float, float, int]] = field(default_factory=list)
    # every decision with its time, when the simulation was asked to record them
    decisions: list[tuple[float, Decision]] = field(default_factory=list)


class Simulation:
    """One policy over one trace on one cluster."""

    def __init__(
        self,
        nodes: list[NodeSpec],
        jobs: list[TraceJob],
        policy: str,
        placement: str = "bestfit",
        params: Params | None = None,
        power: PowerModel | None = None,
        experiment: str = "queueing",
        seed: int = 0,
        outlook: TraceOutlook | None = None,
        record: bool = False,
    ) -> None:
        self.params = params or Params()
        self.record = record
        self.power = power or PowerModel()
        self.trace = {j.job_id: j for j in jobs}
        self.jobs = jobs
        self.experiment = experiment
        self.seed = seed  # the core is deterministic; kept for the record and tie-breaks
        self._total_work = {j.job_id: j.duration_s for j in jobs}
        self.scheduler = Scheduler(
            nodes,
            make_policy(policy, oracle=self._total_work.__getitem__),
            make_placement(placement),
            self.params,
            self.power,
            outlook,
        )
        self.outlook = outlook
        self.result = RunResult(policy, placement, total_gpus=self.scheduler.state.total_gpus)
        self._events: list[tuple[float, int, int, str, int]] = []
        self._seq = 0
        self._token: dict[str, int] = {}
        self._left: dict[str, float] = {}
        self._started_at: dict[str, float] = {}
        self._nodes_of: dict[str, list[str]] = {}
        self._node_w: dict[str, tuple[float, float]] = {}
        self._total_w = 0.0
        self._floor_w = 0.0
        self._allocated = 0.0
        self._parked = 0
        self._woken: dict[str, tuple[float, float]] = {}  # node -> (wake issued, ready)

    # -- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: _Kind, ref: str, token: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, int(kind), self._seq, ref, token))

    def run(self, progress: Callable[[int], None] | None = None) -> RunResult:
        """Play the whole trace; ``progress(n)`` is called as arrivals are consumed."""
        try:
            return self._run(progress)
        finally:
            if self.outlook is not None:
                self.outlook.close()

    def _run(self, progress: Callable[[int], None] | None) -> RunResult:
        started = time.perf_counter()
        sched, res = self.scheduler, self.result
        runnable = []
        for job in self.jobs:
            reason = never_fits(sched, job.job())
            if reason:
                res.skipped.append((job.job_id, reason))
            else:
                runnable.append(job)
        if not runnable:
            res.wall_s = time.perf_counter() - started
            return res
        res.submitted = len(runnable)
        res.window = (runnable[0].submit_time, runnable[-1].submit_time)
        meter = EnergyMeter(*res.window)
        for node_id in sched.state.nodes:
            self._touch(node_id)
        for job in runnable:
            self._push(job.submit_time, _Kind.ARRIVAL, job.job_id)
        last_t = runnable[0].submit_time
        timer_at: float | None = None
        arrivals = 0
        sample_every = max(len(runnable) // 1500, 1)
        while self._events:
            now = self._events[0][0]
            meter.advance(now)
            res.allocated_gpu_s += self._allocated * _overlap(last_t, now, res.window)
            res.parked_node_s += self._parked * _overlap(last_t, now, res.window)
            last_t = now
            new_arrival = None
            while self._events and self._events[0][0] == now:
                _, kind, _, ref, token = heapq.heappop(self._events)
                if kind == _Kind.FINISH:
                    if self._token.get(ref) == token:
                        self._finish(ref, now)
                elif kind == _Kind.WAKE:
                    sched.node_ready(ref, now)
                    self._touch(ref)
                elif kind == _Kind.ARRIVAL:
                    arrivals += 1
                    new_arrival = ref
                    self._arrive(ref, now)
                    if progress and arrivals % 500 == 0:
                        progress(500)
                elif kind == _Kind.TIMER and timer_at == now:
                    timer_at = None
            if self.outlook is not None:
                self.outlook.advance(now)
            outcome = sched.cycle(now)
            self._carry_out(outcome.decisions, now)
            if self.experiment == "packing" and new_arrival and new_arrival in sched.queue:
                self._packing_failure(new_arrival, now)
            meter.set_power(self._total_w, self._floor_w)
            if arrivals % sample_every == 0 or not self._events:
                off = sum(1 for n in sched.state.nodes.values() if n.power is not PowerState.ON)
                res.series.append((now, len(sched.queue), self._total_w, self._allocated, off))
            # Arrival-only packing has no timers: jobs never leave, nothing else can change.
            # With no job waiting or running only power timers matter (parking idle nodes
            # on time); the others would tick through the gaps of the trace for nothing.
            wake = None
            if self.experiment != "packing":
                busy = len(sched.queue) or sched.running
                wake = sched.next_wakeup(now) if busy else sched.policy.power_timer(now)
            if wake is not None and (timer_at is None or wake < timer_at):
                timer_at = wake
                self._push(wake, _Kind.TIMER, "")
        if progress:
            progress(arrivals % 500)
        if self.experiment != "packing":
            res.unfinished = [*sched.queue.ids(), *sched.running]
        res.energy_j, res.floor_energy_j = meter.total_j, meter.floor_j
        res.migrations = sched.migrations
        res.makespan_s = last_t - res.window[0]
        if self.experiment == "packing":
            total = max(res.total_gpus, 1)
            res.alloc_frac_final = self._allocated / total
            res.unallocated_gpus_final = res.total_gpus - self._allocated
            if res.alloc_frac_at_first_failure is None:
                res.alloc_frac_at_first_failure = res.alloc_frac_final
        res.wall_s = time.perf_counter() - started
        return res

    # -- what the backend does --------------------------------------------------------------
    def _arrive(self, job_id: str, now: float) -> None:
        self._left[job_id] = self.trace[job_id].duration_s
        job = self.trace[job_id].job()
        self.scheduler.submit(job, now)
        if self.outlook is not None:
            self.outlook.submitted(job, now)

    def _finish(self, job_id: str, now: float) -> None:
        job = self.scheduler.finish(job_id, now)
        if self.outlook is not None:
            self.outlook.ended(job_id, now)
        self._allocated -= job.request.num_gpu
        for node_id in self._nodes_of.pop(job_id):
            self._touch(node_id)
        t = self.trace[job_id]
        self.result.outcomes.append(
            JobOutcome(
                job_id,
                t.tenant,
                t.qos,
                t.request.num_gpu,
                t.submit_time,
                job.first_start if job.first_start is not None else now,
                now,
                job.executed_s,
                t.duration_s,
                job.preemptions,
            )
        )

    def _carry_out(self, decisions: Sequence[Decision], now: float) -> None:
        if self.record:
            self.result.decisions.extend((now, d) for d in decisions)
        for d in decisions:
            if isinstance(d, Place):
                # Arrival-only packing: jobs never leave.
                left = float("inf") if self.experiment == "packing" else self._left[d.job_id]
                if d.job_id not in self._token:  # its first start
                    self._waited_for_wake(d, now)
                token = self._token.get(d.job_id, 0) + 1
                self._token[d.job_id] = token
                self._started_at[d.job_id] = now
                self._nodes_of[d.job_id] = [a.node_id for a in d.allocations]
                self._allocated += self.trace[d.job_id].request.num_gpu
                if left != float("inf"):
                    self._push(now + left, _Kind.FINISH, d.job_id, token)
                for a in d.allocations:
                    self._touch(a.node_id)
            elif isinstance(d, Preempt):
                ran = now - self._started_at.pop(d.job_id)
                self._left[d.job_id] = self._left[d.job_id] - ran + self.params.preemption_cost_s
                self._total_work[d.job_id] += self.params.preemption_cost_s
                self._token[d.job_id] = self._token.get(d.job_id, 0) + 1
                self._allocated -= self.trace[d.job_id].request.num_gpu
                self.result.preemptions += 1
                for node_id in self._nodes_of.pop(d.job_id):
                    self._touch(node_id)
            elif isinstance(d, WakeNode):
                self._push(now + self.power.wake_latency_s, _Kind.WAKE, d.node_id)
                self._woken[d.node_id] = (now, now + self.power.wake_latency_s)
                self._parked -= 1
                self._touch(d.node_id)
            elif isinstance(d, ParkNode):
                self._parked += 1
                self._touch(d.node_id)

    def _waited_for_wake(self, place: Place, now: float) -> None:
        """Adds the time the job waited for the last wake of any node it is placed on:
        from its submission (or the wake, if later) until that node was ready."""
        submit = self.trace[place.job_id].submit_time
        waited = 0.0
        for a in place.allocations:
            issued, ready = self._woken.get(a.node_id, (now, now))
            if submit < ready <= now:
                waited = max(waited, ready - max(submit, issued))
        self.result.wake_wait_s += waited

    def _packing_failure(self, job_id: str, now: float) -> None:
        res = self.result
        res.failed += 1
        if res.alloc_frac_at_first_failure is None:
            res.alloc_frac_at_first_failure = self._allocated / max(res.total_gpus, 1)
        self.scheduler.cancel(job_id, now)

    def _touch(self, node_id: str) -> None:
        split = self.power.node(self.scheduler.state.nodes[node_id])
        old_total, old_floor = self._node_w.get(node_id, (0.0, 0.0))
        self._total_w += split.total_w - old_total
        self._floor_w += split.floor_w - old_floor
        self._node_w[node_id] = (split.total_w, split.floor_w)


def _overlap(a: float, b: float, window: tuple[float, float]) -> float:
    return max(min(b, window[1]) - max(a, window[0]), 0.0)
