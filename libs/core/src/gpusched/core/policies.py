"""Scheduling policies by name. Each orders pending jobs and may preempt, reserve or park.

A policy never reads a job's true duration; ``srpt-oracle`` is handed a lookup by its
caller and is labelled a bound, not a production policy.
"""

from __future__ import annotations

from operator import itemgetter
from typing import TYPE_CHECKING, Any

from gpusched.core.dynamic import Dynamic
from gpusched.core.errors import NeedsOracle, UnknownName
from gpusched.core.model import Job
from gpusched.core.policy import Key, Oracle, Policy
from gpusched.core.powersave import SuspendIdle

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpusched.core.scheduler import Scheduler

__all__ = [
    "POLICIES",
    "POWERSAVE",
    "Oracle",
    "Policy",
    "live_policy",
    "make_policy",
    "policy_names",
]


class Fifo(Policy):
    """First come, first fit, no skipping: the head of the queue blocks everyone."""

    name = "fifo"
    blocks_at_head = True


class Backfill(Policy):
    """Slurm multifactor priority (age, fair share, job size, QoS) with EASY backfill."""

    name = "backfill"
    reserves_head = True
    refreshes = True

    def components(self, job: Job, now: float) -> dict[str, float]:
        p = self.p
        age = min(max(now - job.submit_time, 0.0) / p.backfill_max_age_s, 1.0)
        size = 1.0 - min(job.request.num_gpu / max(self.s.state.total_gpus, 1), 1.0)
        qos = 1.0 - p.qos_rank(job.qos) / max(len(p.qos_classes), 1)
        return {
            "age": p.backfill_weight_age * age,
            "fair_share": p.backfill_weight_fairshare * self._factor(job.tenant),
            "job_size": p.backfill_weight_jobsize * size,
            "qos": p.backfill_weight_qos * qos,
        }

    def key(self, job: Job, ref_time: float) -> Key:
        return (-sum(self.components(job, ref_time).values()), job.submit_time)

    def bind(self, scheduler: Scheduler) -> None:
        super().bind(scheduler)
        self._factors: dict[str, float] = {}

    def begin_refresh(self, now: float) -> None:
        self._factors.clear()

    def _factor(self, tenant: str) -> float:
        # Fair-share factors move only with usage; cached until the next refresh.
        if tenant not in self._factors:
            self._factors[tenant] = self.s.fairshare.factor(tenant)
        return self._factors[tenant]


class Tiresias(Policy):
    """Discretized 2D least-attained-service (Tiresias, NSDI'19), preemptive.

    Queues by attained GPU-seconds; FIFO within a queue. As in the reference
    implementation (SymbioticLab/Tiresias), a job that has waited
    ``tiresias_starve_factor`` times what it ran since its last promotion is promoted to
    the top queue with its attained service reset, so it climbs the queues again; a
    running job keeps its lease of at least the restart cost before it may be preempted.
    """

    name = "tiresias"
    preemptive = True
    refreshes = True

    def bind(self, scheduler: Scheduler) -> None:
        super().bind(scheduler)
        # job -> (attained GPU-s, executed s) at its last promotion
        self._promoted: dict[str, tuple[float, float]] = {}

    def _queue(self, attained_gpu_s: float) -> int:
        return sum(1 for t in self.p.tiresias_thresholds_gpu_s if attained_gpu_s >= t)

    def _attained(self, job: Job, now: float) -> float:
        return job.attained_at(now) - self._promoted.get(job.job_id, (0.0, 0.0))[0]

    def _lease_s(self) -> float:
        return max(self.p.tiresias_lease_s, self.p.preemption_cost_s)

    def key(self, job: Job, ref_time: float) -> Key:
        attained, executed = self._promoted.get(job.job_id, (0.0, 0.0))
        ran = job.executed_s - executed
        waited = ref_time - job.pending_since
        if ran > 0 and waited > self.p.tiresias_starve_factor * ran:
            self._promoted[job.job_id] = (job.attained_gpu_s, job.executed_s)
            return (0, job.submit_time)
        return (self._queue(job.attained_gpu_s - attained), job.submit_time)

    def running_key(self, job: Job, now: float) -> Key:
        return (self._queue(self._attained(job, now)), job.submit_time)

    def victim_facts(self, victim: Job, now: float) -> Any:
        if victim.running_for(now) < self._lease_s():
            return None
        queue: int = self.running_key(victim, now)[0]
        return queue

    def victim_order(self, victim: Job, facts: Any, now: float) -> Key:
        return (facts, victim.submit_time)  # running_key, from the facts it was cut to

    def preempt_context(self, job: Job, now: float) -> Any:
        queue: int = self.s.queue.key_of(job.job_id)[0]
        return queue if queue < len(self.p.tiresias_thresholds_gpu_s) else None

    def may_preempt(self, facts: Any, context: Any) -> bool:
        return bool(facts > context)  # only jobs of a lower queue

    def tick_s(self) -> float:
        return self._lease_s()

    def next_timer(self, now: float) -> float | None:
        # Demotions matter only while something runs and something waits.
        return super().next_timer(now) if self.s.running and len(self.s.queue) else None

    def components(self, job: Job, now: float) -> dict[str, float]:
        return {
            "queue": float(self.running_key(job, now)[0]),
            "attained_gpu_s": self._attained(job, now),
        }


class TiresiasQos(Tiresias):
    """Tiresias inside strict class order: every job of a higher QoS class before any job
    of a lower one (and may preempt it); Tiresias' queues order jobs within a class. The
    baseline for class targets."""

    name = "tiresias-qos"

    def key(self, job: Job, ref_time: float) -> Key:
        return (self.p.qos_rank(job.qos), *super().key(job, ref_time))

    def running_key(self, job: Job, now: float) -> Key:
        return (self.p.qos_rank(job.qos), *super().running_key(job, now))

    def victim_facts(self, victim: Job, now: float) -> Any:
        if victim.running_for(now) < self._lease_s():
            return None
        return self.running_key(victim, now)[:2]  # (class rank, queue)

    def victim_order(self, victim: Job, facts: Any, now: float) -> Key:
        return (*facts, victim.submit_time)

    def preempt_context(self, job: Job, now: float) -> Any:
        rank, queue = self.s.queue.key_of(job.job_id)[:2]
        if queue == len(self.p.tiresias_thresholds_gpu_s) and not any(
            self.p.qos_rank(qos) > rank for qos in {r.qos for r in self.s.running.values()}
        ):
            return None  # the last queue of the lowest class running: nothing to preempt
        return (rank, queue)

    def components(self, job: Job, now: float) -> dict[str, float]:
        return {"qos_rank": float(self.p.qos_rank(job.qos)), **super().components(job, now)}


class SrptOracle(Policy):
    """Shortest remaining GPU-time first with TRUE durations: a reference bound only."""

    name = "srpt-oracle"
    preemptive = True
    refreshes = False

    def __init__(self, oracle: Oracle) -> None:
        self.oracle = oracle

    def _remaining(self, job: Job, now: float) -> float:
        return max(self.oracle(job.job_id) - job.executed_at(now), 0.0) * max(
            job.request.num_gpu, 0.01
        )

    def key(self, job: Job, ref_time: float) -> Key:
        return (self._remaining(job, ref_time),)

    def running_key(self, job: Job, now: float) -> Key:
        return (self._remaining(job, now),)

    def victim_facts(self, victim: Job, now: float) -> tuple[float, float]:
        # (remaining GPU time net of the restart, remaining GPU time)
        remaining = self._remaining(victim, now)
        return remaining - self.p.preemption_cost_s * victim.request.num_gpu, remaining

    def victims(self, running: Iterable[Job], now: float) -> list[tuple[Job, Any]]:
        # Policy.victims with each remaining time computed once: it is the order too
        cost_s, oracle = self.p.preemption_cost_s, self.oracle
        found = []
        for v in running:
            start = v.run_start  # _remaining, inlined: every running job, every cycle
            ran = v.executed_s + (now - start if start is not None else 0.0)
            gpus = v.request.num_gpu
            found.append((max(oracle(v.job_id) - ran, 0.0) * max(gpus, 0.01), v))
        found.sort(key=itemgetter(0), reverse=True)
        return [(v, (remaining - cost_s * v.request.num_gpu, remaining)) for remaining, v in found]

    def preemptable(self, victims: list[tuple[Job, Any]], context: float) -> list[Job]:
        # The victims come most remaining first, and a victim's net of its restart is at
        # most its remaining: the first with no more remaining than the blocked job's
        # ends the list.
        out = []
        for v, (net, remaining) in victims:
            if remaining <= context:
                break
            if net > context:
                out.append(v)
        return out

    def preempt_context(self, job: Job, now: float) -> float:
        return self._remaining(job, now)

    def may_preempt(self, facts: tuple[float, float], context: float) -> bool:
        return facts[0] > context


POLICIES: dict[str, type[Policy]] = {
    "fifo": Fifo,
    "backfill": Backfill,
    "tiresias": Tiresias,
    "tiresias-qos": TiresiasQos,
    "srpt-oracle": SrptOracle,
    "dynamic": Dynamic,
}
POWERSAVE = "+powersave"  # suffix: the policy under Slurm-style power saving


def policy_names() -> list[str]:
    """Every accepted policy name: the policies, and ``+powersave`` for those that do not
    manage power themselves."""
    return [*POLICIES, *(f"{n}{POWERSAVE}" for n, cls in POLICIES.items() if _saves(cls))]


def _saves(cls: type[Policy]) -> bool:
    return cls.power is Policy.power


def make_policy(name: str, oracle: Oracle | None = None) -> Policy:
    """A fresh policy by name; ``srpt-oracle`` needs the caller's ``oracle``; a name ending
    in ``+powersave`` runs that policy with ``SuspendIdle`` power saving."""
    base = name.removesuffix(POWERSAVE)
    if base not in POLICIES or (base != name and not _saves(POLICIES[base])):
        raise UnknownName("policy", name, policy_names())
    if base == "srpt-oracle":
        if oracle is None:
            raise NeedsOracle("srpt-oracle needs an oracle of true run times (simulation only)")
        policy: Policy = SrptOracle(oracle)
    else:
        policy = POLICIES[base]()
    if base != name:
        policy.power_saving = SuspendIdle()
        policy.name = name
    return policy


def live_policy(name: str) -> str:
    """``name``, if it names a policy a live cluster can run (``UnknownName`` with the
    accepted names, ``NeedsOracle`` for srpt-oracle): a settings validator."""
    make_policy(name)
    return name
