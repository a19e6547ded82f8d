"""The policy interface: hooks a named policy overrides (ordering, preemption,
reservations, timers, power); the base is FIFO-like."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gpusched.core.model import Decision, Job
from gpusched.core.powersave import SuspendIdle

if TYPE_CHECKING:
    from gpusched.core.cluster import NodeState
    from gpusched.core.scheduler import Scheduler

__all__ = ["Key", "Oracle", "Policy"]

Key = tuple[Any, ...]
Oracle = Callable[[str], float]  # job id -> true total run time still to do, from 0


class Policy:
    """Base: FIFO-like defaults. Subclasses override the hooks they need (~50 lines each)."""

    name = ""
    preemptive = False
    blocks_at_head = False
    reserves_head = False
    refreshes = False
    reads_outlook = False  # plans capacity from the scheduler's demand forecast

    def bind(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        self.p = scheduler.params

    def reserve_depth(self) -> int:
        """Blocked jobs per cycle that get a reservation (0: none)."""
        return self.p.reserve_depth if self.reserves_head else 0

    def may_reserve(self, job: Job, now: float) -> bool:
        """Whether a blocked ``job`` may get a reservation now."""
        return True

    def key(self, job: Job, ref_time: float) -> Key:
        """Sort key of a pending job (lower runs first); fixed between refreshes."""
        return (job.submit_time,)

    def keys(self, jobs: list[Job], ref_time: float) -> list[Key]:
        """``key`` of each of ``jobs`` (a refresh asks it of every pending job), in order."""
        return [self.key(job, ref_time) for job in jobs]

    def running_key(self, job: Job, now: float) -> Key:
        """Sort key of a running job, comparable with ``key`` (for preemption)."""
        return self.key(job, now)

    # Preemption is decided in two cheap steps, so a cycle can weigh many pairs:
    # ``victim_facts`` once per running job and cycle (None: not preemptable now), then
    # ``preempt_context`` once per blocked job (None: it may not preempt), then
    # ``may_preempt(facts, context)`` per pair.
    def victim_facts(self, victim: Job, now: float) -> Any:
        return None

    def preempt_context(self, job: Job, now: float) -> Any:
        return None

    def may_preempt(self, facts: Any, context: Any) -> bool:
        return False

    def waits_for_wake(self, job: Job) -> bool:
        """Whether a blocked ``job`` that a parked or waking node could hold waits for
        that node rather than preempt (Slurm resumes a powered-down node rather than
        preempt for a job it can hold)."""
        return True

    # Consolidation (``Scheduler._consolidate``): with no job waiting, a policy that
    # consolidates may have a node's jobs restarted on nodes that already run jobs.
    consolidates = False

    def worth_moving(self, jobs: list[Job], node: NodeState, now: float) -> bool:
        """Whether emptying ``node`` of ``jobs`` (each restarting elsewhere) so that the
        power step parks it pays."""
        return False

    def consolidation_budget(self, now: float) -> float:
        """GPUs' worth of busy nodes that, once emptied, the power step would park."""
        return 0.0

    def victim_order(self, victim: Job, facts: Any, now: float) -> Key:
        """Victims are released largest key first (by default: lowest priority first)."""
        return self.running_key(victim, now)

    def victims(self, running: Iterable[Job], now: float) -> list[tuple[Job, Any]]:
        """The preemptable running jobs with their facts, in ``victim_order`` (largest
        first); a cycle asks once."""
        facts = [(v, self.victim_facts(v, now)) for v in running]
        eligible = [(v, f) for v, f in facts if f is not None]
        eligible.sort(key=lambda vf: self.victim_order(vf[0], vf[1], now), reverse=True)
        return eligible

    def preemptable(self, victims: list[tuple[Job, Any]], context: Any) -> list[Job]:
        """Those of ``victims`` that a blocked job of ``context`` may preempt, in order."""
        return [v for v, f in victims if self.may_preempt(f, context)]

    def finished(self, job: Job, now: float) -> None:
        """``job`` ended at ``now`` (after the scheduler's own bookkeeping)."""
        return None

    def begin_refresh(self, now: float) -> None:
        """Priorities are about to be recomputed at ``now`` (cache per-tenant terms here)."""
        return None

    _next_tick = 0.0

    def tick_s(self) -> float | None:
        """Seconds between timer cycles, or None for a policy that needs none."""
        return None

    def timer_due(self, now: float) -> bool:
        """Whether ``now`` is a timer cycle (and schedule the next one)."""
        period = self.tick_s()
        if period is None or now < self._next_tick:
            return False
        self._next_tick = now + period
        return True

    def next_timer(self, now: float) -> float | None:
        return self._next_tick if self.tick_s() is not None else None

    # Slurm-style power saving, set by ``make_policy`` for a ``<name>+powersave`` policy.
    power_saving: SuspendIdle | None = None

    def power(self, now: float) -> list[Decision]:
        """Park and wake decisions after admission (none unless power saving is on)."""
        return self.power_saving.decide(self.s, now) if self.power_saving else []

    def power_timer(self, now: float) -> float | None:
        """When power decisions are next due even if nothing happens (a node's idle
        time reaching the suspend time), or None."""
        return self.power_saving.next_time(self.s, now) if self.power_saving else None

    def components(self, job: Job, now: float) -> dict[str, float]:
        """The named terms of a job's priority (for priority updates)."""
        return {"submit_time": job.submit_time}

    def why_placed(self, job: Job, now: float) -> str:
        return f"{self.name}: fits now"
