"""Declarative table tests of the scheduling core: nodes, jobs, expected decisions."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpusched.core import (
    MOVE_REASON,
    Decision,
    Job,
    NodeSpec,
    Params,
    ParkNode,
    Place,
    Preempt,
    RecordedJob,
    Scheduler,
    UnknownName,
    make_placement,
    make_policy,
)
from gpusched.core.policy import Policy
from tests.core_builders import job, node


@dataclass
class Case:
    name: str
    policy: str
    nodes: list[NodeSpec]
    jobs: list[Job]
    placed: dict[str, tuple[str, ...]]  # job -> nodes it must be placed on
    pending: list[str] = field(default_factory=list)
    placement: str = "bestfit"


CASES = [
    Case(
        "fifo blocks behind a head that does not fit",
        "fifo",
        [node("a", 8)],
        [job("big", 16, 0), job("small", 1, 1)],
        {},
        ["big", "small"],
    ),
    Case(
        "backfill starts a small job the blocked head cannot use",
        "backfill",
        [node("a", 4), node("b", 4)],
        [job("run", 3, 0), job("head", 4, 1), job("small", 1, 2)],
        {"run": ("a",), "head": ("b",), "small": ("a",)},
    ),
    Case(
        "a gang fits one node or waits; it is never split below node size",
        "fifo",
        [node("a", 4), node("b", 4)],
        [job("x", 2, 0), job("y", 2, 0), job("z", 4, 1)],
        {"x": ("a",), "y": ("a",), "z": ("b",)},
    ),
    Case(
        "a gang larger than a node spans whole nodes",
        "fifo",
        [node("a", 8), node("b", 8), node("c", 8)],
        [job("g", 16, 0)],
        {"g": ("a", "b")},
    ),
    Case(
        "GPU-model constraints are honoured",
        "fifo",
        [node("v", 8, "V100"), node("t", 4, "T4")],
        [job("needs-t4", 2, 0, models="T4"), job("either", 1, 1, models="T4|V100")],
        {"needs-t4": ("t",), "either": ("t",)},
    ),
    Case(
        "fractional shares pack onto one GPU under bestfit",
        "fifo",
        [node("a", 2), node("b", 2)],
        [job("f1", 0.5, 0), job("f2", 0.4, 1)],
        {"f1": ("a",), "f2": ("a",)},
    ),
    Case(
        "spread puts jobs on the emptiest node",
        "fifo",
        [node("a", 4), node("b", 4)],
        [job("s1", 1, 0), job("s2", 1, 1)],
        {"s1": ("a",), "s2": ("b",)},
        placement="spread",
    ),
    Case(
        "CPU and memory limit placement",
        "fifo",
        [node("a", 8, cpu=4000), node("b", 8, cpu=64000)],
        [job("cpu-heavy", 1, 0, cpu=8000)],
        {"cpu-heavy": ("b",)},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_table(case: Case) -> None:
    sched = Scheduler(case.nodes, make_policy(case.policy), make_placement(case.placement))
    placed: dict[str, tuple[str, ...]] = {}
    for j in case.jobs:
        sched.submit(j, j.submit_time)
        for d in sched.cycle(j.submit_time).decisions:
            if isinstance(d, Place):
                placed[d.job_id] = tuple(a.node_id for a in d.allocations)
    assert placed == case.placed
    assert sorted(sched.queue.ids()) == sorted(case.pending)


def test_tiresias_preempts_a_job_that_attained_more_service() -> None:
    params = Params(
        tiresias_thresholds_gpu_s=(100.0,), tiresias_lease_s=10.0, preemption_cost_s=10.0
    )
    sched = Scheduler([node("a", 4)], make_policy("tiresias"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("new", 4, 50), 50)
    decisions = sched.cycle(50).decisions  # old attained 200 GPU-s: lower queue
    assert [type(d) for d in decisions] == [Preempt, Place]
    assert [d.job_id for d in decisions] == ["old", "new"]


def test_tiresias_respects_its_lease() -> None:
    params = Params(tiresias_thresholds_gpu_s=(100.0,), tiresias_lease_s=1000.0)
    sched = Scheduler([node("a", 4)], make_policy("tiresias"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("new", 4, 50), 50)
    assert sched.cycle(50).decisions == []


def test_srpt_oracle_runs_shortest_first() -> None:
    durations = {"long": 1000.0, "short": 10.0}
    sched = Scheduler(
        [node("a", 1)],
        make_policy("srpt-oracle", oracle=durations.__getitem__),
        make_placement("bestfit"),
    )
    sched.submit(job("long", 1, 0), 0)
    sched.submit(job("short", 1, 0), 0)
    (d,) = sched.cycle(0).decisions
    assert isinstance(d, Place)
    assert d.job_id == "short"


def test_dynamic_puts_high_class_first() -> None:
    sched = Scheduler([node("a", 1)], make_policy("dynamic"), make_placement("bestfit"))
    sched.submit(job("n", 1, 0, qos="normal"), 0)
    sched.submit(job("h", 1, 0, qos="high"), 0)
    placed = [d.job_id for d in sched.cycle(0).decisions if isinstance(d, Place)]
    assert placed == ["h"]


def test_dynamic_parks_idle_nodes_and_wakes_them_for_demand() -> None:
    params = Params(dynamic_headroom_gpus=0, dynamic_headroom_frac=0, dynamic_park_after_s=60)
    nodes = [node(f"n{i}", 8) for i in range(4)]
    sched = Scheduler(nodes, make_policy("dynamic"), make_placement("bestfit"), params)
    parked = [d.node_id for d in sched.cycle(100).decisions if isinstance(d, ParkNode)]
    assert len(parked) == 4
    sched.submit(job("j", 8, 200), 200)
    woken = [d for d in sched.cycle(200).decisions if type(d).__name__ == "WakeNode"]
    assert len(woken) == 1
    sched.node_ready(woken[0].node_id, 380)
    placed = [d for d in sched.cycle(380).decisions if isinstance(d, Place)]
    assert [p.job_id for p in placed] == ["j"]


def test_unknown_names_list_the_accepted_ones() -> None:
    with pytest.raises(UnknownName, match=r"accepted: backfill, backfill\+powersave, dynamic"):
        make_policy("lottery")
    with pytest.raises(UnknownName, match="bestfit, fgd, spread"):
        make_placement("random")
    with pytest.raises(UnknownName, match="parameter"):
        Params().with_values({"no_such_weight": 1})


def test_srpt_oracle_needs_an_oracle() -> None:
    with pytest.raises(ValueError, match="oracle"):
        make_policy("srpt-oracle")


def test_every_pending_job_gets_a_reason() -> None:
    sched = Scheduler([node("a", 8)], make_policy("backfill"), make_placement("bestfit"))
    sched.submit(job("run", 8, 0), 0)
    sched.cycle(0)
    for j in (job("wait8", 8, 1), job("wait1", 1, 2), job("never", 1, 3, models="H100")):
        sched.submit(j, j.submit_time)
    reasons = sched.cycle(5, explain_pending=True).pending
    assert set(reasons) == {"wait8", "wait1", "never"}
    assert reasons["never"].category == "never"
    assert "H100" in reasons["never"].message
    assert "8 x any GPU" in reasons["wait8"].message
    # the head of backfill's order has the node reserved: its start is the reservation's;
    # the next waits for the node to free up once the running job and the head have run
    # as predicted (the queue played forward)
    head = sched.reservations["wait1"]
    assert reasons["wait1"].category == "reservation"
    assert reasons["wait1"].start_estimate == head.start > 5
    assert reasons["wait8"].category == "capacity"
    predict = sched.predictor.expected_remaining
    then = 5 + predict(sched.jobs["run"], 5) + predict(sched.jobs["wait1"], 5)
    assert reasons["wait8"].start_estimate == pytest.approx(then)
    assert reasons["never"].start_estimate is None


def _learned(sched: Scheduler) -> None:
    """History: 1-GPU jobs of ~10 h and 2-GPU jobs of ~5 min (GPU-count classes)."""
    for i in range(10):
        sched.predictor.observe(job(f"hl{i}", 1), 36000 + i)
        sched.predictor.observe(job(f"hs{i}", 2), 300 + i)


def _two_long_runners(params: Params) -> Scheduler:
    """``dynamic`` on one 2-GPU node, with the history of ``_learned``, running two 1-GPU
    jobs ("runner", "other") since 0."""
    sched = Scheduler([node("a", 2)], make_policy("dynamic"), make_placement("bestfit"), params)
    _learned(sched)
    sched.submit(job("runner", 1, 0), 0)
    sched.submit(job("other", 1, 0), 0)
    sched.cycle(0)
    return sched


def test_dynamic_preempts_only_when_it_pays() -> None:
    params = Params(dynamic_energy_aware=False)
    sched = _two_long_runners(params)
    sched.submit(job("quick", 2, 50), 50)
    assert sched.cycle(55).decisions == []  # the runners' lease (the restart cost) holds
    decisions = sched.cycle(300).decisions  # the next timer tick (dynamic_tick_s)
    assert sorted((type(d).__name__, d.job_id) for d in decisions) == [
        ("Place", "quick"),
        ("Preempt", "other"),
        ("Preempt", "runner"),
    ]
    # The other way round it does not pay: a long job never preempts a short one.
    sched2 = Scheduler([node("a", 2)], make_policy("dynamic"), make_placement("bestfit"), params)
    _learned(sched2)
    sched2.submit(job("quick", 2, 0), 0)
    sched2.cycle(0)
    sched2.submit(job("runner", 1, 50), 50)
    assert sched2.cycle(300).decisions == []


@pytest.mark.parametrize("qos", ["normal", "high"])
def test_dynamic_preempts_within_a_class_as_within_any(qos: str) -> None:
    """The restart cost is weighed in the units of the victim's rank: within the high
    class (its ranks divided by the class step) a quick job preempts long runners as it
    does within the normal class. It did not: the cost, in plain GPU-s, dwarfed every
    high rank, so a high gang waited behind high jobs that had run for days."""
    params = Params(dynamic_energy_aware=False)
    sched = Scheduler(
        [node("a", 2), node("b", 1, model="A100")],
        make_policy("dynamic"),
        make_placement("bestfit"),
        params,
    )
    _learned(sched)
    sched.submit(job("bystander", 1, 0, models="A100"), 0)  # both classes are seen
    for name in ("runner", "other"):
        sched.submit(job(name, 1, 0, models="V100", qos=qos), 0)
    sched.cycle(0)
    assert sorted(sched.running) == ["bystander", "other", "runner"]
    sched.submit(job("quick", 2, 50000, qos=qos), 50000)
    patience = params.dynamic_preempt_wait * params.preemption_cost_s
    decisions = sched.cycle(50000).decisions + sched.cycle(50000 + patience).decisions
    assert sorted((type(d).__name__, d.job_id) for d in decisions) == [
        ("Place", "quick"),
        ("Preempt", "other"),
        ("Preempt", "runner"),
    ]


@pytest.mark.parametrize("qos", ["normal", "high"])
def test_dynamic_waits_a_restart_cost_before_it_preempts(qos: str) -> None:
    """Rent before buying: a blocked job preempts only once it has waited the restart
    cost (GPUs that free up meanwhile would serve it with no restart lost); a class with
    headroom of its own (high) preempts at once."""
    params = Params(dynamic_energy_aware=False)
    sched = _two_long_runners(params)
    sched.submit(job("quick", 2, 1000, qos=qos), 1000)  # the runners are past their lease
    patience = params.dynamic_preempt_wait * params.preemption_cost_s
    soon = sched.cycle(1000 + patience - 1).decisions
    if qos == "normal":  # the scheduler asks to cycle again when the patience ends
        assert sched.next_wakeup(1000 + patience - 1) == 1000 + patience
    later = sched.cycle(1000 + patience).decisions
    preempted = sorted(d.job_id for d in soon + later if isinstance(d, Preempt))
    assert preempted == ["other", "runner"]
    assert bool(soon) is (qos == "high")


@pytest.mark.parametrize("name", ["tiresias", "tiresias-qos", "srpt-oracle", "dynamic"])
def test_a_policys_victim_list_is_the_generic_one(name: str) -> None:
    """A policy may list its victims in one pass (it is asked every cycle); the list must
    be what ``victim_facts`` and ``victim_order`` define: the same jobs, facts and order."""
    params = Params(dynamic_energy_aware=False, tiresias_thresholds_gpu_s=(3600.0,))
    durations = {f"r{i}": 1000.0 * (i + 1) for i in range(8)}
    policy = make_policy(name, oracle=durations.__getitem__)
    sched = Scheduler([node("a", 4), node("b", 4)], policy, make_placement("bestfit"), params)
    _learned(sched)
    for i, job_id in enumerate(durations):
        qos = "high" if i % 3 == 0 else "normal"
        sched.submit(job(job_id, 1 + i % 2, i * 50, qos=qos), i * 50)
        sched.cycle(i * 50)
    assert len(sched.running) >= 5
    for now in (400.0, 2000.0, 7000.0):  # runs of different lengths: leases and queues
        generic = Policy.victims(policy, sched.running.values(), now)
        assert generic, now
        assert policy.victims(sched.running.values(), now) == generic, now


# (policy, its victim facts from (rank or remaining, restart cost, bar), the context of a
# blocked job whose bar is that value)
_FAST_PREEMPTABLE = {
    "dynamic": (
        lambda r, cost, bar: (math.log(r), bar, cost, r),
        lambda at, bar: math.log(at / bar),
    ),
    "srpt-oracle": (lambda r, cost, bar: (r - cost, r), lambda at, bar: at),
}


@pytest.mark.parametrize("name", list(_FAST_PREEMPTABLE))
def test_preemptable_victims_are_those_may_preempt_allows(name: str) -> None:
    """dynamic and srpt-oracle stop at the first victim under the blocked job's bar (their
    victims come highest rank, or most remaining, first; restart costs are >= 0); they
    must find the victims ``may_preempt`` allows, whatever the restart costs."""
    policy = make_policy(name, oracle=lambda _: 0.0)
    facts_of, context_of = _FAST_PREEMPTABLE[name]
    rng = random.Random(3)
    gaps = 0  # lists where an allowed victim follows a refused one (a cheaper restart)
    for _ in range(300):
        bar = rng.choice([1.0, 1.5, 4.0]) if name == "dynamic" else 1.0
        ranks = sorted((rng.lognormvariate(8.0, 1.5) for _ in range(rng.randrange(1, 12))),
                       reverse=True)  # fmt: skip
        victims = [
            (job(f"v{i}", 1), facts_of(r, rng.choice([0.0, 10.0, 1000.0, r / 2]), bar))
            for i, r in enumerate(ranks)
        ]
        for _ in range(6):
            at = rng.choice(ranks) * rng.choice([0.3, 0.9, 0.999, 1.0, 1.2])
            context = context_of(at, bar)
            allowed = [policy.may_preempt(facts, context) for _, facts in victims]
            expected = [v for (v, _), ok in zip(victims, allowed, strict=True) if ok]
            assert policy.preemptable(victims, context) == expected
            gaps += any(b and not a for a, b in itertools.pairwise(allowed))
    assert gaps > 0


def test_dynamic_victims_it_remembers_are_those_it_would_compute_afresh() -> None:
    """``dynamic`` keeps each running job's rank time and facts from one cycle to the
    next; what it keeps must be what it would compute with nothing kept, after the
    histories change (jobs finish), runs cross a time step, and a refresh recomputes
    the fair-share terms."""
    sched = Scheduler(
        [node("a", 4), node("b", 4)], make_policy("dynamic"), make_placement("bestfit"),
        Params(dynamic_energy_aware=False),
    )  # fmt: skip
    _learned(sched)
    for i in range(6):
        sched.submit(job(f"r{i}", 1 + i % 2, i * 50, tenant=f"t{i % 3}"), i * 50)
        sched.cycle(i * 50)
    policy, predictor = sched.policy, sched.predictor

    def afresh(now: float) -> list[tuple[Job, object]]:
        kept = dict(policy._facts), dict(predictor._last)
        policy._facts.clear()
        predictor._last.clear()
        found = policy.victims(sched.running.values(), now)
        policy._facts.update(kept[0])
        predictor._last.update(kept[1])
        return found

    steps = [  # (when, what changes before)
        (1000.0, lambda: None),
        (1000.0, lambda: [predictor.observe(job(f"long{i}", 2), 90_000.0 + i) for i in range(5)]),
        (1000.0, lambda: [predictor.observe(job(f"short{i}", 1), 400.0 + i) for i in range(5)]),
        (3000.0, lambda: sched.fairshare.charge("t0", 1e7, 3000.0)),
        (3000.0, lambda: policy.begin_refresh(3000.0)),
        (9000.0, lambda: None),
    ]
    for now, step in steps:
        step()
        first = policy.victims(sched.running.values(), now)  # remembers
        assert first, now
        assert policy.victims(sched.running.values(), now) == first == afresh(now), now


def test_dynamic_preemption_bar_ignores_earlier_preemptions() -> None:
    """The bar is the margin whatever the victim's past: a long job that was preempted
    before is preempted again by the same short job (the growing bar of before made it
    all but unpreemptible, margin^(1 + preemptions))."""
    params = Params(dynamic_energy_aware=False)
    sched = Scheduler([node("a", 1)], make_policy("dynamic"), make_placement("bestfit"), params)
    _learned(sched)
    policy = sched.policy
    victim = job("v", 1, 0)
    sched.submit(victim, 0)
    sched.cycle(0)
    facts = policy.victim_facts(victim, 1000)
    assert facts is not None
    rank, bar, cost, _ = facts
    assert (bar, cost) == (params.dynamic_preempt_margin, params.preemption_cost_s)
    # a job ranked e times below the victim's rank / margin passes the bar, before and
    # after two preemptions alike; one ranked just above rank / margin does not
    below = rank - math.log(params.dynamic_preempt_margin) - 1.01
    just_above = rank - math.log(params.dynamic_preempt_margin) + 0.01
    for preemptions in (0, 2):
        victim.preemptions = preemptions
        assert policy.victim_facts(victim, 1000) == facts
        assert policy.may_preempt(facts, below)
        assert not policy.may_preempt(facts, just_above)


def _waited_100_s() -> list[Job]:
    """30 finished 1-GPU jobs, submitted at 0, that ran 10 s and end at 110 s: each waited
    100 s (the guard's sample of finished waits)."""
    done = [job(f"d{i}", 1, 0) for i in range(30)]
    for d in done:
        d.executed_s = 10.0
    return done


def test_dynamic_guards_the_oldest_long_waiting_jobs() -> None:
    """Past the quantile of finished waits, the oldest pending jobs (up to the bound) run
    first in their class and are never preempted; a gang no longer starves behind an
    index order that ranks it last."""
    params = Params(dynamic_energy_aware=False, dynamic_guard_jobs=1)
    sched = Scheduler([node("a", 2)], make_policy("dynamic"), make_placement("bestfit"), params)
    _learned(sched)
    for done in _waited_100_s():
        sched.policy.finished(done, 110.0)
    sched.submit(job("small", 1, 0), 0)
    sched.submit(job("gang", 2, 0), 0)
    sched.submit(job("gang2", 2, 5), 5)
    # 2-GPU jobs rank first (their class is short), so the small one waits behind them
    assert {d.job_id for d in sched.cycle(5).decisions if isinstance(d, Place)} == {"gang"}
    sched.finish("gang", 400)
    # the refresh: small and gang2 both waited past 100 s; small is the older
    decisions = sched.cycle(610).decisions
    assert sched.policy.guarded == {"small"}
    assert [d.job_id for d in decisions if isinstance(d, Place)] == ["small"]
    assert "gang2" in sched.queue  # it may not preempt the guarded job
    assert sched.policy.victim_facts(sched.jobs["small"], 10_000) is None  # never a victim
    sched.finish("small", 700)
    assert sched.policy.guarded == set()


def test_dynamic_guard_holds_a_bounded_share_of_the_gpus() -> None:
    """Guarded jobs hold at most ``dynamic_guard_gpu_frac`` of the cluster's GPUs, oldest
    first and at least one job: on a small cluster the guard cannot block most of it."""
    for order, expected in ((("old", "gang", "young"), {"old"}), (("gang", "old"), {"gang"})):
        params = Params(dynamic_energy_aware=False, dynamic_guard_gpu_frac=0.25)
        sched = Scheduler([node("a", 4)], make_policy("dynamic"), make_placement("bestfit"), params)
        _learned(sched)
        for done in _waited_100_s():
            sched.policy.finished(done, 110.0)
        sched.submit(job("big", 4, 0), 0)  # holds the whole node
        sched.cycle(0)
        for t, name in enumerate(order, start=1):
            sched.submit(job(name, 2 if name == "gang" else 1, t), t)
        sched.cycle(610)  # the refresh: all waited past 100 s; the budget is 1 of 4 GPUs
        assert sched.policy.guarded == expected, order


def test_a_restored_scheduler_guards_as_a_live_one_would() -> None:
    """The processor rebuilds a scheduler from its records for every recomputation: the
    finished jobs' waits and a refresh at ``now`` give the same guard there."""
    ended = [RecordedJob(done, ended_at=110.0) for done in _waited_100_s()]
    late, fresh = job("late", 1, 0), job("fresh", 1, 5000)
    sched, misplaced = Scheduler.restore(
        [node("a", 1)],
        make_policy("dynamic"),
        make_placement("bestfit"),
        Params(dynamic_energy_aware=False),
        [*ended, RecordedJob(late), RecordedJob(fresh)],
        5050.0,
    )
    assert misplaced == {}
    assert sched.policy.guarded == {"late"}
    assert sched.policy.components(late, 5050.0)["guard"] < 0
    assert sched.policy.components(fresh, 5050.0)["guard"] == 0


def test_dynamic_key_is_the_sum_of_its_components() -> None:
    """``key`` skips building the components (it runs for every pending job at every
    refresh) but orders as their sum does; a guarded job's is its class term alone."""
    ended = [RecordedJob(done, ended_at=110.0) for done in _waited_100_s()]
    late, fresh, gang = job("late", 1, 0), job("fresh", 1, 5000), job("gang", 4, 5001)
    sched, _ = Scheduler.restore(
        [node("a", 1)],
        make_policy("dynamic"),
        make_placement("bestfit"),
        Params(dynamic_energy_aware=False),
        [*ended, RecordedJob(late), RecordedJob(fresh), RecordedJob(gang)],
        5050.0,
    )
    for j in (late, fresh, gang):
        score, submitted = sched.policy.key(j, 5050.0)
        assert score == pytest.approx(sum(sched.policy.components(j, 5050.0).values()), abs=1e-9)
        assert submitted == j.submit_time
    assert sched.policy.key(late, 5050.0)[0] == sched.policy.components(late, 5050.0)["qos"]
    # a refresh asks for every key at once: the same keys (guarded or not), in order
    jobs = [late, fresh, gang]
    assert "late" in sched.policy.guarded
    assert sched.policy.keys(jobs, 5050.0) == [sched.policy.key(j, 5050.0) for j in jobs]


def test_a_victim_preempted_though_not_in_the_way_is_released_once() -> None:
    """Of the victims released to make room, those not needed go back; a needed one is
    requeued, which releases it: it must not have been released already (found by the
    property test: two half-GPU jobs and CPU counted free twice over after a preemption,
    so that three half-GPU jobs shared one GPU)."""
    durations = {"a": 5000.0, "b": 4000.0, "c": 100.0}
    params = Params(preemption_cost_s=0.0)
    policy = make_policy("srpt-oracle", oracle=durations.__getitem__)
    sched = Scheduler([node("n", 1, cpu=8000)], policy, make_placement("spread"), params)
    for t, name in enumerate(("a", "b")):
        sched.submit(job(name, 0.5, float(t), cpu=1000), float(t))
        sched.cycle(float(t))
    assert set(sched.running) == {"a", "b"}
    sched.submit(job("c", 0.5, 10.0, cpu=1000), 10.0)
    sched.cycle(10.0)
    assert set(sched.running) == {"b", "c"}  # a, with the most left, made room
    n = sched.state.nodes["n"]
    assert n.gpu_free == [pytest.approx(0.0)]
    assert n.cpu_free == 8000 - 2000


def _nodes_of(sched: Scheduler, job_id: str) -> list[str]:
    return [a.node_id for a in sched.running[job_id].allocations]


def _consolidating(**params: Any) -> tuple[Scheduler, str, str]:
    """``dynamic`` consolidating (no headroom, parks after 60 s) on three 8-GPU nodes,
    "c" parked: a 6-GPU job on each of the others and a 2-GPU one, "s", beside one of
    them; that one ends at 2000. Returns the scheduler, the node left with "s" alone
    and the other."""
    p = Params(
        dynamic_consolidate=True,
        dynamic_headroom_gpus=0,
        dynamic_headroom_frac=0,
        dynamic_park_after_s=60,
    )
    sched = Scheduler(
        [node("a", 8), node("b", 8), node("c", 8)],
        make_policy("dynamic"),
        make_placement("bestfit"),
        dataclasses.replace(p, **params),
    )
    sched.submit(job("big-a", 6, 0), 0)
    sched.submit(job("big-b", 6, 0), 0)
    sched.cycle(0)
    sched.submit(job("s", 2, 1), 1)
    sched.cycle(1)
    parked = [d.node_id for d in sched.cycle(100).decisions if isinstance(d, ParkNode)]
    assert parked == ["c"]  # consolidation runs only while some node is parked
    (alone,) = _nodes_of(sched, "s")
    neighbour = next(j for j in ("big-a", "big-b") if _nodes_of(sched, j) == [alone])
    (other,) = {"a", "b"} - {alone}  # bestfit: "c" stayed empty
    sched.finish(neighbour, 2000)
    return sched, alone, other


def _moves(decisions: list[Decision]) -> list[tuple[str, str]]:
    return [(type(d).__name__, d.job_id) for d in decisions if isinstance(d, Preempt | Place)]


def test_dynamic_empties_a_lightly_used_node_onto_a_busy_one_and_parks_it() -> None:
    """Consolidation: with nothing waiting, the job left alone on a node restarts beside
    the other node's job, so that the emptied node is parked."""
    sched, alone, other = _consolidating()
    decisions = sched.cycle(2000).decisions
    assert _moves(decisions) == [("Preempt", "s"), ("Place", "s")]
    assert decisions[0].reason.startswith(MOVE_REASON)  # how a rebuild finds it
    assert _nodes_of(sched, "s") == [other]
    assert sched.migrations == 1
    parked = [d.node_id for d in sched.cycle(2061).decisions if isinstance(d, ParkNode)]
    assert parked == [alone]


def test_dynamic_consolidates_only_with_nothing_waiting_and_to_park() -> None:
    # A 7-GPU job waits (it fits nowhere and is too new to preempt for): nothing moves.
    sched, alone, _ = _consolidating()
    sched.submit(job("wide", 7, 2000), 2000)
    assert _moves(sched.cycle(2000).decisions) == []
    assert _nodes_of(sched, "s") == [alone]
    # Any headroom (1 GPU more than run) would keep the emptied node on, so that only
    # its host would idle: nothing moves (without one, "s" moves: the test above).
    sched, alone, _ = _consolidating(dynamic_headroom_gpus=1)
    assert _moves(sched.cycle(2000).decisions) == []
    assert _nodes_of(sched, "s") == [alone]
    # "s" has run less than one restart cost: it is not moved then, but once it has
    # (tried again a restart cost after the last try, the cluster being unchanged).
    sched, _, other = _consolidating(preemption_cost_s=5000)
    assert _moves(sched.cycle(2000).decisions) == []
    assert _moves(sched.cycle(6999).decisions) == []
    assert _moves(sched.cycle(7000).decisions) == [("Preempt", "s"), ("Place", "s")]
    assert _nodes_of(sched, "s") == [other]


def test_consolidation_is_a_setting_off_by_default() -> None:
    assert not Params().dynamic_consolidate
    sched, alone, _ = _consolidating(dynamic_consolidate=False)
    assert _moves(sched.cycle(2000).decisions) == []
    assert _nodes_of(sched, "s") == [alone]
