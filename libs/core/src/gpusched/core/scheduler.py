"""The scheduling cycle: one object, driven the same way by the simulator and the dispatcher.

The caller tells the ``Scheduler`` what happened (``submit``, ``finish``, ``node_ready``)
and calls ``cycle(now)``; the cycle returns decisions and has already applied them to the
scheduler's own cluster state, which the caller mirrors onto its backend. Time is always an
argument; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpusched.core.cluster import ClusterState, NodeState
from gpusched.core.demand import DemandHistory
from gpusched.core.errors import InvalidDecision
from gpusched.core.fairshare import FairShare
from gpusched.core.model import (
    EPS,
    Allocation,
    Decision,
    Job,
    JobState,
    NodeSpec,
    ParkNode,
    PendingReason,
    Place,
    PowerState,
    Preempt,
    Request,
    WakeNode,
)
from gpusched.core.outlook import DemandOutlook
from gpusched.core.params import Params
from gpusched.core.placement import Placement
from gpusched.core.policies import Policy
from gpusched.core.power import PowerModel
from gpusched.core.powersave import every_node_on
from gpusched.core.queue import PendingQueue
from gpusched.core.reasons import explain
from gpusched.core.reservations import Reservation, ReservationPlanner
from gpusched.core.runtime import RuntimePredictor
from gpusched.core.starts import estimate_starts

__all__ = ["MOVE_REASON", "CycleResult", "RecordedJob", "Scheduler"]

# How the reason of a consolidation move's Preempt begins (a rebuilt dispatcher finds its
# last move by it)
MOVE_REASON = "consolidate: "


@dataclass(frozen=True, slots=True)
class RecordedJob:
    """A job as a record of events knows it, to rebuild a scheduler from (``restore``).

    ``ended_at`` set: it ended after ``executed_s`` of running (what the run-time predictor
    and fair share learn from). Else it is live: pending, or running on ``allocations``
    since ``started_at``.
    """

    job: Job
    allocations: tuple[Allocation, ...] = ()
    started_at: float | None = None
    ended_at: float | None = None


@dataclass(slots=True)
class CycleResult:
    decisions: list[Decision] = field(default_factory=list)
    pending: dict[str, PendingReason] = field(default_factory=dict)


@dataclass(slots=True)
class _Held:
    """A reserved node in this cycle, with its spare GPUs left."""

    start: float
    node_id: str
    spare: float


class Scheduler:
    """Cluster state, jobs and a policy; ``cycle`` turns them into decisions."""

    def __init__(
        self,
        nodes: Iterable[NodeSpec],
        policy: Policy,
        placement: Placement,
        params: Params | None = None,
        power: PowerModel | None = None,
        outlook: DemandOutlook | None = None,
    ) -> None:
        self.params = params or Params()
        self.outlook = outlook  # a demand forecast, for policies that plan capacity
        self.demand = DemandHistory()  # GPUs pending plus running, as they changed
        self.state = ClusterState(nodes)
        self.policy = policy
        self.placement = placement
        self.power = power or PowerModel()
        self.predictor = RuntimePredictor(by_tenant=self.params.predict_by_tenant)
        self.fairshare = FairShare(self.params.fairshare_half_life_s)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, Job] = {}
        self.queue = PendingQueue()
        self.idle_since: dict[str, float] = {nid: 0.0 for nid in self.state.nodes}
        self.reservations: dict[str, Reservation] = {}  # job id -> its reservation
        self._victims: list[tuple[Job, object]] | None = None
        # one Request object per distinct request: a cycle's memo of requests that did
        # not fit then compares them by identity (every pending job, every cycle); equal
        # requests that are not the same object still compare equal
        self._requests: dict[Request, Request] = {}
        # per cycle: (tenant, GPUs, run so far) -> predicted end of a pending job started now
        self._ends: dict[tuple[str, float, float], float] = {}
        self.planner = ReservationPlanner(self.state, self.predictor)
        self.ref_time = 0.0
        self._next_refresh = 0.0
        self._dirty = True
        self._charged_at: dict[str, float] = {}
        self._excluded: frozenset[str] = frozenset()  # the last cycle's
        self.migrations = 0  # jobs moved to empty a node (``_consolidate``)
        self.migrated_at = -math.inf  # when the last of them was moved
        # When ``_consolidate`` last ran: the state's version and the time
        self._consolidated_at: tuple[int, float] = (-1, -math.inf)
        policy.bind(self)

    @classmethod
    def restore(
        cls,
        nodes: Iterable[NodeSpec],
        policy: Policy,
        placement: Placement,
        params: Params,
        records: Iterable[RecordedJob],
        now: float,
    ) -> tuple[Scheduler, dict[str, str]]:
        """A scheduler as of ``now`` from a record of jobs (the processor's tables): ended
        jobs, in the order they ended, teach the run-time predictor and charge fair share;
        live ones are submitted in submit order and running ones started where they run;
        then priorities are refreshed at ``now``. Returns it and, by job id, why a
        running job could not be put where it runs."""
        scheduler = cls(nodes, policy, placement, params)
        ended = sorted((r for r in records if r.ended_at is not None), key=_ended_at)
        live = sorted((r for r in records if r.ended_at is None), key=_submitted)
        for r in ended:
            scheduler.predictor.observe(r.job, r.job.executed_s)
            scheduler.policy.finished(r.job, _ended_at(r))
            scheduler.demand.change(_submitted(r), r.job.request.num_gpu)
            scheduler.demand.change(_ended_at(r), -r.job.request.num_gpu)
            scheduler.fairshare.charge(r.job.tenant, r.job.attained_gpu_s, now)
        misplaced: dict[str, str] = {}
        for r in live:
            scheduler.submit(r.job, r.job.submit_time)
            if r.started_at is None:
                continue
            try:
                scheduler.assume(r.job.job_id, r.allocations, r.started_at)
            except (InvalidDecision, KeyError) as exc:
                misplaced[r.job.job_id] = str(exc)
        scheduler._refresh(now)  # priorities as a live scheduler's at a refresh
        return scheduler, misplaced

    # -- what happened ------------------------------------------------------------------
    def submit(self, job: Job, now: float) -> None:
        """A new job arrives (pending)."""
        if job.job_id in self.jobs:
            raise InvalidDecision(f"job {job.job_id} was already submitted")
        job.state, job.pending_since = JobState.PENDING, now
        if len(self._requests) > 10_000:  # bounded (requests of any CPU and memory)
            self._requests.clear()
        job.request = self._requests.setdefault(job.request, job.request)
        self.jobs[job.job_id] = job
        self.fairshare.see(job.tenant)
        self.placement.observe(job.request)
        self.queue.push(job, self.policy.key(job, self.ref_time))
        self.demand.change(now, job.request.num_gpu)
        self._dirty = True

    def finish(self, job_id: str, now: float) -> Job:
        """A running job ended; its resources are free again."""
        job = self.running.pop(job_id)
        self._stop(job, now)
        job.state = JobState.FINISHED
        self.predictor.observe(job, job.executed_s)
        self.policy.finished(job, now)
        self.demand.change(now, -job.request.num_gpu)
        self._dirty = True
        return job

    def node_ready(self, node_id: str, now: float) -> None:
        """A waking node finished waking."""
        node = self.state.nodes[node_id]
        if node.power is PowerState.WAKING:
            self.state.set_power(node_id, PowerState.ON)
            self.idle_since[node_id] = now
            self._dirty = True

    def cancel(self, job_id: str, now: float) -> Job:
        """Withdraw a job, pending or running."""
        job = self.jobs[job_id]
        if job_id in self.running:
            self.running.pop(job_id)
            self._stop(job, now)
        elif job_id in self.queue:
            self.queue.remove(job_id)
        if job.state is not JobState.FINISHED:
            self.demand.change(now, -job.request.num_gpu)
        job.state = JobState.FINISHED
        self._dirty = True
        return job

    def assume(self, job_id: str, allocations: tuple[Allocation, ...], now: float) -> None:
        """A pending job was started elsewhere on ``allocations`` (a mirror of a backend, or a
        decision replayed after a restart); InvalidDecision if they do not fit."""
        job = self.jobs[job_id]
        if job_id not in self.queue:
            raise InvalidDecision(f"job {job_id} is not pending ({job.state})")
        self._start(job, allocations, now, [])
        self._dirty = True

    def requeue(self, job_id: str, now: float) -> Job:
        """A running job was preempted: release it and queue it again."""
        job = self.running.pop(job_id)
        self._stop(job, now)
        job.state, job.pending_since = JobState.PENDING, now
        job.preemptions += 1
        self.queue.push(job, self.policy.key(job, self.ref_time))
        self._dirty = True
        return job

    def revert(self, decision: Decision, now: float) -> None:
        """Undo a decision of the last cycle that the cluster refused. A placed job waits
        again where it was in the queue (not a preemption: it never ran); a parked or
        woken node keeps the power it had. A refused preemption needs nothing: the
        cluster's events say whether the job still runs."""
        if isinstance(decision, Place) and decision.job_id in self.running:
            job = self.running.pop(decision.job_id)
            first = job.first_start == job.run_start and job.preemptions == 0
            self._stop(job, now)
            job.state = JobState.PENDING
            if first:
                job.first_start = None
            self.queue.push(job, self.policy.key(job, self.ref_time))
        elif isinstance(decision, ParkNode):
            self.state.set_power(decision.node_id, PowerState.ON)
            self.idle_since.setdefault(decision.node_id, now)
        elif isinstance(decision, WakeNode):
            self.state.set_power(decision.node_id, PowerState.PARKED)
        self._dirty = True

    # -- the cycle ----------------------------------------------------------------------
    def cycle(
        self, now: float, explain_pending: bool = False, excluded: Iterable[str] = ()
    ) -> CycleResult:
        """One scheduling cycle at time ``now``; no new work goes to ``excluded`` nodes
        (unhealthy ones: what runs there stays).

        1. refresh: re-key the queue when priorities have moved (timer);
        2. admit: walk pending jobs in priority order; place what fits; for the first
           blocked job, preempt (preemptive policies) or reserve nodes (backfill,
           dynamic); fifo stops at its first blocked job;
        3. consolidate: with no job waiting and some node parked, empty lightly used
           nodes onto busy ones (policies that consolidate: ``dynamic`` with
           ``dynamic_consolidate``), so the power step can park them;
        4. power: park idle nodes and wake parked ones (energy-aware policies);
        5. explain: a reason for every job left pending (when asked).
        """
        result = CycleResult()
        # 1. refresh
        if now >= self._next_refresh:
            self._refresh(now)
        if self.policy.timer_due(now):
            self._dirty = True
        if (out := frozenset(excluded)) != self._excluded:
            self._excluded, self._dirty = out, True
        # 2. admit
        if self._dirty and len(self.queue):
            hidden = sorted(out)
            self.state.hide(hidden)
            try:
                self._admit(now, result.decisions)
            finally:
                self.state.unhide(hidden)
        self._dirty = False
        # 3. consolidate
        # (only while some node is parked or waking: a cluster with all its nodes on
        # has no spare capacity to pack its jobs into)
        if self.policy.consolidates and not len(self.queue) and not self.state.all_on():
            self._consolidate(now, result.decisions, out)
        # 4. power
        for decision in self.policy.power(now):
            self._apply_power(decision, now)
            result.decisions.append(decision)
        # 5. explain
        if explain_pending:
            result.pending = self.explain_all(now)
        return result

    def next_wakeup(self, now: float) -> float | None:
        """When the scheduler wants a cycle even if nothing happens (timers)."""
        timers = (self.policy.next_timer(now), self.policy.power_timer(now), self._next_refresh)
        times = [t for t in timers if t is not None]
        later = [t for t in times if t > now]
        return min(later) if later else None

    def _refresh(self, now: float) -> None:
        for job in self.running.values():
            since = self._charged_at.get(job.job_id, now - job.running_for(now))
            self.fairshare.charge(job.tenant, (now - since) * job.request.num_gpu, now)
            self._charged_at[job.job_id] = now
        if self.policy.refreshes:
            self.policy.begin_refresh(now)
            self.ref_time = now
            jobs = self.jobs
            self.queue.rekey(lambda ids: self.policy.keys([jobs[jid] for jid in ids], now))
        self._next_refresh = now + self.params.refresh_s
        self._dirty = True

    def _admit(self, now: float, decisions: list[Decision]) -> None:
        state, policy, params = self.state, self.policy, self.params
        failed: set[tuple[Request, tuple[str, ...]]] = set()
        blocked = 0
        preempt_tries = 0
        self.reservations = {}
        self._victims = None
        self._ends.clear()
        held: list[_Held] = []
        depth = policy.reserve_depth()
        scanned = 0
        jobs, max_scan = self.jobs, params.max_scan

        def spent() -> bool:  # no preemption try and no reservation left
            tries_left = policy.preemptive and preempt_tries < params.preempt_tries
            return not tries_left and len(self.reservations) >= depth

        ends_when_full = spent()  # then a full cluster ends the walk (tried when blocked)
        for job_id in self.queue.walk():
            job = jobs[job_id]
            if blocked:
                scanned += 1
                if scanned > max_scan:
                    break  # like Slurm's bf_max_job_test
                if ends_when_full and job.request.num_gpu > 0 and not state.has_free_gpu():
                    break
            if held:
                usable = self._usable(job, now, held)
                memo = (job.request, tuple(h.node_id for h in usable))
            else:
                usable, memo = [], (job.request, ())
            if memo in failed:
                continue
            if usable:
                allocs = self._place_ignoring(job, [h.node_id for h in usable])
            else:
                allocs = self.placement.place(state, job.request)
            if allocs is not None:
                if usable:
                    self._charge_spare(job, now, allocs, usable)
                self._start(job, allocs, now, decisions)
                continue
            failed.add(memo)
            blocked += 1
            if policy.blocks_at_head:
                break
            context = (
                policy.preempt_context(job, now)
                if policy.preemptive
                and preempt_tries < params.preempt_tries
                and not (policy.waits_for_wake(job) and self._fits_once_woken(job))
                else None
            )
            if context is not None:
                preempt_tries += 1
                ends_when_full = spent()
                if self._try_preempt(job, context, now, decisions):
                    failed.clear()
                    continue
            if len(self.reservations) < depth and policy.may_reserve(job, now):
                res = self.planner.plan(job, now, {h.node_id for h in held}, self.running)
                if res is not None:
                    self.reservations[job_id] = res
                    held.extend(
                        _Held(res.start, nid, spare)
                        for nid, spare in zip(res.node_ids, res.spare, strict=True)
                    )
                    state.hide(res.node_ids)
                    failed = {(r, k) for r, k in failed if not k}  # the usable sets moved
                    ends_when_full = spent()
        self.planner.remember(self.reservations)
        state.unhide(h.node_id for h in held)

    def _fits_once_woken(self, job: Job) -> bool:
        """Whether ``job`` would be placed if the parked and waking nodes were on: it is
        served by a wake (``wake_for_waiting``) within the wake latency, not by a
        preemption, as Slurm allocates a powered-down node and resumes it rather than
        preempting for a job that such a node can hold."""
        state = self.state
        if state.all_on():  # most cycles of a policy that never parks
            return False
        off = [n.node_id for n in state.nodes.values() if n.power is not PowerState.ON]
        with every_node_on(state, off):
            return self.placement.place(state, job.request) is not None

    def reserved_nodes(self) -> set[str]:
        """Nodes held by this cycle's reservations."""
        return {nid for res in self.reservations.values() for nid in res.node_ids}

    def _end_if_started(self, job: Job, now: float) -> float:
        # Pending jobs of one tenant, size and progress share a prediction.
        memo = (job.tenant, job.request.num_gpu, job.executed_s)
        end = self._ends.get(memo)
        if end is None:
            end = self._ends[memo] = now + self.predictor.expected_remaining(job, now)
        return end

    def _usable(self, job: Job, now: float, held: list[_Held]) -> list[_Held]:
        """Reserved nodes open to ``job``: it is predicted to end before the reservation
        starts, or the node has GPUs to spare beyond what the reservation needs."""
        end = self._end_if_started(job, now)
        need = job.request.num_gpu - EPS
        return [h for h in held if h.start >= end or h.spare >= need]

    def _charge_spare(
        self, job: Job, now: float, allocs: tuple[Allocation, ...], usable: list[_Held]
    ) -> None:
        """A job placed on a reserved node past its reservation's start uses its spare."""
        end = self._end_if_started(job, now)
        for a in allocs:
            for h in usable:
                if h.node_id == a.node_id and h.start < end:
                    h.spare -= len(a.gpu_indices) * a.share if a.gpu_indices else 0.0

    def _place_ignoring(self, job: Job, hidden: list[str]) -> tuple[Allocation, ...] | None:
        self.state.unhide(hidden)
        try:
            return self.placement.place(self.state, job.request)
        finally:
            self.state.hide(hidden)

    def _start(
        self, job: Job, allocs: tuple[Allocation, ...], now: float, decisions: list[Decision]
    ) -> None:
        self.state.allocate(job.job_id, allocs)
        self.queue.remove(job.job_id)
        job.state, job.run_start, job.allocations = JobState.RUNNING, now, allocs
        self.planner.started(job, now)
        if job.first_start is None:
            job.first_start = now
        self.running[job.job_id] = job
        self._charged_at[job.job_id] = now
        for a in allocs:
            self.idle_since.pop(a.node_id, None)
        decisions.append(Place(job.job_id, allocs, self.policy.why_placed(job, now)))

    def _stop(self, job: Job, now: float) -> None:
        """Release a running job's resources and account for the time it ran."""
        self.state.release(job.job_id, job.allocations)
        self.planner.stopped(job)
        ran = job.running_for(now)
        job.executed_s += ran
        job.attained_gpu_s += ran * job.request.num_gpu
        since = self._charged_at.pop(job.job_id, now - ran)
        self.fairshare.charge(job.tenant, (now - since) * job.request.num_gpu, now)
        job.run_start = None
        for a in job.allocations:
            if self.state.nodes[a.node_id].idle:
                self.idle_since.setdefault(a.node_id, now)
        job.allocations = ()

    def _try_preempt(
        self, job: Job, context: object, now: float, decisions: list[Decision]
    ) -> bool:
        """Remove lower-priority victims until ``job`` fits, keep those it did not need."""
        policy = self.policy
        if self._victims is None:  # once per cycle
            self._victims = policy.victims(self.running.values(), now)
        victims = policy.preemptable(self._victims, context)
        if not victims:
            return False
        state = self.state
        mark = state.checkpoint()
        released: list[Job] = []
        allocs = None
        for victim in victims:
            state.release(victim.job_id, victim.allocations)
            released.append(victim)
            allocs = self.placement.place(state, job.request)
            if allocs is not None:
                break
        if allocs is None:
            state.rollback(mark)
            state.commit()
            return False
        state.allocate(job.job_id, allocs)
        needed: list[Job] = []
        for victim in reversed(released):  # highest-priority victims back first
            try:
                state.allocate(victim.job_id, victim.allocations)
            except InvalidDecision:
                needed.append(victim)
        state.release(job.job_id, allocs)  # _start takes it again, with bookkeeping
        for victim in needed:  # back in place: requeue releases them, with bookkeeping
            state.allocate(victim.job_id, victim.allocations)
        state.commit()
        for victim in needed:
            self.requeue(victim.job_id, now)
            decisions.append(Preempt(victim.job_id, f"for {job.job_id} ({self.policy.name})"))
        self._start(job, allocs, now, decisions)
        self._victims = None
        return True

    def _consolidate(self, now: float, decisions: list[Decision], excluded: frozenset[str]) -> None:
        """Empty the least used nodes, one after another, onto the other nodes that run
        jobs, so that the emptied node is parked. A node is emptied only when the power
        step would then park it (its GPUs are within ``Policy.consolidation_budget``),
        each of its jobs runs on it alone, the policy finds the move worth its restarts
        (``Policy.worth_moving``) and all of them fit on nodes that already run jobs
        (never on an idle, excluded or emptied node, so each move leaves one node fewer
        with jobs and moves cannot cycle). Each moved job is preempted and restarted at
        once (it loses the restart cost). The first node that cannot be emptied ends the
        step (one that would stay on, or whose jobs may not move, is passed over).
        Nothing is tried again until the cluster state changes or a restart cost has
        passed (a job too young to move may have grown old enough, and expected
        remainders change). (Emptying a node only for its host to idle, kept on, was
        tried: on the tune set it made six times the moves for the same energy.)"""
        state, policy = self.state, self.policy
        version, at = self._consolidated_at
        if state.version == version and now < at + self.params.preemption_cost_s:
            return
        budget = policy.consolidation_budget(now)
        busy = sorted(
            (n for n in state.on_nodes() if n.jobs and n.node_id not in excluded),
            key=lambda n: (n.spec.num_gpus - n.free_gpu, n.node_id),
        )
        hidden = [n.node_id for n in state.on_nodes() if not n.jobs] + sorted(excluded)
        state.hide(hidden)
        try:
            for node in busy[:-1]:  # the busiest has no other node to go to
                jobs = [self.running[j] for j in node.jobs]
                if (
                    node.spec.num_gpus > budget
                    or any(len(j.allocations) != 1 for j in jobs)
                    or not policy.worth_moving(jobs, node, now)
                ):
                    continue
                moves = self._moves_off(node, jobs)
                if moves is None:
                    break
                why = f"{MOVE_REASON}empties {node.node_id} to park it"
                for job, allocs in moves:
                    self.requeue(job.job_id, now)
                    decisions.append(Preempt(job.job_id, why))
                    self._start(job, allocs, now, decisions)
                    self.migrations += 1
                    self.migrated_at = now
                state.hide([node.node_id])
                hidden.append(node.node_id)
                budget -= node.spec.num_gpus
        finally:
            state.unhide(hidden)
        self._consolidated_at = (state.version, now)

    def _moves_off(
        self, node: NodeState, jobs: list[Job]
    ) -> list[tuple[Job, tuple[Allocation, ...]]] | None:
        """Where each of ``jobs`` (those of ``node``) would restart on the visible nodes
        other than ``node``, largest first, or None if one of them does not fit."""
        state = self.state
        moves: list[tuple[Job, tuple[Allocation, ...]]] = []
        mark = state.checkpoint()
        state.hide([node.node_id])
        try:
            for job in sorted(jobs, key=lambda j: (-j.request.num_gpu, j.job_id)):
                allocs = self.placement.place(state, job.request)
                if allocs is None:
                    return None
                state.allocate(job.job_id, allocs)  # a trial: rolled back below
                moves.append((job, allocs))
        finally:
            state.rollback(mark)
            state.commit()
            state.unhide([node.node_id])
        return moves

    def _apply_power(self, decision: Decision, now: float) -> None:
        if isinstance(decision, ParkNode):
            self.state.set_power(decision.node_id, PowerState.PARKED)
            self.idle_since.pop(decision.node_id, None)
        elif isinstance(decision, WakeNode):
            ready = now + self.power.wake_latency_s
            self.state.set_power(decision.node_id, PowerState.WAKING, ready_at=ready)
        self.state.commit()

    # -- explanations -------------------------------------------------------------------
    def explain_all(self, now: float) -> dict[str, PendingReason]:
        """A reason for every pending job, with its estimated start where there is one."""
        starts = estimate_starts(self, now)
        return {
            job_id: explain(self, self.jobs[job_id], position, now, starts.get(job_id))
            for position, job_id in enumerate(self.queue.ids())
        }


def _ended_at(record: RecordedJob) -> float:
    return record.ended_at or 0.0


def _submitted(record: RecordedJob) -> float:
    return record.job.submit_time
