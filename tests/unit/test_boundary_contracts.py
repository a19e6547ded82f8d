"""What the package boundaries promise: the scheduler's restore / revert / exclusion, the
contract-to-core conversion, settings that fail fast naming the accepted values, the
simulated cluster's wire events, and the collector's clocks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from gpusched.collector.app import SimulatedClock, WallClock
from gpusched.contracts import JobEvent, JobEventType, JobRequest
from gpusched.contracts.convert import core_request, job_request, submitted_job
from gpusched.core import (
    JobState,
    NeedsOracle,
    ParkNode,
    PendingCategory,
    Place,
    PowerState,
    RecordedJob,
    Request,
    Scheduler,
    UnknownName,
    WakeNode,
    held_on,
    make_placement,
    make_policy,
)
from gpusched.dispatcher import DispatcherSettings, JobStep, NodePower
from gpusched.dispatcher.sim_backend import _event
from gpusched.processor import ProcessorSettings
from gpusched.simcluster import ClusterEvent
from tests.core_builders import job, node

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _scheduler(*nodes: str, policy: str = "fifo") -> Scheduler:
    return Scheduler([node(n, 4) for n in nodes], make_policy(policy), make_placement("bestfit"))


def test_revert_puts_a_refused_placement_back_without_a_preemption() -> None:
    s = _scheduler("n0")
    s.submit(job("a", 2), 0.0)
    (place,) = s.cycle(10.0).decisions
    assert isinstance(place, Place)
    s.revert(place, 10.0)
    a = s.jobs["a"]
    assert (a.state, a.preemptions, a.first_start, a.executed_s) == (JobState.PENDING, 0, None, 0)
    assert s.state.nodes["n0"].free_whole == 4
    (again,) = s.cycle(11.0).decisions  # placed again on the next cycle
    assert isinstance(again, Place)
    assert again.job_id == "a"


def test_revert_restores_the_power_a_node_had() -> None:
    s = _scheduler("n0")
    s.revert(ParkNode("n0"), 5.0)
    assert s.state.nodes["n0"].power is PowerState.ON
    s.state.set_power("n0", PowerState.PARKED)
    s.revert(WakeNode("n0"), 6.0)
    assert s.state.nodes["n0"].power is PowerState.PARKED


def test_excluded_nodes_get_no_new_work_for_that_cycle_only() -> None:
    s = _scheduler("n0", "n1")
    s.submit(job("a", 4), 0.0)
    s.submit(job("b", 4), 0.0)
    placed = [d for d in s.cycle(1.0, excluded={"n0"}).decisions if isinstance(d, Place)]
    assert [(d.job_id, d.allocations[0].node_id) for d in placed] == [("a", "n1")]
    placed = [d for d in s.cycle(2.0).decisions if isinstance(d, Place)]
    assert [(d.job_id, d.allocations[0].node_id) for d in placed] == [("b", "n0")]


def test_restore_rebuilds_from_a_record_of_jobs() -> None:
    ended = job("old", 2, submit=0.0, tenant="x")
    ended.executed_s, ended.attained_gpu_s = 100.0, 200.0
    running, waiting = job("run", 2, submit=5.0), job("wait", 8, submit=6.0)
    wrong = job("wrong", 4, submit=7.0)  # the record says it runs where there is no room
    records = [
        RecordedJob(waiting),
        RecordedJob(running, held_on(running.request, ("n0",), ((0, 1),)), started_at=50.0),
        RecordedJob(wrong, held_on(wrong.request, ("n0",), ((0, 1, 2, 3),)), started_at=60.0),
        RecordedJob(ended, ended_at=40.0),
    ]
    s, misplaced = Scheduler.restore(
        [node("n0", 4)], make_policy("fifo"), make_placement("bestfit"), _scheduler().params,
        records, now=100.0,
    )  # fmt: skip
    assert list(s.running) == ["run"]
    assert set(s.queue.ids()) == {"wait", "wrong"}
    assert list(misplaced) == ["wrong"]
    assert s.fairshare.usage_ratio("x") > s.fairshare.usage_ratio("t")
    reasons = s.explain_all(100.0)
    assert reasons["wait"].category is PendingCategory.NEVER  # 8 GPUs, nodes of 4
    assert f"{reasons['wait'].category}" == "never"


def test_held_on_splits_cpu_and_memory_and_keeps_the_gpu_share() -> None:
    (a,) = held_on(Request(0.5, cpu_milli=1000, memory_mib=64), ("n0",), ((2,),))
    assert (a.share, a.gpu_indices, a.cpu_milli) == (0.5, (2,), 1000)
    two = held_on(Request(8, cpu_milli=1000, memory_mib=64), ("n0", "n1"), ((0,), (0,)))
    assert [(x.share, x.cpu_milli, x.memory_mib) for x in two] == [(1.0, 500, 32)] * 2


def test_contract_to_core_conversion_round_trips() -> None:
    request = JobRequest(num_gpu=2, gpu_models=("V100", "A100"), cpu_milli=500, memory_mib=1024)
    core = core_request(request)
    assert core == Request(2, frozenset({"A100", "V100"}), 500, 1024)
    assert job_request(core) == request.model_copy(update={"gpu_models": ("A100", "V100")})
    event = JobEvent(job_id="j", type="submitted", ts=T0, tenant="t", request=request)
    j = submitted_job(event)
    assert (j.job_id, j.submit_time, j.tenant, j.request) == ("j", T0.timestamp(), "t", core)


def test_bad_policy_and_placement_names_fail_at_load_naming_the_accepted() -> None:
    with pytest.raises(ValidationError, match=r"unknown placement 'nope'; accepted: bestfit"):
        DispatcherSettings(dispatcher_placement="nope")
    with pytest.raises(ValidationError, match=r"unknown policy 'fast'; accepted: backfill"):
        DispatcherSettings(dispatcher_policy="fast")
    with pytest.raises(ValidationError, match="srpt-oracle needs an oracle"):
        ProcessorSettings(processor_policy="srpt-oracle")
    assert DispatcherSettings(dispatcher_policy="tiresias+powersave").dispatcher_policy
    with pytest.raises(NeedsOracle):
        make_policy("srpt-oracle")
    with pytest.raises(UnknownName):
        make_placement("nope")


def test_the_simulated_clusters_events_read_back_as_one_type_per_kind() -> None:
    step = ClusterEvent(
        seq=1, ts=1.0, kind="job", job_id="a", type=JobEventType.PLACED,
        node_ids=("n0",), gpu_indices=((0, 1),), decision_id="d1",
    )  # fmt: skip
    power = ClusterEvent(seq=2, ts=2.0, kind="node", node_id="n0", power=PowerState.PARKED)
    assert _event(step.model_dump(mode="json")) == JobStep(
        1, 1.0, "a", JobEventType.PLACED, ("n0",), ((0, 1),), "d1", None
    )
    assert _event(power.model_dump(mode="json")) == NodePower(2, 2.0, "n0", PowerState.PARKED)


def test_collector_clocks() -> None:
    sim = SimulatedClock(interval_s=10.0, speed=60.0)
    assert sim.stamp(T0, 3) == datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
    assert sim.due_s(6) == pytest.approx(1.0)
    wall = WallClock(interval_s=10.0)
    assert wall.due_s(2) == 20.0
    assert wall.stamp(T0, 5) > T0
