"""Forecasting models of one demand series: Prophet, seasonal-naive, seasonal quantiles and
last-value (``arrivals_forecast``: what the service publishes for arrival series).

Every model returns a ``Forecast`` (point forecast and an interval of the configured
width) for ``horizon`` steps after the history. ``forecast_auto`` picks Prophet when the
history is long enough and falls back to seasonal-naive (or last-value, under one
season) otherwise, saying why in ``note``.

Intervals of the two baselines are empirical: quantiles of the history's own errors of
that model at that lead. Prophet's own interval assumes independent noise around trend
and seasonality; demand deviates from its seasonal mean for hours at a time, so that
interval is far too narrow out of sample (38-50% coverage for a nominal 80% on
philly_dev). ``Calibrator`` replaces it with quantiles of the model's past out-of-sample
errors at each lead once enough of them have been observed (split-conformal on the
forecaster's own record; only errors whose target is already in the past are used).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, replace

import numpy as np

__all__ = [
    "MODELS",
    "Calibrator",
    "Forecast",
    "ModelConfig",
    "arrivals_forecast",
    "forecast_auto",
    "last_value",
    "local_scale",
    "prophet",
    "quantile_pair",
    "quantiles",
    "seasonal_naive",
    "seasonal_quantile",
]

DAY_S = 86400.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    step_s: float = 600.0
    interval_width: float = 0.8
    history_s: float = 28 * DAY_S  # Prophet sees at most this much of the past
    min_history_s: float = 2 * DAY_S  # less than this: seasonal-naive instead of Prophet
    season_s: float = DAY_S  # the seasonal-naive period
    changepoint_prior_scale: float = 0.5
    uncertainty_samples: int = 300

    @property
    def season_steps(self) -> int:
        return max(round(self.season_s / self.step_s), 1)


@dataclass(frozen=True, slots=True)
class Forecast:
    """``horizon`` points from ``start`` (the time of the first forecast step), step_s apart."""

    model: str
    start: float
    step_s: float
    yhat: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    note: str | None = None

    def clipped(self) -> Forecast:
        """Demand is never negative; keeps lower <= yhat <= upper."""
        yhat = np.maximum(self.yhat, 0.0)
        lower = np.minimum(np.maximum(self.lower, 0.0), yhat)
        upper = np.maximum(self.upper, yhat)
        return replace(self, yhat=yhat, lower=lower, upper=upper)


def quantiles(width: float) -> tuple[float, float]:
    """The quantile levels that bound a central interval of ``width`` (0.8: 0.1, 0.9)."""
    return (1 - width) / 2, (1 + width) / 2


def quantile_pair(x: np.ndarray, low: float, high: float) -> tuple[float, float]:
    """``np.quantile(x, (low, high))`` (its linear method) of a 1-D array of finite values,
    without numpy's per-call set-up, which costs more than the partition on the arrays
    here (hundreds of calls a forecast): the same order statistics and the same
    interpolation, so the same bits. ``low`` and ``high`` are in [0, 1]."""
    n = len(x)
    picks = []
    for q in (low, high):
        at = (n - 1) * q  # numpy's virtual index
        if at >= n - 1:  # the last value, as numpy takes it
            picks.append((n - 1, n - 1, 0.0))
        else:
            before = math.floor(at)
            picks.append((before, before + 1, at - before))
    ordered = np.partition(x, sorted({i for pick in picks for i in pick[:2]}))
    low_value, high_value = (_lerp(float(ordered[i]), float(ordered[j]), t) for i, j, t in picks)
    return low_value, high_value


def _lerp(a: float, b: float, t: float) -> float:
    # numpy's _lerp: from the nearer end, for accuracy
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def last_value(history: np.ndarray, start: float, horizon: int, cfg: ModelConfig) -> Forecast:
    """The last observed value, with the history's own k-step changes as the interval."""
    y = history[-1]
    lo_q, hi_q = quantiles(cfg.interval_width)
    lower, upper = np.empty(horizon), np.empty(horizon)
    for k in range(1, horizon + 1):
        changes = history[k:] - history[:-k] if len(history) > k else np.zeros(1)
        low, high = quantile_pair(changes, lo_q, hi_q)
        lower[k - 1], upper[k - 1] = y + low, y + high
    return Forecast("last_value", start, cfg.step_s, np.full(horizon, y), lower, upper).clipped()


def seasonal_naive(history: np.ndarray, start: float, horizon: int, cfg: ModelConfig) -> Forecast:
    """The value one season earlier; interval from the history's seasonal differences,
    widened by the square root of the seasons spanned."""
    m = cfg.season_steps
    if len(history) < m:
        raise ValueError(f"seasonal-naive needs one season ({m} steps), got {len(history)}")
    k = np.arange(horizon)
    yhat = history[len(history) - m + k % m]
    diffs = history[m:] - history[:-m] if len(history) > m else np.zeros(1)
    lo_q, hi_q = quantiles(cfg.interval_width)
    widen = np.sqrt(k // m + 1)
    lower = yhat + np.quantile(diffs, lo_q) * widen
    upper = yhat + np.quantile(diffs, hi_q) * widen
    return Forecast("seasonal_naive", start, cfg.step_s, yhat, lower, upper).clipped()


def seasonal_quantile(
    history: np.ndarray, start: float, horizon: int, cfg: ModelConfig, seasons: int = 7
) -> Forecast:
    """Each step's median over the same step of the last ``seasons`` seasons (days), with
    their quantiles as the interval: a daily profile that one odd day does not bend, for
    series of bursts (arrivals) whose mean would overshoot most steps."""
    m = cfg.season_steps
    if len(history) < m:
        raise ValueError(f"seasonal-quantile needs one season ({m} steps), got {len(history)}")
    n = len(history)
    back = np.arange(1, min(seasons, n // m) + 1)  # the whole seasons known, latest first
    # step k ahead is step k % m of a season: the same step of each known season
    same = history[n - m * back[:, None] + (np.arange(horizon) % m)[None, :]]
    lo_q, hi_q = quantiles(cfg.interval_width)
    return Forecast(
        "seasonal_quantile",
        start,
        cfg.step_s,
        np.median(same, axis=0),
        np.quantile(same, lo_q, axis=0),
        np.quantile(same, hi_q, axis=0),
    ).clipped()


def prophet(history: np.ndarray, start: float, horizon: int, cfg: ModelConfig) -> Forecast:
    """Prophet with daily and weekly seasonality over the last ``history_s`` of the series."""
    import pandas as pd

    model_cls = _prophet_class()
    keep = min(len(history), max(int(cfg.history_s / cfg.step_s), 1))
    y = history[-keep:]
    first = start - keep * cfg.step_s
    ds = pd.to_datetime(first + np.arange(keep + horizon) * cfg.step_s, unit="s")
    model = model_cls(
        daily_seasonality=True,
        weekly_seasonality=True,
        yearly_seasonality=False,
        interval_width=cfg.interval_width,
        changepoint_prior_scale=cfg.changepoint_prior_scale,
        uncertainty_samples=cfg.uncertainty_samples,
    )
    model.fit(pd.DataFrame({"ds": ds[:keep], "y": y}))
    out = model.predict(pd.DataFrame({"ds": ds[keep:]}))
    return Forecast(
        "prophet",
        start,
        cfg.step_s,
        out["yhat"].to_numpy(),
        out["yhat_lower"].to_numpy(),
        out["yhat_upper"].to_numpy(),
    ).clipped()


def _prophet_class() -> type:
    # Prophet logs every Stan run at INFO and, as an error, that plotly (for its plots,
    # unused here) is missing; cmdstanpy configures its own handler when first used.
    # Neither says anything a failed fit would not raise.
    logging.getLogger("prophet.plot").setLevel(logging.CRITICAL)
    logging.getLogger("cmdstanpy").disabled = True
    try:
        from prophet import Prophet
    except ImportError as exc:  # pragma: no cover - a dependency of this package
        raise ImportError("Prophet is missing: run `uv sync` (gpusched-forecaster)") from exc
    return Prophet


def arrivals_forecast(
    history: np.ndarray, start: float, horizon: int, cfg: ModelConfig
) -> Forecast:
    """What the forecaster publishes for ``arrivals`` series: ``seasonal_quantile`` (it beat
    Prophet and last-value on philly_dev's arrivals, docs/results.md); under one season of
    history, last-value with a note."""
    if len(history) >= cfg.season_steps:
        return seasonal_quantile(history, start, horizon, cfg)
    have_h = len(history) * cfg.step_s / 3600
    need = f"one season ({cfg.season_s / 3600:g} h) of history, have {have_h:g} h"
    if len(history) == 0:
        return _nothing(start, horizon, cfg, need)
    return replace(last_value(history, start, horizon, cfg), note=f"fallback: {need}")


def _nothing(start: float, horizon: int, cfg: ModelConfig, need: str) -> Forecast:
    """Zeros, saying what was missing: a series with no history at all."""
    zeros = np.zeros(horizon)
    return Forecast("last_value", start, cfg.step_s, zeros, zeros, zeros, f"no history: {need}")


MODELS = {
    "prophet": prophet,
    "seasonal_naive": seasonal_naive,
    "seasonal_quantile": seasonal_quantile,
    "last_value": last_value,
    "arrivals": arrivals_forecast,
}


def forecast_auto(history: np.ndarray, start: float, horizon: int, cfg: ModelConfig) -> Forecast:
    """Prophet when the history covers ``min_history_s``; otherwise a fallback with a note."""
    have_s = len(history) * cfg.step_s
    if have_s >= cfg.min_history_s:
        return prophet(history, start, horizon, cfg)
    need = f"{cfg.min_history_s / 3600:g} h of history for Prophet, have {have_s / 3600:g} h"
    if len(history) >= cfg.season_steps:
        return replace(seasonal_naive(history, start, horizon, cfg), note=f"fallback: {need}")
    if len(history) == 0:
        return _nothing(start, horizon, cfg, need)
    return replace(
        last_value(history, start, horizon, cfg),
        note=f"fallback: {need}, and less than one season for seasonal-naive",
    )


def local_scale(history: np.ndarray, steps: int) -> float:
    """How much the series moves from one step to the next lately (mean absolute change
    over the last ``steps``); errors are stored relative to it, so intervals widen in
    turbulent periods and narrow in calm ones."""
    recent = history[-(steps + 1) :]
    change = float(np.mean(np.abs(np.diff(recent)))) if len(recent) > 1 else 0.0
    level = float(np.mean(np.abs(recent))) if len(recent) else 0.0
    return max(change, 1e-3 * level, 1e-6)


class Calibrator:
    """Out-of-sample errors of one series' past forecasts, per lead, for its intervals.

    Errors are kept relative to the series' local scale when each forecast was made
    (normalised split-conformal), and the leads next to each other are pooled.
    """

    def __init__(self, width: float, window: int = 56, min_errors: int = 8) -> None:
        self.width, self.window, self.min_errors = width, window, min_errors
        self._errors: dict[tuple[str, int], deque[float]] = {}
        self._pending: list[tuple[Forecast, float, int]] = []  # forecast, scale, next lead

    def observe(self, history: np.ndarray, history_start: float, until: float) -> None:
        """Score past forecasts against the history, for target steps that end by ``until``."""
        still: list[tuple[Forecast, float, int]] = []
        for f, scale, i in self._pending:
            while i < len(f.yhat):
                t = f.start + i * f.step_s
                j = round((t - history_start) / f.step_s)
                if t + f.step_s > until or j >= len(history):
                    break
                if j >= 0:
                    errors = self._errors.setdefault((f.model, i), deque(maxlen=self.window))
                    errors.append(float(history[j] - f.yhat[i]) / scale)
                i += 1
            if i < len(f.yhat):
                still.append((f, scale, i))  # the rest is scored once observed
        self._pending = still

    def calibrate(self, forecast: Forecast, scale: float) -> Forecast:
        """The forecast with its interval from past errors where there are enough; it is
        remembered so that its own errors are scored later. ``scale`` is ``local_scale``
        of the history it was made from."""
        lo_q, hi_q = quantiles(self.width)
        lower, upper = forecast.lower.copy(), forecast.upper.copy()
        calibrated = 0
        n = len(forecast.yhat)
        # every lead's errors end to end, in lead order, so that the leads pooled are a
        # slice (the widest pool reaches lead n - 1 + (n - 1) // 4)
        per_lead = [self._errors.get((forecast.model, lead), ()) for lead in range(2 * n)]
        ends = np.cumsum([0, *map(len, per_lead)])
        pooled = np.fromiter((e for errors in per_lead for e in errors), float, ends[-1])
        for i in range(n):
            # Errors change slowly with the lead: pool the neighbouring leads for more of them.
            spread = max(1, i // 4)
            errors = pooled[ends[max(i - spread, 0)] : ends[i + spread + 1]]
            if len(errors) >= self.min_errors:
                lo, hi = quantile_pair(errors, lo_q, hi_q)
                lower[i] = forecast.yhat[i] + lo * scale
                upper[i] = forecast.yhat[i] + hi * scale
                calibrated += 1
        self._pending.append((forecast, scale, 0))
        if not calibrated:
            return forecast
        return replace(forecast, lower=lower, upper=upper).clipped()
