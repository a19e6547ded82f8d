"""``dynamic``: our policy, a priority rebuilt from live signals."""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING, Any

from gpusched.core.model import Decision, Job, ParkNode, PowerState, WakeNode
from gpusched.core.policy import Key, Policy
from gpusched.core.powersave import next_idle_deadline, wake_for_waiting
from gpusched.core.runtime import SortedWindow

if TYPE_CHECKING:
    from collections.abc import Iterable

    from gpusched.core.cluster import NodeState
    from gpusched.core.scheduler import Scheduler

__all__ = ["Dynamic"]

# a victim's facts: (log rank, preemption bar as a factor, restart cost in GPU-s, rank in
# GPU-s: exp of the first, kept since every blocked job compares it)
Facts = tuple[float, float, float, float]

GUARD_WINDOW = 1000  # finished jobs whose waits set the tail guard's limit
GUARD_MIN_SAMPLES = 20
BURST_REFRESH_S = 3600.0  # how often the headroom's burst quantile is read again


def _waited(job: Job, now: float) -> float:
    """Time ``job`` has spent pending since submission (not running)."""
    return max(now - job.submit_time - job.executed_at(now), 0.0)


def _gpus(job: Job) -> float:
    """The GPUs a job's rank and restart cost count (a share or none: at least 0.05)."""
    return max(job.request.num_gpu, 0.05)


def _victim_rank(victim: tuple[Job, Facts]) -> float:
    return victim[1][0]


def _log_gpu_s(rank_time: float, gpus: float) -> float:
    """A rank in log GPU-seconds (at least 1 GPU-s)."""
    return math.log(max(rank_time * gpus, 1.0))


class Dynamic(Policy):
    """Ours: a Gittins-index order with preemption that must pay, a guard for the tail,
    and parking.

    - **Order**: rank = the job's inverse Gittins index from the finished jobs of its
      GPU-count class, given the time it has run (``RuntimePredictor.rank_time``), times
      its GPUs; divided by ``dynamic_qos_factor`` per QoS class step and multiplied when
      the tenant is above its fair share. Lower runs first. No aging by waited time: it
      turned the order into FIFO on heavily loaded clusters.
    - **Preemption**: a waiting job preempts a running one (that has run at least the
      restart cost) only when the victim's rank exceeds the job's times
      ``dynamic_preempt_margin``, plus the GPU time the restart costs (divided by the
      victim's class step, as its rank is: a ``high`` job preempts a ``high`` one as a
      ``normal`` job does a ``normal`` one). The same rank on both sides, and it
      depends on the run time and GPUs only, never on how often the victim was
      preempted before (what has been lost is lost; the Gittins order needs no
      history). The margin is the hysteresis: after A preempts B, B can take its
      GPUs back only once A's rank has grown past B's times the margin, so A's rank
      must grow by the margin squared between two swaps. A job preempted again and
      again is the tail guard's to protect. A blocked job preempts only once it has
      waited ``dynamic_preempt_wait`` restart costs (ski rental: GPUs that free up
      meanwhile serve it with no restart lost), unless its class has headroom of its
      own (``dynamic_headroom_classes``).
    - **Tail guard**: the oldest pending jobs that have waited longer than the
      ``dynamic_guard_quantile`` of finished jobs' waits are guarded until they end, at
      most ``dynamic_guard_jobs`` of them holding at most ``dynamic_guard_gpu_frac`` of
      the cluster's GPUs (at least one job): they rank first in their class (oldest
      first), may preempt any unguarded job of their class or below, and are never
      preempted. Bounded, so an index order cannot starve a large gang, and the mean
      loses little; bounded in GPUs too, so on a small cluster the guarded jobs cannot
      hold most of it.
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
        self._waits = SortedWindow(GUARD_WINDOW)  # waits of recently finished jobs
        self.guarded: set[str] = set()
        # per running job: (its rank time, the class terms' epoch, its fair-share term,
        # its victim facts); the epoch changes whenever a class's term may change
        self._facts: dict[str, tuple[float, int, float, Facts]] = {}
        self._qos_epoch = 0
        self._burst_at = (-math.inf, 0.0)  # when the burst quantile was read, and it

    def _qos_term(self, qos: str) -> float:
        term = self._qos_terms.get(qos)
        if term is None:
            rank = self.p.qos_rank(qos)
            if rank not in self._qos_seen:
                self._qos_seen[rank] = None
                self._qos_terms.clear()  # a new class shifts the steps of the others
                self._qos_epoch += 1
            steps = sum(1 for seen in self._qos_seen if seen > rank)
            term = self._qos_terms[qos] = -steps * math.log(self.p.dynamic_qos_factor)
        return term

    def _fair_term(self, tenant: str) -> float:
        term = self._fair_terms.get(tenant)
        if term is None:
            over = max(self.s.fairshare.usage_ratio(tenant) - 1.0, 0.0)
            term = self._fair_terms[tenant] = math.log1p(self.p.dynamic_fairshare_weight * over)
        return term

    def finished(self, job: Job, now: float) -> None:
        self.guarded.discard(job.job_id)
        self._facts.pop(job.job_id, None)
        self._waits.add(_waited(job, now))

    def begin_refresh(self, now: float) -> None:
        self._fair_terms.clear()
        self._guard(now)

    def _guard(self, now: float) -> None:
        """Guard the oldest pending jobs that have waited past the quantile, up to the
        bounds: ``dynamic_guard_jobs`` jobs holding at most ``dynamic_guard_gpu_frac`` of
        the cluster's GPUs, at least one job (jobs stay guarded until they end)."""
        live = self.s.queue
        self.guarded = {j for j in self.guarded if j in live or j in self.s.running}
        room = self.p.dynamic_guard_jobs - len(self.guarded)
        limit = self._waits.quantile(self.p.dynamic_guard_quantile)
        if room <= 0 or limit is None or len(self._waits.sorted_) < GUARD_MIN_SAMPLES:
            return
        jobs = (self.s.jobs[j] for j in live.ids() if j not in self.guarded)
        late = [(j.submit_time, j.job_id) for j in jobs if _waited(j, now) > limit]
        budget = self.p.dynamic_guard_gpu_frac * self.s.state.total_gpus
        held = sum(self.s.jobs[j].request.num_gpu for j in self.guarded)
        for _, job_id in heapq.nsmallest(room, late):
            gpus = self.s.jobs[job_id].request.num_gpu
            if self.guarded and held + gpus > budget:
                break
            self.guarded.add(job_id)
            held += gpus

    def components(self, job: Job, now: float) -> dict[str, float]:
        rank, fair = self._log_rank(job, now), self._fair_term(job.tenant)
        return {
            "log_rank_gpu_s": rank,
            "qos": self._qos_term(job.qos),
            "fair_share": fair,
            # a guarded job ranks as 1 GPU-s: first in its class, oldest first
            "guard": -(rank + fair) if job.job_id in self.guarded else 0.0,
        }

    def _log_rank(self, job: Job, now: float) -> float:
        return _log_gpu_s(self.s.predictor.rank_time(job, now), _gpus(job))

    def key(self, job: Job, ref_time: float) -> Key:
        return self.keys([job], ref_time)[0]

    def keys(self, jobs: list[Job], ref_time: float) -> list[Key]:
        # the sum of ``components`` for each job, without building them (every pending
        # job's key is computed at every refresh), with the rank times in one call, asked
        # in queue order (the predictor's answers depend on what it was asked before)
        guarded = self.guarded
        times = iter(
            self.s.predictor.rank_times([j for j in jobs if j.job_id not in guarded], ref_time)
        )
        out: list[Key] = []
        for job in jobs:
            qos = self._qos_term(job.qos)
            if job.job_id in guarded:
                out.append((qos, job.submit_time))
                continue
            rank = _log_gpu_s(next(times), _gpus(job))
            out.append((rank + qos + self._fair_term(job.tenant), job.submit_time))
        return out

    def running_key(self, job: Job, now: float) -> Key:
        return self.key(job, now)

    def victim_facts(self, victim: Job, now: float) -> Facts | None:
        """(log rank, the bar its rank must clear as a factor, restart cost in GPU-s, the
        rank in GPU-s), or None while the victim is guarded or has not yet run for its
        restart cost."""
        found = self.victims((victim,), now)
        return found[0][1] if found else None

    def victim_order(self, victim: Job, facts: Facts, now: float) -> Key:
        return facts[:1]  # the highest rank first

    def victims(self, running: Iterable[Job], now: float) -> list[tuple[Job, Any]]:
        # Policy.victims for every running job at once (every cycle): each victim's
        # facts, highest rank (victim_order) first. A victim whose rank time and terms
        # are those of its last facts keeps them (most do, from one cycle to the next).
        p, guarded, memo, fair_terms = self.p, self.guarded, self._facts, self._fair_terms
        cost_s = p.preemption_cost_s
        eligible = [  # those that have run for the restart cost (running_for, inlined)
            v
            for v in running
            if (start := v.run_start) is not None
            and now - start >= cost_s
            and v.job_id not in guarded
        ]
        times = self.s.predictor.rank_times(eligible, now)
        found = []
        for victim, time in zip(eligible, times, strict=True):
            fair = fair_terms.get(victim.tenant)
            if fair is None:
                fair = self._fair_term(victim.tenant)
            seen = memo.get(victim.job_id)
            epoch = self._qos_epoch  # a class first seen in this loop moves it
            if seen is not None and seen[0] == time and seen[1] == epoch and seen[2] == fair:
                found.append((victim, seen[3]))
                continue
            gpus = _gpus(victim)
            # running_key's first term, as key sums it (the victim is not guarded)
            qos = self._qos_term(victim.qos)
            rank = _log_gpu_s(time, gpus) + qos + fair
            # the restart's GPU time in the units of the victim's rank (its class step),
            # so two jobs of one class weigh it as two normal jobs do
            cost = cost_s * gpus * math.exp(qos)
            facts = (rank, p.dynamic_preempt_margin, cost, math.exp(rank))
            memo[victim.job_id] = (time, self._qos_epoch, fair, facts)
            found.append((victim, facts))
        found.sort(key=_victim_rank, reverse=True)
        return found

    def preemptable(self, victims: list[tuple[Job, Any]], context: float) -> list[Job]:
        # may_preempt for each victim, with the blocked job's term computed once. Every
        # victim has the same bar and a cost >= 0, and they come highest rank first: the
        # first whose rank is at most the bar times the blocked job's ends the list.
        blocked = math.exp(context)
        out = []
        for v, (_, bar, cost, rank) in victims:
            least = bar * blocked
            if rank <= least:
                break
            if rank > least + cost:
                out.append(v)
        return out

    def preempt_context(self, job: Job, now: float) -> float | None:
        p = self.p
        patience = p.dynamic_preempt_wait * p.preemption_cost_s
        if job.qos not in p.dynamic_headroom_classes:
            waited = _waited(job, now)
            if waited < patience:  # not yet: GPUs that free up meanwhile cost no restart
                self._recheck = min(self._recheck, now + patience - waited)
                return None
        return float(self.s.queue.key_of(job.job_id)[0])

    def may_preempt(self, facts: Facts, context: float) -> bool:
        # rank_v > bar x rank_j + the restart's GPU time (ranks in GPU-s, keys in logs)
        _, bar, cost, rank = facts
        return rank > bar * math.exp(context) + cost

    @property
    def consolidates(self) -> bool:  # type: ignore[override]
        return self.p.dynamic_energy_aware and self.p.dynamic_consolidate

    def worth_moving(self, jobs: list[Job], node: NodeState, now: float) -> bool:
        """Whether emptying ``node`` saves more energy than its jobs' restarts cost: once
        parked (after its park delay) until the last of its jobs is expected to end, the
        node draws parked instead of host busy plus its idle GPUs; the cost is the
        restart cost's GPU-seconds redone at busy power. Guarded jobs and jobs that have
        not yet run for the restart cost are not moved."""
        cost_s, guarded = self.p.preemption_cost_s, self.guarded
        if any(j.job_id in guarded or j.running_for(now) < cost_s for j in jobs):
            return False
        power = self.s.power
        host, gpu = power.host(node.spec.num_gpus), power.gpu(node.spec.gpu_model)
        remaining = max(self.s.predictor.expected_remaining(j, now) for j in jobs)
        saved_w = host.host_busy_w + node.spec.num_gpus * gpu.idle_w - host.parked_w
        redone_j = cost_s * gpu.busy_w * sum(j.request.num_gpu for j in jobs)
        return saved_w * (remaining - self._park_after()) > redone_j

    def consolidation_budget(self, now: float) -> float:
        """What is on beyond the GPUs the power step keeps on, less the idle nodes (they
        are parked first): emptying more would only move jobs onto a node kept on."""
        capacity = allocated = idle = 0.0
        for node in self.s.state.nodes.values():
            if node.power is PowerState.PARKED:
                continue
            n = node.spec.num_gpus
            capacity += n
            if node.power is PowerState.ON:
                allocated += n - node.free_gpu
                idle += n if node.idle else 0.0
        _, keep, _ = self._need(now, allocated)
        return capacity - keep - idle

    def _park_after(self) -> float:
        """How long a node stays idle before it is parked."""
        if self.s.outlook is not None:
            return min(self.p.dynamic_park_after_s, self.p.dynamic_forecast_park_after_s)
        return self.p.dynamic_park_after_s

    def waits_for_wake(self, job: Job) -> bool:
        # The classes with headroom of their own are not made to wait for a wake: they
        # preempt as before (their waits are a target against tiresias-qos, which never
        # parks).
        return job.qos not in self.p.dynamic_headroom_classes

    def reserve_depth(self) -> int:
        # with no reservation ever (inf), a cycle need not scan on for one
        return 0 if math.isinf(self.p.dynamic_reserve_after_s) else super().reserve_depth()

    def may_reserve(self, job: Job, now: float) -> bool:
        # Only a starving job: reservations hold GPUs idle, aging and preemption serve
        # the rest.
        return now - job.submit_time >= self.p.dynamic_reserve_after_s

    def tick_s(self) -> float:
        return self.p.dynamic_tick_s

    _recheck = math.inf  # when a blocked job's patience ends (it may preempt then)

    def timer_due(self, now: float) -> bool:
        tick = super().timer_due(now)
        if now < self._recheck:
            return tick
        self._recheck = math.inf
        return True

    def next_timer(self, now: float) -> float | None:
        return min(self._next_tick, self._recheck)

    def power_timer(self, now: float) -> float | None:
        """When an idle node may next be parked (its park-after time is reached)."""
        if not self.p.dynamic_energy_aware:
            return None
        return next_idle_deadline(self.s, now, self._park_after())

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

    def _burst(self, now: float, lead: float) -> float:
        """The ``dynamic_forecast_burst_q`` quantile of the demand's realised rises over
        ``lead``, read again every hour of scheduler time (0 before a day of history)."""
        q = self.p.dynamic_forecast_burst_q
        if q <= 0.0:
            return 0.0
        if now >= self._burst_at[0] + BURST_REFRESH_S:
            self._burst_at = (now, self.s.demand.rise_quantile(now, lead, q) or 0.0)
        return self._burst_at[1]

    def _need(self, now: float, allocated: float) -> tuple[float, float, float]:
        """(GPUs to have on now, GPUs to keep on when parking, idle time before parking).

        Waiting jobs are served by ``wake_for_waiting`` (nodes they can use), and a job
        that a parked node can hold waits for its wake rather than preempt (the
        scheduler's admit step); the demand here is what runs (``allocated``). Without a
        forecast (or before its first fit): that plus the fixed headroom, and a node idle
        for ``dynamic_park_after_s`` is parked. A forecast (the scheduler's ``outlook``)
        takes the fixed headroom's place: what runs plus the rise predicted before a
        node woken now would be ready (wake ahead), or the ``dynamic_forecast_burst_q``
        quantile of the rises seen over that lead if larger (the bursts within a
        forecast step), plus the predicted arrivals of the high classes in that time
        (their own headroom), and at least the fixed headroom
        within ``dynamic_forecast_lookahead_s`` after a consolidation move (the free GPUs
        of partly used nodes, which it takes away, had served arrivals); a node is kept
        when the rise predicted over the look-ahead would need it, and an idle node it
        does not need is parked after ``dynamic_forecast_park_after_s``.
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
        need = allocated + max(rise, self._burst(now, lead), 0.0) + high
        if self.consolidates and now - self.s.migrated_at <= p.dynamic_forecast_lookahead_s:
            # Consolidation takes away the free GPUs of partly used nodes, which had
            # served arrivals the forecast misses: for the look-ahead after a move, the
            # fixed headroom stays under the forecast's.
            need = max(need, fixed)
        keep = max(need, allocated + max(later, 0.0) + high)
        return need, keep, p.dynamic_forecast_park_after_s
