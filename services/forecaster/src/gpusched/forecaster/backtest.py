"""Rolling-origin backtest of the forecasting models on one series.

At each origin (every ``every`` steps after ``min_train`` steps of history) each model
forecasts up to the longest horizon from the history before the origin only. For each
horizon the error at exactly that lead is scaled by the in-sample mean absolute seasonal
difference of the history at that origin (MASE, Hyndman & Koehler 2006; season = one
day), and the 80% interval is checked for the actual value (coverage). The intervals of
the models in ``CALIBRATED`` are calibrated from their own earlier forecasts in this run
(``Calibrator``), as the live forecaster does for what it publishes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from gpusched.forecaster.fitting import FitTask, fit_many
from gpusched.forecaster.models import Calibrator, Forecast, ModelConfig, local_scale

__all__ = ["BACKTEST_MODELS", "backtest"]

BACKTEST_MODELS = ("prophet", "seasonal_naive", "seasonal_quantile", "last_value")

# intervals from past out-of-sample errors, as the service calibrates what it publishes
CALIBRATED = ("prophet", "seasonal_quantile", "survival", "forecaster")

JobModel = Callable[[np.ndarray, float, int], Forecast]
"""A model that reads the jobs themselves: (series history, origin time, horizon steps)
-> forecast."""


def backtest(
    values: np.ndarray,
    start: float,
    cfg: ModelConfig,
    horizons: Mapping[str, int],
    every: int,
    min_train: int,
    workers: int = 1,
    on_fit: Callable[[str], None] | None = None,
    job_models: Mapping[str, JobModel] | None = None,
    series_models: Sequence[str] = BACKTEST_MODELS,
) -> dict[str, Any]:
    """MASE, interval coverage and the number of origins scored, per horizon (label ->
    steps ahead) and model: the series models of ``series_models`` (some of
    ``BACKTEST_MODELS``) and ``job_models`` (``survival``, ``forecaster``), which also read
    the jobs known at each origin."""
    job_models = job_models or {}
    models: Sequence[str] = (*series_models, *job_models)
    longest = max(horizons.values())
    m = cfg.season_steps
    if min_train <= m:
        raise ValueError(f"min_train ({min_train} steps) must exceed one season ({m} steps)")
    origins = [
        o
        for o in range(min_train, len(values) - longest + 1, every)
        if np.mean(np.abs(values[m:o] - values[: o - m])) > 0
    ]
    if not origins:
        raise ValueError(
            f"series of {len(values)} steps is too short for {min_train} steps of training "
            f"plus a {longest}-step horizon"
        )
    tasks = {
        f"{model}@{o}": FitTask(values[:o], start + o * cfg.step_s, longest, model)
        for o in origins
        for model in series_models
    }
    forecasts = fit_many(tasks, cfg, workers, on_done=on_fit)
    calibrator = Calibrator(cfg.interval_width)
    errors: dict[str, dict[str, list[float]]] = {h: {m_: [] for m_ in models} for h in horizons}
    hits: dict[str, dict[str, list[bool]]] = {h: {m_: [] for m_ in models} for h in horizons}
    for o in origins:
        scale = float(np.mean(np.abs(values[m:o] - values[: o - m])))
        origin_t = start + o * cfg.step_s
        calibrator.observe(values[:o], start, origin_t)
        for name, job_model in job_models.items():
            forecasts[f"{name}@{o}"] = job_model(values[:o], origin_t, longest)
        for model in models:
            f: Forecast = forecasts[f"{model}@{o}"]
            if model in CALIBRATED:
                f = calibrator.calibrate(f, local_scale(values[:o], m))
            for label, lead in horizons.items():
                actual = values[o + lead - 1]
                errors[label][model].append(abs(float(f.yhat[lead - 1]) - actual) / scale)
                hits[label][model].append(bool(f.lower[lead - 1] <= actual <= f.upper[lead - 1]))
    return {
        "origins": len(origins),
        "horizons": {
            label: {
                model: {
                    "mase": round(float(np.mean(errors[label][model])), 4),
                    "coverage": round(float(np.mean(hits[label][model])), 4),
                    "n": len(errors[label][model]),
                }
                for model in models
            }
            for label in horizons
        },
    }
