"""Declarative table tests of the scheduling core: nodes, jobs, expected decisions."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from gpusched.core import (
    Job,
    NodeSpec,
    Params,
    ParkNode,
    Place,
    Preempt,
    Scheduler,
    UnknownName,
    make_placement,
    make_policy,
)
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


def test_dynamic_preempts_only_when_it_pays() -> None:
    params = Params(dynamic_min_run_s=100, dynamic_min_wait_s=10, dynamic_energy_aware=False)
    sched = Scheduler([node("a", 1)], make_policy("dynamic"), make_placement("bestfit"), params)
    # History: tenant "long" runs ~10 h jobs, tenant "short" ~5 min ones.
    for i in range(10):
        sched.predictor.observe(job(f"hl{i}", 1, tenant="long"), 36000 + i)
        sched.predictor.observe(job(f"hs{i}", 1, tenant="short"), 300 + i)
    sched.submit(job("runner", 1, 0, tenant="long"), 0)
    sched.cycle(0)
    sched.submit(job("quick", 1, 50, tenant="short"), 50)
    assert sched.cycle(55).decisions == []  # the runner's lease (min run) holds
    decisions = sched.cycle(300).decisions  # the next timer tick (dynamic_tick_s)
    assert [(type(d).__name__, d.job_id) for d in decisions] == [
        ("Preempt", "runner"),
        ("Place", "quick"),
    ]
    # The other way round it does not pay: a long job never preempts a short one.
    sched2 = Scheduler([node("a", 1)], make_policy("dynamic"), make_placement("bestfit"), params)
    sched2.predictor = sched.predictor
    sched2.submit(job("quick", 1, 0, tenant="short"), 0)
    sched2.cycle(0)
    sched2.submit(job("runner", 1, 50, tenant="long"), 50)
    assert sched2.cycle(300).decisions == []


def test_slowdown_aging_is_in_proportion_to_the_jobs_own_rank_time() -> None:
    params = Params(dynamic_aging_s=30 * 86400.0, dynamic_aging_slowdown=1.0)
    sched = Scheduler([node("a", 8)], make_policy("dynamic"), make_placement("bestfit"), params)
    for i in range(10):  # tenant "short" runs ~100 s jobs, tenant "long" ~10,000 s ones
        sched.predictor.observe(job(f"s{i}", 1, tenant="short"), 100)
        sched.predictor.observe(job(f"l{i}", 1, tenant="long"), 10_000)
    short, long_ = job("q", 1, 0, tenant="short"), job("z", 1, 0, tenant="long")
    waited = 1000.0  # ten times the short job's run time, a tenth of the long job's
    aging = {j.job_id: sched.policy.components(j, waited)["aging"] for j in (short, long_)}
    absolute = math.log(2) * waited / params.dynamic_aging_s
    rank = sched.predictor.rank_time
    assert aging["q"] == pytest.approx(-absolute - math.log1p(waited / rank(short, waited)))
    assert aging["z"] == pytest.approx(-absolute - math.log1p(waited / rank(long_, waited)))
    assert aging["q"] < aging["z"] - 1.5  # the short job's slowdown is far larger
