"""``ForecastOutlook``: the dynamic policy's demand forecast, learnt from the cluster as it runs.

It folds the arrivals and ends it is told about into the forecaster's series, refits every
``refit_s`` of scheduler time on what it has seen so far (so in a trace replay it never
sees the trace's future), and answers the core's ``DemandOutlook`` questions from the
latest forecasts. The simulator feeds it directly; the models, series and calibration
are the forecaster service's own.

A refit runs in worker processes while the simulation goes on, and its forecasts are
put in use ``delay_s`` of scheduler time after the data they were fitted on ends (the
simulation waits for the fit there if it must). The switch time depends on scheduler
time only, so a replay gives the same numbers however fast the fits are; live, a refit
likewise takes a while before the dispatcher sees it.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np

from gpusched.core import Job
from gpusched.forecaster.fitting import FitTask, submit_fits
from gpusched.forecaster.models import Calibrator, Forecast, ModelConfig, local_scale
from gpusched.forecaster.series import JobDemand, SeriesBuilder
from gpusched.forecaster.settings import ForecasterSettings

__all__ = ["ForecastOutlook"]

DEMAND = "gpu_demand/all"


def arrivals_series(priority_class: str) -> str:
    return f"arrivals/class={priority_class}"


class ForecastOutlook:
    """Forecasts of total GPU demand and of the arrivals of each listed priority class."""

    def __init__(
        self,
        cfg: ModelConfig,
        refit_s: float = 86400.0,
        horizon_s: float = 6 * 3600.0,
        classes: tuple[str, ...] = ("high",),
        workers: int = 1,
        delay_s: float = 1800.0,
    ) -> None:
        self.cfg, self.refit_s, self.workers, self.delay_s = cfg, refit_s, workers, delay_s
        # Each forecast must reach past the next refit by the longest question asked.
        self.horizon = math.ceil((refit_s + horizon_s) / cfg.step_s)
        self.wanted = (DEMAND, *(arrivals_series(c) for c in classes))
        self.forecasts: dict[str, Forecast] = {}
        self.refits = 0
        self._builder: SeriesBuilder | None = None
        self._next_refit = math.inf
        self._calibrators = {name: Calibrator(cfg.interval_width) for name in self.wanted}
        self._pool: ProcessPoolExecutor | None = None
        # A fit under way: when to use it, its history, and the futures of its forecasts.
        self._fitting: tuple[float, dict[str, np.ndarray], dict[str, Future[Forecast]]] | None
        self._fitting = None

    @classmethod
    def from_settings(cls, settings: ForecasterSettings | None = None) -> ForecastOutlook:
        """The forecaster as configured (GPUSCHED_FORECASTER_*), refitting every
        ``forecaster_replay_refit_s`` of simulated time: what ``gpusched replay`` uses."""
        settings = settings or ForecasterSettings()
        return cls(
            settings.models(),
            refit_s=settings.forecaster_replay_refit_s,
            horizon_s=settings.forecaster_horizon_s,
            classes=settings.classes,
            workers=settings.forecaster_workers,
        )

    # -- what happened ------------------------------------------------------------------
    def submitted(self, job: Job, now: float) -> None:
        if self._builder is None:
            self._builder = SeriesBuilder(self.cfg.step_s, now)
            # The first forecast needs one season of history (seasonal-naive at least).
            self._next_refit = self._builder.origin + self.cfg.season_s
        self._builder.submitted(job.job_id, JobDemand.of(job), now)

    def ended(self, job_id: str, now: float) -> None:
        if self._builder is not None:
            self._builder.ended(job_id, now)

    def advance(self, now: float) -> None:
        if self._builder is None:
            return
        self._builder.advance(now)
        if self._fitting is not None and now >= self._fitting[0]:
            self._install()
        if now >= self._next_refit and self._fitting is None:
            self._start_refit(now)
            self._next_refit = now + self.refit_s

    def close(self) -> None:
        """Stop the worker processes (the simulation calls it at its end)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _start_refit(self, now: float) -> None:
        assert self._builder is not None
        start = self._builder.closed_until
        history = {name: self._builder.values(name) for name in self.wanted}
        tasks = {name: FitTask(values, start, self.horizon) for name, values in history.items()}
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        self._fitting = (now + self.delay_s, history, submit_fits(self._pool, tasks, self.cfg))

    def _install(self) -> None:
        assert self._builder is not None
        assert self._fitting is not None
        _, history, futures = self._fitting
        self._fitting = None
        for name, future in futures.items():
            forecast = future.result()
            calibrator = self._calibrators[name]
            calibrator.observe(history[name], self._builder.origin, forecast.start)
            scale = local_scale(history[name], self.cfg.season_steps)
            self.forecasts[name] = calibrator.calibrate(forecast, scale)
        self.refits += 1

    # -- DemandOutlook ------------------------------------------------------------------
    def demand_rise(self, now: float, span_s: float) -> float | None:
        f = self.forecasts.get(DEMAND)
        base = f.at(now) if f else None
        end = f.at(now + span_s) if f else None
        if f is None or base is None or end is None:
            return None
        first = math.floor((now - f.start) / f.step_s)
        last = math.floor((now + span_s - f.start) / f.step_s)
        return float(max(f.yhat[first : last + 1])) - base[0]

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        f = self.forecasts.get(arrivals_series(priority_class))
        if f is None or f.at(now) is None or f.at(now + span_s) is None:
            return None
        # Sum of each step's upper bound times the part of the step inside the window
        # (an upper bound of the sum: on the safe side for headroom).
        total, t, end = 0.0, now, now + span_s
        while t < end:
            i = math.floor((t - f.start) / f.step_s)
            step_end = min(f.start + (i + 1) * f.step_s, end)
            total += float(f.upper[i]) * (step_end - t) / f.step_s
            t = step_end
        return total
