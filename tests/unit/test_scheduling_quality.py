"""Correctness behind the scheduling-quality figures: baselines as their authors made
them, waking only what waiting jobs can use, impossible gangs reported, metrics that
refuse to flatter, and no policy (but the oracle) peeking at run times."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpusched.core import (
    Params,
    ParkNode,
    Place,
    Preempt,
    Scheduler,
    make_placement,
    make_policy,
    never_fits,
)
from gpusched.core.policies import POLICIES, policy_names
from gpusched.sim import SimError, Simulation, load_cluster, load_jobs, summarize, traces_dir
from gpusched.sim.engine import RunResult
from tests.core_builders import job, node

REPO = Path(__file__).resolve().parents[2]
TRACES = traces_dir(REPO.parent / "shared" / "traces")


def kinds(decisions: list[object]) -> list[tuple[str, str]]:
    return [(type(d).__name__, getattr(d, "job_id", getattr(d, "node_id", ""))) for d in decisions]


# -- waking: only nodes a waiting job can use ---------------------------------------------
@pytest.mark.parametrize("policy", ["dynamic", "tiresias+powersave", "fifo+powersave"])
def test_a_parked_node_of_the_model_a_waiting_job_needs_is_woken(policy: str) -> None:
    """Model A has room, model B's only node is parked: a job pinned to B must wake it
    (counting free GPUs of any model would leave it waiting forever)."""
    params = Params(
        dynamic_headroom_gpus=0,
        dynamic_headroom_frac=0,
        dynamic_park_after_s=60,
        powersave_suspend_time_s=60,
    )
    nodes = [node("a", 8, "A"), node("b", 8, "B")]
    sched = Scheduler(nodes, make_policy(policy), make_placement("bestfit"), params)
    sched.submit(job("on-a", 1, 0, models="A"), 0)
    sched.cycle(0)
    parked = [d.node_id for d in sched.cycle(100).decisions if isinstance(d, ParkNode)]
    assert parked == ["b"]
    sched.submit(job("needs-b", 1, 200, models="B"), 200)
    decisions = sched.cycle(200).decisions
    assert ("WakeNode", "b") in kinds(decisions)
    sched.node_ready("b", 380)
    assert ("Place", "needs-b") in kinds(sched.cycle(380).decisions)


def test_no_node_is_woken_for_a_job_no_parked_node_can_hold() -> None:
    params = Params(powersave_suspend_time_s=60)
    nodes = [node("a", 8, "A"), node("b", 8, "B")]
    sched = Scheduler(nodes, make_policy("fifo+powersave"), make_placement("bestfit"), params)
    assert len([d for d in sched.cycle(100).decisions if isinstance(d, ParkNode)]) == 2
    sched.submit(job("needs-c", 1, 200, models="A|C"), 200)
    assert kinds(sched.cycle(200).decisions) == [("WakeNode", "a")]


def test_powersave_suspends_after_suspend_time_and_asks_for_a_timer() -> None:
    params = Params(powersave_suspend_time_s=600, refresh_s=86400)
    sched = Scheduler(
        [node("a")], make_policy("backfill+powersave"), make_placement("bestfit"), params
    )
    sched.submit(job("j", 1, 0), 0)
    sched.cycle(0)
    sched.finish("j", 100)
    assert sched.cycle(100).decisions == []
    assert sched.next_wakeup(100) == 700
    assert kinds(sched.cycle(700).decisions) == [("ParkNode", "a")]


def test_powersave_is_only_for_policies_that_do_not_manage_power() -> None:
    assert "tiresias+powersave" in policy_names()
    assert "dynamic+powersave" not in policy_names()
    with pytest.raises(Exception, match=r"unknown policy 'dynamic\+powersave'"):
        make_policy("dynamic+powersave")


@pytest.mark.parametrize(
    ("nodes", "at_150"),
    [
        (["a", "b"], [("WakeNode", "b")]),
        (["a"], [("Preempt", "old"), ("Place", "new")]),
    ],
)
def test_a_job_a_parked_node_can_hold_wakes_it_instead_of_preempting(
    nodes: list[str], at_150: list[tuple[str, str]]
) -> None:
    """tiresias preempts ``old`` for ``new`` (test_core_policies), but when a parked node
    can hold ``new`` it is woken and ``new`` waits for it, as Slurm resumes a
    powered-down node rather than preempt; with no node parked, the preemption happens."""
    params = Params(
        tiresias_thresholds_gpu_s=(100.0,),
        tiresias_lease_s=10.0,
        preemption_cost_s=10.0,
        powersave_suspend_time_s=60,
    )
    specs = [node(name, 4) for name in nodes]
    sched = Scheduler(specs, make_policy("tiresias+powersave"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    assert kinds(sched.cycle(100).decisions) == [("ParkNode", n) for n in nodes[1:]]
    sched.submit(job("new", 4, 150), 150)
    assert kinds(sched.cycle(150).decisions) == at_150


@pytest.mark.parametrize(
    ("qos", "at_7200"),
    [
        ("normal", [("WakeNode", "b")]),
        ("high", [("Preempt", "old"), ("Place", "new"), ("WakeNode", "b")]),
    ],
)
def test_dynamic_high_class_preempts_rather_than_wait_for_a_wake(
    qos: str, at_7200: list[tuple[str, str]]
) -> None:
    """A class with headroom of its own (``dynamic_headroom_classes``) is not made to wait
    for a wake; a normal job is."""
    params = Params(dynamic_headroom_gpus=0, dynamic_headroom_frac=0, dynamic_park_after_s=60)
    specs = [node("a", 4), node("b", 4)]
    sched = Scheduler(specs, make_policy("dynamic"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    assert kinds(sched.cycle(3600).decisions) == [("ParkNode", "b")]
    sched.submit(job("new", 4, 7200, qos=qos), 7200)
    assert kinds(sched.cycle(7200).decisions) == at_7200


# -- a gang larger than the cluster's total of its model ----------------------------------
def test_a_gang_larger_than_its_models_total_is_never_placeable() -> None:
    nodes = [node("a", 8, "V100"), node("b", 8, "V100"), node("c", 8, "K80")]
    sched = Scheduler(nodes, make_policy("backfill"), make_placement("bestfit"))
    assert never_fits(sched, job("fits", 16, models="V100")) is None
    reason = never_fits(sched, job("too-big", 24, models="V100"))
    assert reason is not None
    assert "24 GPUs at once" in reason
    assert "16 of V100" in reason
    assert never_fits(sched, job("too-big-any", 24)) is not None  # a gang uses one model
    sched.submit(job("too-big", 24, 0, models="V100"), 0)
    pending = sched.cycle(0, explain_pending=True).pending
    assert pending["too-big"].category == "never"


def test_the_simulator_skips_an_impossible_gang(tmp_path: Path) -> None:
    (tmp_path / "c.cluster.csv").write_text(
        "node_id,gpu_type,num_gpu,cpu_milli,memory_mib\na,V100,8,,\nb,V100,8,,\n"
    )
    (tmp_path / "j.jobs.csv").write_text(
        "job_id,submit_time_s,duration_s,num_gpu,gpu_type,cpu_milli,memory_mib,tenant,"
        "qos_or_priority\nok,0,10,16,,,,,\nhuge,1,10,32,,,,,\n"
    )
    run = Simulation(
        load_cluster(tmp_path / "c.cluster.csv"), load_jobs(tmp_path / "j.jobs.csv"), "tiresias"
    ).run()
    assert [j for j, _ in run.skipped] == ["huge"]
    assert summarize(run, "queueing")["jobs"] == 1


# -- metrics fail loudly -----------------------------------------------------------------
def test_metrics_refuse_a_run_that_left_jobs_unfinished() -> None:
    run = RunResult("fifo", "bestfit", submitted=2, unfinished=["stuck"])
    with pytest.raises(SimError, match=r"2 of 2 jobs never finished.*stuck"):
        summarize(run, "queueing")
    assert summarize(RunResult("fifo", "bestfit", submitted=2), "packing")["jobs"] == 0


# -- baselines as their authors made them --------------------------------------------------
def test_tiresias_promotion_resets_attained_service() -> None:
    params = Params(
        tiresias_thresholds_gpu_s=(100.0,),
        tiresias_starve_factor=1.0,
        preemption_cost_s=10.0,
        tiresias_lease_s=10.0,
        refresh_s=10.0,
    )
    sched = Scheduler([node("a", 4)], make_policy("tiresias"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("new", 4, 50), 50)
    assert kinds(sched.cycle(50).decisions) == [("Preempt", "old"), ("Place", "new")]
    assert sched.policy.components(sched.jobs["old"], 50)["attained_gpu_s"] == 200
    # "old" ran 50 s; after waiting longer than that it is promoted with its attained
    # service reset: back in the top queue, it takes the GPUs from "new" (now queue 1).
    assert kinds(sched.cycle(101).decisions) == [("Preempt", "new"), ("Place", "old")]
    assert sched.policy.components(sched.jobs["old"], 101)["attained_gpu_s"] == 0


def test_tiresias_lease_is_at_least_the_restart_cost() -> None:
    params = Params(tiresias_thresholds_gpu_s=(100.0,), tiresias_lease_s=10.0)  # cost 120 s
    sched = Scheduler([node("a", 4)], make_policy("tiresias"), make_placement("bestfit"), params)
    sched.submit(job("old", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("new", 4, 50), 50)
    assert sched.cycle(50).decisions == []
    assert [type(d) for d in sched.cycle(120).decisions] == [Preempt, Place]


def test_tiresias_qos_puts_every_high_job_first_and_preempts_for_it() -> None:
    params = Params(preemption_cost_s=10.0, tiresias_lease_s=10.0)
    sched = Scheduler(
        [node("a", 4)], make_policy("tiresias-qos"), make_placement("bestfit"), params
    )
    sched.submit(job("normal", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("high", 4, 50, qos="high"), 50)  # same Tiresias queue as "normal"
    assert kinds(sched.cycle(50).decisions) == [("Preempt", "normal"), ("Place", "high")]
    plain = Scheduler([node("a", 4)], make_policy("tiresias"), make_placement("bestfit"), params)
    plain.submit(job("normal", 4, 0), 0)
    plain.cycle(0)
    plain.submit(job("high", 4, 50, qos="high"), 50)
    assert plain.cycle(50).decisions == []  # plain tiresias ignores classes


def test_backfill_reserves_for_several_blocked_jobs_and_across_nodes() -> None:
    params = Params(reserve_depth=2)
    nodes = [node(f"n{i}", 8) for i in range(4)]
    sched = Scheduler(nodes, make_policy("backfill"), make_placement("bestfit"), params)
    for i in range(4):
        sched.submit(job(f"run{i}", 8, 0), 0)
    sched.cycle(0)
    sched.submit(job("gang16", 16, 1), 1)  # larger than a node: needs two whole nodes
    sched.submit(job("eight", 8, 2), 2)
    sched.cycle(2)
    res = sched.reservations
    assert set(res) == {"gang16", "eight"}
    assert len(res["gang16"].node_ids) == 2
    assert set(res["gang16"].node_ids).isdisjoint(res["eight"].node_ids)


# -- no peeking: a job's own duration changes nothing before it finishes --------------------
NO_PEEK = [p for p in policy_names() if not p.startswith("srpt-oracle")]


@pytest.mark.parametrize("policy", NO_PEEK)
def test_no_policy_reads_the_duration_of_an_unfinished_job(policy: str) -> None:
    """Lengthen every job still pending or running at time T: every decision before T
    stays the same (only srpt-oracle, the labelled bound, may differ)."""
    nodes = load_cluster(TRACES / "v100_16gpu.cluster.csv")
    jobs = load_jobs(TRACES / "gavel_vced69ec.jobs.csv")[:80]  # queues and preemptions
    first = Simulation(nodes, jobs, policy, record=True).run()
    finish = {o.job_id: o.finish for o in first.outcomes}
    cut = sorted(finish.values())[len(finish) // 2]
    longer = [
        dataclasses.replace(j, duration_s=j.duration_s * 3 + 1000) if finish[j.job_id] > cut else j
        for j in jobs
    ]
    second = Simulation(nodes, longer, policy, record=True).run()
    before = [(t, d) for t, d in first.decisions if t < cut]
    assert before, "the test needs decisions before the cut"
    assert [(t, d) for t, d in second.decisions if t < cut] == before
    assert first.preemptions or not POLICIES[policy.split("+")[0]].preemptive


def test_every_policy_has_a_no_peek_test() -> None:
    assert set(POLICIES) - {"srpt-oracle"} <= set(NO_PEEK)
