"""``ForecastOutlook``: the dynamic policy's demand forecast, learnt from the cluster as it runs.

It folds the arrivals and ends it is told about into the forecaster's series, refits every
``refit_s`` of scheduler time on what it has seen so far (so in a trace replay it never
sees the trace's future), and answers the core's ``DemandOutlook`` questions from the
latest forecasts. The simulator feeds it directly; the models, series and calibration
are the forecaster service's own: total demand with the forecaster model
(``demand_forecast``, from the jobs seen), class arrivals with ``arrivals_forecast``.

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

from gpusched.core import DEMAND_SERIES, Job, StepForecast, arrivals_series
from gpusched.forecaster.fitting import FitTask, fit_pool, submit_fits
from gpusched.forecaster.models import Calibrator, Forecast, ModelConfig, local_scale
from gpusched.forecaster.series import JobDemand, SeriesBuilder
from gpusched.forecaster.settings import ForecasterSettings
from gpusched.forecaster.survival import demand_forecast

__all__ = ["ForecastOutlook"]


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
        self.wanted = (DEMAND_SERIES, *(arrivals_series(c) for c in classes))
        self.forecasts: dict[str, Forecast] = {}
        self._steps: dict[str, StepForecast] = {}  # the same, as the outlook reads them
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
        tasks = {
            name: FitTask(values, start, self.horizon, "arrivals")
            for name, values in history.items()
            if name != DEMAND_SERIES
        }
        if self._pool is None:
            self._pool = fit_pool(self.workers)
        self._builder.forget_ended_before(start - self.cfg.history_s)
        futures = submit_fits(self._pool, tasks, self.cfg)
        futures[DEMAND_SERIES] = self._pool.submit(
            demand_forecast,
            self._builder.spans(["all"])["all"],
            history[DEMAND_SERIES],
            start,
            self.horizon,
            self.cfg,
        )
        self._fitting = (now + self.delay_s, history, futures)

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
            f = self.forecasts[name] = calibrator.calibrate(forecast, scale)
            self._steps[name] = StepForecast(
                f.start, f.step_s, tuple(map(float, f.yhat)), tuple(map(float, f.upper))
            )
        self.refits += 1

    # -- DemandOutlook ------------------------------------------------------------------
    def demand_rise(self, now: float, span_s: float) -> float | None:
        steps = self._steps.get(DEMAND_SERIES)
        return steps.rise(now, span_s) if steps else None

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        steps = self._steps.get(arrivals_series(priority_class))
        return steps.upper_sum(now, span_s) if steps else None
