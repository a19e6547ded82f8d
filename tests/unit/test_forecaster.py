"""The forecaster's pure parts: series folding, models and their fallback, calibrated
intervals, the backtest (on a slice of a real trace) and the outlook the policy reads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from gpusched.cli.main import app
from gpusched.core import (
    Job,
    NodeSpec,
    Params,
    PowerState,
    Request,
    Scheduler,
    make_placement,
    make_policy,
)
from gpusched.forecaster import (
    Calibrator,
    FitTask,
    Forecast,
    ForecastOutlook,
    JobDemand,
    ModelConfig,
    SeriesBuilder,
    fit_many,
    forecast_auto,
    offered_demand,
)
from gpusched.forecaster.models import (
    arrivals_forecast,
    last_value,
    local_scale,
    quantile_pair,
    seasonal_naive,
    seasonal_quantile,
)
from gpusched.sim import Simulation, TraceJob, load_jobs, traces_dir
from tests.processes import running

TRACES = traces_dir(Path(__file__).resolve().parents[2].parent / "shared" / "traces")
PHILLY = TRACES / "philly_dev.jobs.csv"
DAY = 86400.0
HOURLY = ModelConfig(step_s=3600.0)


def test_quantile_pair_is_numpys_quantile_to_the_bit() -> None:
    rng = np.random.default_rng(5)
    for n in [1, 2, 3, 7, 8, 57, 400, 5000]:
        for _ in range(40):
            x = rng.standard_normal(n) * rng.choice([1e-3, 1.0, 1e4])
            if rng.random() < 0.3:
                x = np.round(x)  # ties
            for low, high in [(0.1, 0.9), (0.05, 0.95), (0.0, 1.0), (0.5, 0.5), (0.25, 0.75)]:
                assert quantile_pair(x, low, high) == tuple(np.quantile(x, (low, high)))


def _demand(gpus: float, model: str = "V100", tenant: str = "a", cls: str = "normal") -> JobDemand:
    return JobDemand(gpus, model, tenant, cls)


def test_series_time_weighted_demand_and_arrivals() -> None:
    b = SeriesBuilder(600, origin=0.0)
    b.submitted("j1", _demand(4), 0)
    b.submitted("j2", _demand(2, tenant="b", cls="high"), 300)  # half of step 0
    b.ended("j1", 900)  # half of step 1
    b.submitted("j1", _demand(8), 950)  # a repeated submission is ignored
    b.advance(1800)
    assert b.values("gpu_demand/all").tolist() == [5.0, 4.0, 2.0]
    assert b.values("arrivals/all").tolist() == [6.0, 0.0, 0.0]
    assert b.values("gpu_demand/tenant=b").tolist() == [1.0, 2.0, 2.0]
    assert b.values("arrivals/class=high").tolist() == [2.0, 0.0, 0.0]
    assert b.values("gpu_demand/model=V100").tolist() == [5.0, 4.0, 2.0]
    assert b.closed_until == 1800


def test_series_scope_first_seen_later_is_zero_before() -> None:
    b = SeriesBuilder(600, origin=0.0)
    b.submitted("j1", _demand(1), 0)
    b.advance(1200)
    b.submitted("j2", _demand(3, tenant="late"), 1200)
    b.advance(1800)
    assert b.values("gpu_demand/tenant=late").tolist() == [0.0, 0.0, 3.0]
    assert b.values("never/seen").tolist() == [0.0, 0.0, 0.0]


def test_series_late_event_counts_in_the_open_step() -> None:
    b = SeriesBuilder(600, origin=0.0)
    b.submitted("j1", _demand(2), 0)
    b.advance(1200)
    b.ended("j1", 100)  # arrives late: counted at the open step's start
    b.advance(1800)
    assert b.values("gpu_demand/all").tolist() == [2.0, 2.0, 0.0]


def test_job_demand_of_core_job() -> None:
    job = Job("j", Request(2, frozenset({"V100M32", "V100M16"})), 0.0, "vc1", "high")
    d = JobDemand.of(job)
    assert (d.gpu_model, d.tenant, d.priority_class) == ("V100M16|V100M32", "vc1", "high")
    assert JobDemand.of(Job("k", Request(1), 0.0)).gpu_model == "any"


def _seasonal(days: int, step_s: float = 3600.0, noise: float = 1.0) -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(int(days * DAY / step_s)) * step_s
    return 100 + 30 * np.sin(2 * np.pi * t / DAY) + rng.normal(0, noise, len(t))


def test_fallback_to_seasonal_naive_says_so() -> None:
    history = _seasonal(1.5)  # more than a season, less than the 2 days Prophet needs
    f = forecast_auto(history, start=len(history) * 3600.0, horizon=6, cfg=HOURLY)
    assert f.model == "seasonal_naive"
    assert f.note is not None
    assert "fallback" in f.note
    assert "Prophet" in f.note
    assert f.yhat.tolist() == history[-24:-18].tolist()  # one day earlier
    assert np.all(f.lower <= f.yhat)
    assert np.all(f.yhat <= f.upper)


def test_fallback_under_one_season_is_last_value() -> None:
    f = forecast_auto(np.array([3.0, 5.0, 4.0]), start=0.0, horizon=3, cfg=HOURLY)
    assert f.model == "last_value"
    assert f.note
    assert "less than one season" in f.note
    assert f.yhat.tolist() == [4.0, 4.0, 4.0]


def test_prophet_learns_the_daily_cycle() -> None:
    history = _seasonal(14)
    f = forecast_auto(history, start=len(history) * 3600.0, horizon=24, cfg=HOURLY)
    assert f.model == "prophet"
    assert f.note is None
    truth = _seasonal(15, noise=0.0)[-24:]
    assert np.mean(np.abs(f.yhat - truth)) < 3.0  # noise sd 1, amplitude 30
    assert np.all(f.lower <= f.yhat)
    assert np.all(f.yhat <= f.upper)


def test_baseline_intervals_come_from_the_history() -> None:
    steady = np.full(48, 10.0)
    assert seasonal_naive(steady, 0.0, 5, HOURLY).upper.tolist() == [10.0] * 5
    assert last_value(steady, 0.0, 5, HOURLY).lower.tolist() == [10.0] * 5
    f = last_value(np.arange(48.0), 0.0, 3, HOURLY)  # rises by 1 each step
    assert f.yhat.tolist() == [47.0] * 3
    assert f.upper.tolist() == [48.0, 49.0, 50.0]


def test_calibrator_learns_the_spread_of_past_errors() -> None:
    """Truth swings 50 +- 5 around a flat forecast whose own interval says +- 1; errors
    are relative to the scale given, so a doubled scale doubles the interval."""
    cal = Calibrator(width=0.8, min_errors=4)
    truth = 50 + 5 * np.resize([1.0, -1.0], 200)
    flat = np.full(4, 50.0)
    first = Forecast("m", 0.0, 1.0, flat, flat - 1, flat + 1)
    assert cal.calibrate(first, 1.0) is first  # no errors yet: the model's own interval
    for origin in range(4, 44, 4):
        cal.observe(truth, 0.0, float(origin))
        f = cal.calibrate(Forecast("m", float(origin), 1.0, flat, flat - 1, flat + 1), 1.0)
    assert f.lower.tolist() == [45.0] * 4
    assert f.upper.tolist() == [55.0] * 4
    wide = cal.calibrate(Forecast("m", 44.0, 1.0, flat, flat - 1, flat + 1), 2.0)
    assert wide.upper.tolist() == [60.0] * 4
    other = cal.calibrate(Forecast("other", 44.0, 1.0, flat, flat - 1, flat + 1), 1.0)
    assert other.upper.tolist() == [51.0] * 4  # errors are kept per model
    assert local_scale(np.array([1.0, 3.0, 1.0, 3.0]), 3) == 2.0


def test_fit_many_over_budget_falls_back_with_a_note() -> None:
    history = _seasonal(20)
    tasks = {f"s{i}": FitTask(history, 0.0, 6) for i in range(3)}
    out = fit_many(tasks, HOURLY, workers=1, budget_s=0.0)
    assert {f.model for f in out.values()} == {"seasonal_naive"}
    assert all(f.note and "budget" in f.note for f in out.values())


_POOL_SCRIPT = """
import os, time
from gpusched.forecaster.fitting import fit_pool
pool = fit_pool(2)
pool.submit(os.getpid).result()
print(*pool._processes, flush=True)
time.sleep(600)
"""


def test_fit_processes_end_when_the_process_that_made_them_is_killed() -> None:
    """A SIGKILL to the owner of the fit pool alone (a matrix worker, the dispatcher)
    leaves no fit process behind: each ends with it."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _POOL_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        fits = [int(p) for p in owner.stdout.readline().split()]
        assert len(fits) == 2, fits
    finally:
        owner.kill()
        owner.wait()
    deadline = time.monotonic() + 30
    while (alive := [p for p in fits if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in alive:  # so that a failure leaves no orphans behind either
        os.kill(pid, signal.SIGKILL)
    assert not alive, alive


def test_offered_demand_of_a_real_trace_slice() -> None:
    jobs = load_jobs(PHILLY)[:2000]
    b = offered_demand(
        ((j.job_id, j.submit_time, j.duration_s, JobDemand.of(j.job())) for j in jobs), 600
    )
    arrivals = b.values("arrivals/all")
    assert arrivals.sum() == pytest.approx(sum(j.request.num_gpu for j in jobs[:-1]), abs=64)
    assert {"gpu_demand/class=high", "gpu_demand/class=normal"} <= set(b.names())
    assert b.values("gpu_demand/all").min() >= 0


def _philly_days(tmp_path: Path, days: float) -> Path:
    """The first ``days`` of the real trace, as a trace file."""
    head = PHILLY.read_text().splitlines()
    first = float(head[1].split(",")[1])
    rows = [r for r in head[1:] if float(r.split(",")[1]) < first + days * DAY]
    trace = tmp_path / "slice.jobs.csv"
    trace.write_text("\n".join([head[0], *rows]) + "\n")
    return trace


@pytest.mark.slow
def test_backtest_command_on_a_slice_of_philly(tmp_path: Path) -> None:
    """Six days of the real trace: 3 days of training, an origin every 12 h."""
    trace = _philly_days(tmp_path, 6)
    out = tmp_path / "bt.json"
    result = CliRunner().invoke(
        app,
        ["forecast", "backtest", "--jobs", str(trace), "--json", str(out),
         "--min-train", "3d", "--every", "12h", "--workers", "1"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["series"] == "gpu_demand/all"
    assert doc["origins"] >= 4
    assert set(doc["horizons"]) == {"1h", "6h"}
    assert doc["horizons"]["6h"]["seasonal_naive"]["mase"] > 0
    for by_model in doc["horizons"].values():
        assert set(by_model) == {
            "prophet",
            "seasonal_naive",
            "seasonal_quantile",
            "last_value",
            "survival",
            "forecaster",
        }
        for scores in by_model.values():
            assert scores["mase"] >= 0
            assert 0 <= scores["coverage"] <= 1
            assert scores["n"] == doc["origins"]
    rows = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert any(line.startswith("│ forecaster") for line in rows)
    assert all(len(line) <= 80 and line[-1] in "┓┃┩│┘" for line in rows)  # 80 columns


def test_backtest_command_scores_only_the_models_asked_for(tmp_path: Path) -> None:
    out = tmp_path / "bt.json"
    result = CliRunner().invoke(
        app,
        ["forecast", "backtest", "--jobs", str(_philly_days(tmp_path, 6)), "--json", str(out),
         "--min-train", "3d", "--every", "12h", "--models", "last_value,forecaster"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for by_model in json.loads(out.read_text())["horizons"].values():
        assert set(by_model) == {"last_value", "forecaster"}
    assert "prophet" not in result.stdout


def test_backtest_command_refuses_bad_options(tmp_path: Path) -> None:
    runner = CliRunner()
    bad_step = runner.invoke(
        app, ["forecast", "backtest", "--jobs", str(PHILLY), "--json", "x", "--horizons", "7m"]
    )
    assert bad_step.exit_code == 2
    assert "whole number" in bad_step.output
    bad_series = runner.invoke(
        app, ["forecast", "backtest", "--jobs", str(PHILLY), "--json", "x", "--series", "nope"]
    )
    assert bad_series.exit_code == 2
    assert "gpu_demand/all" in bad_series.output
    bad_model = runner.invoke(
        app, ["forecast", "backtest", "--jobs", str(PHILLY), "--json", "x", "--models", "arima"]
    )
    assert bad_model.exit_code == 2
    assert "'arima'" in bad_model.output
    assert "forecaster" in bad_model.output


def test_outlook_refits_on_what_the_simulation_has_shown_it() -> None:
    """Four days of a steady daily cycle on a small cluster: after the first season the
    outlook has forecasts; the dynamic policy then parks by them."""
    cfg = ModelConfig(step_s=3600.0, min_history_s=2 * DAY)
    outlook = ForecastOutlook(cfg, refit_s=DAY, horizon_s=6 * 3600.0)
    assert outlook.demand_rise(0.0, 3600) is None
    assert outlook.arrivals(0.0, 60, "high") is None
    nodes = [NodeSpec(f"n{i}", "V100", 8, 10**6, 10**6) for i in range(8)]
    jobs = []
    for h in range(4 * 24):
        busy = 4 if (h % 24) < 12 else 1  # 4 jobs an hour by day, 1 by night
        for k in range(busy):
            jobs.append(TraceJob(f"j{h}-{k}", h * 3600.0 + k, 1800.0, Request(8), "t", "normal"))
    sim = Simulation(nodes, jobs, "dynamic", params=Params(), outlook=outlook)
    run = sim.run()
    assert outlook.refits >= 3
    assert set(outlook.forecasts) == {"gpu_demand/all", "arrivals/class=high"}
    # the service's models: total demand from the jobs seen, class arrivals by seasonal
    # quantiles
    assert outlook.forecasts["gpu_demand/all"].model == "forecaster"
    assert outlook.forecasts["arrivals/class=high"].model == "seasonal_quantile"
    assert len(run.outcomes) == len(jobs)
    t = outlook.forecasts["arrivals/class=high"].start
    assert outlook.arrivals(t, 1800, "high") == pytest.approx(0.0, abs=1e-6)  # none in it
    assert outlook.demand_rise(t, 3600) is not None
    assert outlook.demand_rise(t + 10 * DAY, 60) is None  # beyond the horizon: no forecast


class _Outlook:
    """A fixed forecast (the DemandOutlook protocol is ours; nothing real is replaced)."""

    def __init__(self, rise: float, later: float, high: float) -> None:
        self.rise, self.later, self.high = rise, later, high

    def demand_rise(self, now: float, span_s: float) -> float | None:
        return self.rise if span_s <= 480 else self.later

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        return self.high if priority_class == "high" else None


def _cluster(outlook: _Outlook | None, consolidate: bool = False, bursts: float = 0.0) -> Scheduler:
    """Ten nodes of 8 GPUs, one busy; ``bursts``: as many days before 0 in which 8 GPUs
    arrived every 10 minutes and left 5 minutes later."""
    nodes = [NodeSpec(f"n{i}", "V100", 8, 10**6, 10**6) for i in range(10)]
    params = Params(dynamic_consolidate=consolidate)
    sched = Scheduler(
        nodes, make_policy("dynamic"), make_placement("bestfit"), params, outlook=outlook
    )
    for i in range(int(bursts * DAY / 600)):
        sched.demand.change(-bursts * DAY + i * 600.0, 8.0)
        sched.demand.change(-bursts * DAY + i * 600.0 + 300.0, -8.0)
    sched.submit(Job("busy", Request(8), 0.0), 0.0)
    sched.cycle(0.0)
    return sched


def _parked(sched: Scheduler) -> int:
    return sum(n.power is PowerState.PARKED for n in sched.state.nodes.values())


@pytest.mark.parametrize(
    ("outlook", "parked_at_700", "parked_at_1000"),
    [
        (None, 0, 6),  # fixed headroom 16.4 GPUs: 3 idle nodes kept, parking after 900 s
        (_Outlook(0, 0, 4), 8, 8),  # no rise, no fixed headroom: high-class room only,
        # parked after 600 s
        (_Outlook(0, 20, 4), 6, 6),  # a rise within the hour keeps 3 more nodes on
        (_Outlook(8, 8, 8), 7, 7),  # a rise and high arrivals before a wake is done
    ],
)
def test_dynamic_parks_by_the_forecast(
    outlook: _Outlook | None, parked_at_700: int, parked_at_1000: int
) -> None:
    """Without consolidation the forecast takes the fixed headroom's place."""
    sched = _cluster(outlook)
    sched.cycle(700.0)
    assert _parked(sched) == parked_at_700
    sched.cycle(1000.0)
    assert _parked(sched) == parked_at_1000


@pytest.mark.parametrize(
    ("outlook", "parked_at_700", "parked_at_1000"),
    [
        (_Outlook(0, 0, 4), 6, 6),  # the fixed headroom (16.4 GPUs) stays under it
        (_Outlook(0, 20, 4), 6, 6),  # a rise within the hour: as much as the fixed
        (_Outlook(0, 40, 4), 3, 3),  # a larger rise keeps more on
    ],
)
def test_a_consolidating_dynamic_keeps_the_fixed_headroom_after_a_move(
    outlook: _Outlook, parked_at_700: int, parked_at_1000: int
) -> None:
    """For the look-ahead (an hour) after a consolidation move, the fixed headroom
    stays under the forecast's; with no move, the forecast's alone (the case above)."""
    sched = _cluster(outlook, consolidate=True)
    sched.migrated_at = 0.0  # as if a job had been moved at 0
    sched.cycle(700.0)
    assert _parked(sched) == parked_at_700
    sched.cycle(1000.0)
    assert _parked(sched) == parked_at_1000


def test_the_floor_ends_a_look_ahead_after_the_last_move() -> None:
    sched = _cluster(_Outlook(0, 0, 4), consolidate=True)
    sched.migrated_at = 700.0 - 3601.0  # moved longer ago than the look-ahead (1 h)
    sched.cycle(700.0)
    assert _parked(sched) == 8  # the forecast's headroom alone, as without consolidation


@pytest.mark.parametrize(("bursts", "parked"), [(2.0, 8), (0.5, 9)])
def test_the_headroom_covers_the_bursts_a_forecast_step_hides(bursts: float, parked: int) -> None:
    """The forecast sees no rise, but half the minutes of the bursts saw a rise of 8
    GPUs within a wake's lead (480 s): its 0.9 quantile keeps one idle node on, once
    there is a day of history."""
    sched = _cluster(_Outlook(0, 0, 0), bursts=bursts)
    sched.cycle(700.0)
    assert _parked(sched) == parked


def test_dynamic_wakes_ahead_of_predicted_demand() -> None:
    sched = _cluster(_Outlook(0, 0, 0))
    sched.cycle(700.0)
    assert _parked(sched) == 9  # only the busy node on: the forecast sees no rise
    sched.outlook = _Outlook(20, 20, 4)  # a burst predicted before a wake would finish
    woken = [d for d in sched.cycle(800.0).decisions if type(d).__name__ == "WakeNode"]
    assert len(woken) == 3  # 24 GPUs more wanted: three nodes of 8


def test_seasonal_quantile_keeps_the_daily_profile_and_ignores_one_odd_day() -> None:
    day = np.r_[np.zeros(8), np.full(8, 5.0), np.zeros(8)]  # arrivals 08:00-16:00
    history = np.tile(day, 7)
    history[-24 + 2] = 100.0  # yesterday a burst at 02:00
    f = seasonal_quantile(history, 0.0, 30, HOURLY)
    assert f.model == "seasonal_quantile"
    assert f.yhat.tolist() == [*day, *day[:6]]  # the median of 7 days: the burst is out
    assert f.upper[2] > 0  # ... but the interval knows it happened
    assert np.all(f.lower <= f.yhat)
    assert np.all(f.yhat <= f.upper)
    short = seasonal_quantile(history[:30], 0.0, 4, HOURLY)  # one whole day known
    assert short.yhat.tolist() == history[6:10].tolist()
    assert arrivals_forecast(history, 0.0, 4, HOURLY).model == "seasonal_quantile"
    early = arrivals_forecast(history[:10], 0.0, 4, HOURLY)  # under one season
    assert early.model == "last_value"
    assert early.note is not None
    assert "one season" in early.note
