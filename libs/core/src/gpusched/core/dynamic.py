"""``dynamic``: our policy, a priority rebuilt from live signals."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpusched.core.model import Decision, Job, ParkNode, PowerState, WakeNode
from gpusched.core.policy import Key, Policy
from gpusched.core.powersave import next_idle_deadline, wake_for_waiting

if TYPE_CHECKING:
    from gpusched.core.scheduler import Scheduler

__all__ = ["Dynamic"]


class Dynamic(Policy):
    """Ours: a priority rebuilt from live signals, with sparing preemption and parking.

    Rank = predicted rank time (inverse Gittins index from finished jobs of the same
    tenant and size) x GPUs, divided by a factor per QoS step, multiplied when the tenant
    is above its fair share, halved for every ``dynamic_aging_s`` of waiting (and, with
    ``dynamic_aging_slowdown`` k > 0, divided by 1 + wait / (k x rank time)). Lower runs
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
        time = self.s.predictor.rank_time(job, now)
        wait = max(now - job.submit_time, 0.0)
        aging = -math.log(2) * wait / self.p.dynamic_aging_s
        if self.p.dynamic_aging_slowdown > 0:
            aging -= math.log1p(wait / (self.p.dynamic_aging_slowdown * max(time, 1.0)))
        return {
            "log_rank_gpu_s": math.log(max(time * gpus, 1.0)),
            "qos": self._qos_term(job.qos),
            "fair_share": self._fair_term(job.tenant),
            "aging": aging,
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

    def power_timer(self, now: float) -> float | None:
        """When an idle node may next be parked (its park-after time is reached)."""
        if not self.p.dynamic_energy_aware:
            return None
        after = self.p.dynamic_park_after_s
        if self.s.outlook is not None:
            after = min(after, self.p.dynamic_forecast_park_after_s)
        return next_idle_deadline(self.s, now, after)

    def power(self, now: float) -> list[Decision]:
        """Wake what waiting jobs can use; keep on what runs and a headroom; park the rest
        after a while."""
        if not self.p.dynamic_energy_aware:
            return []
        needs = wake_for_waiting(self.s, now)
        woken = {d.node_id for d in needs.wake}
        decisions: list[Decision] = list(needs.wake)
        held = self.s.reserved_nodes() | needs.held
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
        need, keep, park_after = self._need(now, allocated)
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

    def _need(self, now: float, allocated: float) -> tuple[float, float, float]:
        """(GPUs to have on now, GPUs to keep on when parking, idle time before parking).

        Waiting jobs are served by ``wake_for_waiting`` (nodes they can use); the demand
        here is what runs (``allocated``). Without a forecast: that plus the fixed
        headroom, and a node idle for ``dynamic_park_after_s`` is parked. A forecast (the
        scheduler's ``outlook``) adds to that, never takes away: the rise predicted before
        a node woken now would be ready (wake ahead), the predicted arrivals of the high
        classes in that time (their own headroom), and a node is kept when the rise
        predicted over the look-ahead would need it; in exchange an idle node the forecast
        does not need is parked sooner (``dynamic_forecast_park_after_s``).
        """
        p = self.p
        fixed = allocated + p.dynamic_headroom_gpus + p.dynamic_headroom_frac * allocated
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
