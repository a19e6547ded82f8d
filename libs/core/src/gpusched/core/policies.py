"""Scheduling policies by name. Each orders pending jobs and may preempt, reserve or park.

A policy never reads a job's true duration; ``srpt-oracle`` is handed a lookup by its
caller and is labelled a bound, not a production policy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpusched.core.errors import UnknownName
from gpusched.core.model import Decision, Job, ParkNode, PowerState, WakeNode
from gpusched.core.powersave import SuspendIdle, wake_for_waiting

if TYPE_CHECKING:
    from gpusched.core.scheduler import Scheduler

__all__ = ["POLICIES", "POWERSAVE", "Oracle", "Policy", "make_policy", "policy_names"]

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

    def victim_order(self, victim: Job, facts: Any, now: float) -> Key:
        """Victims are released largest key first (by default: lowest priority first)."""
        return self.running_key(victim, now)

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

    def preempt_context(self, job: Job, now: float) -> Any:
        rank, queue = self.s.queue.key_of(job.job_id)[:2]
        if queue == len(self.p.tiresias_thresholds_gpu_s) and not any(
            self.p.qos_rank(r.qos) > rank for r in self.s.running.values()
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

    def victim_facts(self, victim: Job, now: float) -> float:
        return self._remaining(victim, now) - self.p.preemption_cost_s * victim.request.num_gpu

    def preempt_context(self, job: Job, now: float) -> float:
        return self._remaining(job, now)

    def may_preempt(self, facts: float, context: float) -> bool:
        return facts > context


class Dynamic(Policy):
    """Ours: a priority rebuilt from live signals, with sparing preemption and parking.

    Rank = predicted rank time (inverse Gittins index from finished jobs of the same
    tenant and size) x GPUs, divided by a factor per QoS step, multiplied when the tenant
    is above its fair share, halved for every ``dynamic_aging_s`` of waiting. Lower runs
    first. Only a job blocked for ``dynamic_reserve_after_s`` gets a reservation (as
    Tiresias promotes only the starved): reservations hold GPUs idle against run-time
    predictions that, for heavy-tailed run times, are means far above the median.
    """

    name = "dynamic"
    preemptive = True
    reserves_head = True
    refreshes = True
    reads_outlook = True

    def bind(self, scheduler: Scheduler) -> None:
        super().bind(scheduler)
        self._qos_seen: dict[int, None] = {}
        self._qos_terms: dict[str, float] = {}
        self._fair_terms: dict[str, float] = {}

    def _qos_term(self, qos: str) -> float:
        term = self._qos_terms.get(qos)
        if term is None:
            rank = self.p.qos_rank(qos)
            if rank not in self._qos_seen:
                self._qos_seen[rank] = None
                self._qos_terms.clear()  # a new class shifts the steps of the others
            steps = sum(1 for seen in self._qos_seen if seen > rank)
            term = self._qos_terms[qos] = -steps * math.log(self.p.dynamic_qos_factor)
        return term

    def _fair_term(self, tenant: str) -> float:
        term = self._fair_terms.get(tenant)
        if term is None:
            over = max(self.s.fairshare.usage_ratio(tenant) - 1.0, 0.0)
            term = self._fair_terms[tenant] = math.log1p(self.p.dynamic_fairshare_weight * over)
        return term

    def begin_refresh(self, now: float) -> None:
        self._fair_terms.clear()

    def components(self, job: Job, now: float) -> dict[str, float]:
        gpus = max(job.request.num_gpu, 0.05)
        rank = self.s.predictor.rank_time(job, now) * gpus
        return {
            "log_rank_gpu_s": math.log(max(rank, 1.0)),
            "qos": self._qos_term(job.qos),
            "fair_share": self._fair_term(job.tenant),
            "aging": -math.log(2) * max(now - job.submit_time, 0.0) / self.p.dynamic_aging_s,
        }

    def key(self, job: Job, ref_time: float) -> Key:
        c = self.components(job, ref_time)
        return (sum(c.values()), job.submit_time)

    def running_key(self, job: Job, now: float) -> Key:
        c = self.components(job, now)
        return (c["log_rank_gpu_s"] + c["qos"] + c["fair_share"], job.submit_time)

    def victim_facts(self, victim: Job, now: float) -> tuple[int, float, float] | None:
        """(QoS rank, expected remaining GPU-seconds, restart cost in GPU-seconds)."""
        p = self.p
        if victim.running_for(now) < p.dynamic_min_run_s:
            return None
        gpus = max(victim.request.num_gpu, 0.05)
        left = self.s.predictor.expected_remaining(victim, now) * gpus
        return p.qos_rank(victim.qos), left, p.preemption_cost_s * gpus

    def victim_order(self, victim: Job, facts: tuple[int, float, float], now: float) -> Key:
        return facts[:2]  # lowest class first, then the most work left

    def preempt_context(self, job: Job, now: float) -> tuple[int, float] | None:
        """(QoS rank, what the victim must exceed), once the job has waited long enough."""
        p = self.p
        if now - job.pending_since < p.dynamic_min_wait_s:
            return None
        gpus = max(job.request.num_gpu, 0.05)
        left = self.s.predictor.expected_remaining(job, now) * gpus
        return p.qos_rank(job.qos), p.dynamic_preempt_margin * left

    def may_preempt(self, facts: tuple[int, float, float], context: tuple[int, float]) -> bool:
        # Never a higher class for a lower one; a lower class counts qos_factor times more.
        victim_rank, victim_left, cost = facts
        job_rank, threshold = context
        if victim_rank < job_rank:
            return False
        boost = self.p.dynamic_qos_factor if victim_rank > job_rank else 1.0
        return victim_left * boost > threshold + cost

    def may_reserve(self, job: Job, now: float) -> bool:
        # Only a starving job: reservations hold GPUs idle, aging and preemption serve
        # the rest.
        return now - job.submit_time >= self.p.dynamic_reserve_after_s

    def tick_s(self) -> float:
        return self.p.dynamic_tick_s

    def power(self, now: float) -> list[Decision]:
        """Wake what waiting jobs can use; keep on what runs and a headroom; park the rest
        after a while."""
        if not self.p.dynamic_energy_aware:
            return []
        waking = wake_for_waiting(self.s, now)
        woken = {d.node_id for d in waking}
        decisions: list[Decision] = list(waking)
        held = self.s.reserved_nodes()
        state = self.s.state
        allocated = 0.0
        capacity = 0.0
        idle_on: list[tuple[float, str, int]] = []
        parked: list[tuple[str, int]] = []
        for node in state.nodes.values():
            n = node.spec.num_gpus
            if node.power is PowerState.PARKED and node.node_id not in woken:
                parked.append((node.node_id, n))
                continue
            capacity += n
            allocated += n - node.free_gpu if node.power is PowerState.ON else 0.0
            if node.power is PowerState.ON and node.idle and node.node_id not in held:
                idle_on.append((self.s.idle_since.get(node.node_id, now), node.node_id, n))
        need, keep, park_after = self._need(now, allocated, allocated)
        if capacity < need:
            for node_id, n in parked:
                if capacity >= need:
                    break
                why = f"headroom: {need:.0f} GPUs > {capacity:.0f} on"
                decisions.append(WakeNode(node_id, why))
                capacity += n
            return decisions
        for since, node_id, n in sorted(idle_on, reverse=True):
            if capacity - n < keep or now - since < park_after:
                continue
            decisions.append(ParkNode(node_id, f"idle since {since:.0f}; {capacity:.0f} on"))
            capacity -= n
        return decisions

    def _need(self, now: float, demand: float, allocated: float) -> tuple[float, float, float]:
        """(GPUs to have on now, GPUs to keep on when parking, idle time before parking).

        Waiting jobs are served by ``wake_for_waiting`` (nodes they can use); ``demand``
        is what runs. Without a forecast: that demand plus the fixed headroom, and a node idle for
        ``dynamic_park_after_s`` is parked. A forecast (the scheduler's ``outlook``) adds
        to that, never takes away: the rise predicted before a node woken now would be
        ready (wake ahead), the predicted arrivals of the high classes in that time
        (their own headroom), and a node is kept when the rise predicted over the
        look-ahead would need it; in exchange an idle node the forecast does not need is
        parked sooner (``dynamic_forecast_park_after_s``).
        """
        p = self.p
        fixed = demand + p.dynamic_headroom_gpus + p.dynamic_headroom_frac * allocated
        outlook = self.s.outlook
        if outlook is None:
            return fixed, fixed, p.dynamic_park_after_s
        lead = self.s.power.wake_latency_s + p.dynamic_tick_s
        rise = outlook.demand_rise(now, lead)
        later = outlook.demand_rise(now, max(p.dynamic_forecast_lookahead_s, lead))
        if rise is None or later is None:
            return fixed, fixed, p.dynamic_park_after_s  # no forecast yet
        high = sum(outlook.arrivals(now, lead, c) or 0.0 for c in p.dynamic_headroom_classes)
        need = fixed + max(rise, 0.0) + high
        keep = max(need, fixed + max(later, 0.0) + high)
        return need, keep, p.dynamic_forecast_park_after_s


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
            raise ValueError("srpt-oracle needs an oracle of true run times (simulation only)")
        policy: Policy = SrptOracle(oracle)
    else:
        policy = POLICIES[base]()
    if base != name:
        policy.power_saving = SuspendIdle()
        policy.name = name
    return policy
