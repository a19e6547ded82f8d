"""Estimated starts: the pending queue played forward on predicted run times."""

from __future__ import annotations

import pytest

from gpusched.core import Params, Scheduler, make_placement, make_policy
from gpusched.core.model import PendingCategory, PowerState
from gpusched.core.starts import estimate_starts
from tests.core_builders import job, node


def _fifo(*nodes: tuple[str, int]) -> Scheduler:
    # per-tenant predictions, so two tenants' jobs of one size can differ in these tests
    return Scheduler(
        [node(n, g) for n, g in nodes],
        make_policy("fifo"),
        make_placement("bestfit"),
        Params(predict_by_tenant=True),
    )


def test_jobs_taken_first_still_get_a_start() -> None:
    # Between a job's end and the next cycle a node fits the waiting jobs: each still
    # gets a start, the first now and the second once the first has run as predicted.
    sched = _fifo(("a", 8))
    for j in (job("first", 8, 0), job("second", 8, 1)):
        sched.submit(j, j.submit_time)
    reasons = sched.explain_all(10)
    assert {r.category for r in reasons.values()} == {PendingCategory.PRIORITY}
    assert reasons["first"].start_estimate == 10
    run = sched.predictor.expected_remaining(sched.jobs["first"], 10)
    assert reasons["second"].start_estimate == pytest.approx(10 + run)


def test_a_short_job_fits_a_gap_a_long_one_does_not() -> None:
    sched = _fifo(("a", 4))
    for i in range(10):  # tenant "quick" runs 100 s jobs, tenant "slow" 10,000 s ones
        sched.predictor.observe(job(f"q{i}", 1, tenant="quick"), 100)
        sched.predictor.observe(job(f"s{i}", 1, tenant="slow"), 10_000)
    sched.submit(job("run", 2, 0, tenant="quick"), 0)
    sched.cycle(0)
    for j in (job("wide", 4, 1, tenant="quick"), job("long", 2, 2, tenant="slow"),
              job("short", 2, 3, tenant="quick")):  # fmt: skip
        sched.submit(j, j.submit_time)
    starts = estimate_starts(sched, 10)
    assert starts["wide"] == pytest.approx(100)  # when "run" ends
    # 2 GPUs are free now, but only until "wide" starts at 100: "long" cannot finish in
    # that gap and goes after "wide"; "short" (100 s) would not fit either (90 s left)
    assert starts["long"] == pytest.approx(200)
    assert starts["short"] == pytest.approx(200)


def test_a_gang_larger_than_a_node_waits_for_whole_nodes() -> None:
    sched = _fifo(("a", 4), ("b", 4), ("c", 4))
    sched.submit(job("run", 4, 0), 0)
    sched.submit(job("run2", 4, 0), 0)
    sched.cycle(0)
    sched.submit(job("gang", 8, 1), 1)
    ends = sorted(5 + sched.predictor.expected_remaining(j, 5) for j in sched.running.values())
    assert estimate_starts(sched, 5)["gang"] == pytest.approx(ends[0])  # the 2nd empty node


def test_a_parked_node_counts_from_when_a_wake_would_finish() -> None:
    sched = _fifo(("a", 8))
    sched.state.set_power("a", PowerState.PARKED)
    sched.submit(job("x", 8, 0), 0)
    assert estimate_starts(sched, 100)["x"] == pytest.approx(100 + sched.power.wake_latency_s)


def test_jobs_that_can_never_run_get_no_start() -> None:
    sched = _fifo(("a", 8))
    sched.submit(job("h100", 1, 0, models="H100"), 0)
    sched.submit(job("huge", 16, 0), 0)
    assert estimate_starts(sched, 0) == {}


def test_nodes_without_gpus_are_no_place_for_a_gang() -> None:
    sched = _fifo(("a", 4), ("b", 4), ("cpu", 0))
    sched.submit(job("gang", 8, 0), 0)
    sched.submit(job("cpu-job", 0, 0), 0)
    assert estimate_starts(sched, 0) == {"gang": 0, "cpu-job": 0}
