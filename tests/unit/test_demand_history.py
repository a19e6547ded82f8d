"""``DemandHistory``: the realised rises of demand the dynamic policy's headroom reads."""

from __future__ import annotations

import pytest

from gpusched.core import Params, RecordedJob, Scheduler, demand, make_placement, make_policy
from gpusched.core.demand import DemandHistory
from tests.core_builders import job, node

DAY = 86400.0


def _bursts(history: DemandHistory, days: float, start: float = 0.0) -> float:
    """8 GPUs arrive every 10 minutes and leave 5 minutes later; returns the end."""
    n = int(days * DAY / 600)
    for i in range(n):
        history.change(start + i * 600.0, 8.0)
        history.change(start + i * 600.0 + 300.0, -8.0)
    return start + n * 600.0


def test_the_rise_over_a_lead_is_read_from_the_bursts() -> None:
    history = DemandHistory()
    end = _bursts(history, 2)
    # Sampled each minute, the next arrival is within 8 minutes of half the samples
    # with none running (from 5 to 10 minutes after an arrival): the rise is 8 GPUs
    # there and 0 elsewhere.
    assert history.rise_quantile(end, 480.0, 0.9) == 8.0
    assert history.rise_quantile(end, 480.0, 0.4) == 0.0
    assert history.rise_quantile(end, 60.0, 0.9) == 0.0  # one sample ahead: 1 in 10
    assert history.level == 0.0


def test_no_answer_before_a_day_of_history() -> None:
    history = DemandHistory()
    end = _bursts(history, 0.5)
    assert history.rise_quantile(end, 480.0, 0.9) is None


def test_a_steady_level_older_than_the_history_is_not_a_rise() -> None:
    history = DemandHistory(history_s=DAY)
    history.change(0.0, 100.0)  # 100 GPUs arrive at once, two days ago
    end = _bursts(history, 2, start=DAY / 2)
    assert history.rise_quantile(end, 480.0, 0.9) == 8.0
    history.change(end, 1000.0)  # added after the read: still counted once
    assert history.level == pytest.approx(1100.0)
    assert history.rise_quantile(end + 3 * DAY, 480.0, 0.9) == 0.0  # a flat week


def test_changes_added_out_of_order_give_the_same_answer() -> None:
    ordered, shuffled = DemandHistory(), DemandHistory()
    end = _bursts(ordered, 2)
    changes = [(i * 600.0 + 300.0, -8.0) for i in range(288)]
    changes += [(i * 600.0, 8.0) for i in range(288)]
    for t, gpus in changes:  # every end before any arrival, as a restore adds them
        shuffled.change(t, gpus)
    assert shuffled.rise_quantile(end, 480.0, 0.9) == ordered.rise_quantile(end, 480.0, 0.9)


def test_no_answer_without_history() -> None:
    assert DemandHistory().rise_quantile(DAY, 480.0, 0.9) is None


def _scheduler(records: list[RecordedJob] | None = None, now: float = 0.0) -> Scheduler:
    nodes, params = [node("a"), node("b")], Params()
    policy, placement = make_policy("fifo"), make_placement("bestfit")
    if records is None:
        return Scheduler(nodes, policy, placement, params)
    return Scheduler.restore(nodes, policy, placement, params, records, now)[0]


def test_the_scheduler_records_demand_as_jobs_come_and_go() -> None:
    """A preemption moves a job from running to pending (no change); a cancel and a
    finish end it once each; a restored scheduler sees the ended jobs' history as the
    live one saw it."""
    live, records = _scheduler(), []
    for i in range(288):  # two days of the bursts above, as jobs
        burst = job(f"j{i}", 8, i * 600.0)
        live.submit(burst, i * 600.0)
        live.cycle(i * 600.0)
        live.finish(burst.job_id, i * 600.0 + 300.0)
        records.append(RecordedJob(burst, ended_at=i * 600.0 + 300.0))
    end = 288 * 600.0
    restored = _scheduler(records, end)
    assert restored.demand.rise_quantile(end, 480.0, 0.9) == 8.0
    assert live.demand.rise_quantile(end, 480.0, 0.9) == 8.0
    live.submit(job("x", 8, end), end)
    live.cycle(end)
    live.requeue("x", end + 10.0)
    assert live.demand.level == 8.0
    live.cancel("x", end + 20.0)
    live.cancel("x", end + 30.0)  # already ended: not counted again
    assert live.demand.level == 0.0


def test_folding_as_changes_come_gives_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where nobody reads it (a policy without the burst headroom), the history folds
    itself every ``FOLD_EVERY`` changes and stays bounded; the answers do not change."""
    unfolded = DemandHistory(history_s=DAY)
    end = _bursts(unfolded, 3)
    monkeypatch.setattr(demand, "FOLD_EVERY", 7)
    folded = DemandHistory(history_s=DAY)
    _bursts(folded, 3)
    assert len(folded._times) < 2 * DAY / 300 + 7
    assert folded.rise_quantile(end, 480.0, 0.9) == unfolded.rise_quantile(end, 480.0, 0.9)
    assert folded.level == unfolded.level == 0.0
