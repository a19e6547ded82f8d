"""A structural forecast of GPU demand: the jobs present now that will still be present,
plus the arrivals that will still be present.

Demand at ``now + h`` (GPUs of pending plus running jobs) is

- for each job present at ``now`` (submitted, not ended) with age ``a``: its GPUs if it
  lasts past ``a + h``, with probability ``S(a + h) / S(a)``, where ``S`` is the
  GPU-weighted Kaplan-Meier survival of job durations learnt from what is known at
  ``now`` (jobs that ended, and the ages of those still present, as censored), each
  job's weight halved per ``SURVIVAL_HALF_LIFE_S`` since its submission;
- plus the GPUs of jobs that arrive in ``(now, now + h]`` and are still present at
  ``now + h``: drawn from the same quantity measured over the windows of the same length
  and phase that started at each step of the recent past and closed by ``now``; how far
  back grows with the lead (``arrival_window_s``: a day at 1 h, six days at 6 h).

The two are drawn together (``draws`` Monte-Carlo samples, a fixed seed): the point
forecast is the median of the draws (absolute error, which MASE scores, is minimised by
the median; arrivals are heavy-tailed, so their mean would overshoot most of the time) and
the interval their quantiles. Nothing after ``now`` is read: a job's end counts only if
it is at or before ``now``.

``demand_forecast`` is what the forecaster publishes for demand series (model name
``forecaster``): the equal-weight mean of this model and last-value. Chosen by the
rolling backtest on philly_dev and the gavel traces (docs/results.md): the survival model
alone is better where departures dominate and worse where bursts of arrivals do, and the
plain mean of the two, with no weight to learn, loses less where either loses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpusched.forecaster.models import Forecast, ModelConfig, last_value, quantiles

__all__ = [
    "SURVIVAL_HALF_LIFE_S",
    "JobSpan",
    "arrival_window_s",
    "demand_forecast",
    "km_survival",
    "survival_forecast",
]

DAY_S = 86400.0
# how fast a job's weight in the survival estimate fades with the time since it was
# submitted: a week, one weekly cycle. The mix of job lengths drifts (on the tune traces
# the unweighted estimate kept 3-5% more of the present jobs at 6 h than stayed), and a
# half-life of 3 to 14 days won all the tune pairs (docs/results.md)
SURVIVAL_HALF_LIFE_S = 7 * DAY_S


@dataclass(frozen=True, slots=True)
class JobSpan:
    """A job's GPUs and time present (submitted until ended; ``end`` None: not ended)."""

    submit: float
    end: float | None
    gpus: float

    @classmethod
    def of(cls, submit: float, duration: float, gpus: float) -> JobSpan:
        """A trace job (its true end: ``survival_forecast`` reads it only once past)."""
        return cls(submit, submit + duration, gpus)


def km_survival(
    durations: np.ndarray, censored: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted Kaplan-Meier: (times, S just after each time), starting at (0, 1).

    ``censored`` marks durations that are only lower bounds (jobs still present)."""
    order = np.argsort(durations, kind="stable")
    d, c, w = durations[order], censored[order], weights[order]
    at_risk = np.cumsum(w[::-1])[::-1]
    ended = ~c & (at_risk > 0)
    factors = 1.0 - np.where(ended, w / np.where(at_risk > 0, at_risk, 1.0), 0.0)
    surv = np.cumprod(factors)
    return np.concatenate(([0.0], d[ended])), np.concatenate(([1.0], surv[ended]))


def _at(times: np.ndarray, values: np.ndarray, t: np.ndarray) -> np.ndarray:
    return values[np.searchsorted(times, t, side="right") - 1]


def arrival_window_s(lead_s: float) -> float:
    """How much of the past the arrivals of a lead are drawn from: 24 windows of that
    lead (one day at 1 h, six at 6 h), at least a day (one daily cycle), at most a week
    (one weekly cycle). Near arrivals follow the recent rate (bursts last hours), far
    ones the longer run; a fixed window is either stale at short leads or noisy at long
    ones (docs/results.md has the candidates)."""
    return min(max(24 * lead_s, DAY_S), 7 * DAY_S)


def survival_forecast(
    jobs: Sequence[JobSpan],
    now: float,
    horizon: int,
    cfg: ModelConfig,
    draws: int = 400,
    seed: int = 0,
) -> Forecast:
    """Demand at the middle of each of the ``horizon`` steps after ``now``."""
    submit = np.array([j.submit for j in jobs], dtype=float)
    end = np.array([np.inf if j.end is None or j.end > now else j.end for j in jobs])
    gpus = np.array([j.gpus for j in jobs], dtype=float)
    seen = submit < now
    present = seen & (end > now)
    ages = now - submit
    times, surv = km_survival(
        np.where(present, ages, end - submit)[seen],
        present[seen],
        gpus[seen] * np.exp2(-ages[seen] / SURVIVAL_HALF_LIFE_S),
    )
    age, held = ages[present], gpus[present]
    alive_now = np.maximum(_at(times, surv, age), 1e-12)
    leads = (np.arange(horizon) + 0.5) * cfg.step_s
    # each lead's windows: its share of the past, within the past known (a window that
    # begins before the first job seen is not known to be empty)
    known = now - (submit[seen].min() if seen.any() else now)
    share = np.minimum([arrival_window_s(h) for h in leads], np.maximum(known - leads, 0.0))
    windows = np.maximum(share // cfg.step_s, 1).astype(int)
    arrived = _recent_arrivals(
        submit[seen], end[seen], gpus[seen], now, horizon, cfg.step_s, int(windows.max())
    )
    rng = np.random.default_rng(seed)
    lo_q, hi_q = quantiles(cfg.interval_width)
    totals = np.empty((horizon, draws))  # each lead's draws of demand
    for k, h in enumerate(leads):
        stay = np.clip(_at(times, surv, age + h) / alive_now, 0.0, 1.0)
        kept = (rng.random((draws, len(stay))) < stay) @ held
        totals[k] = kept + rng.choice(arrived[: windows[k], k], draws)
    lower, upper = np.quantile(totals, [lo_q, hi_q], axis=1)  # every lead in one call
    return Forecast("survival", now, cfg.step_s, np.median(totals, axis=1), lower, upper).clipped()


def _recent_arrivals(
    submit: np.ndarray,
    end: np.ndarray,
    gpus: np.ndarray,
    now: float,
    horizon: int,
    step_s: float,
    windows: int,
) -> np.ndarray:
    """``[j, k]``: the GPUs of the jobs that arrived in a window of lead ``k``'s length
    ending at ``now - (j + 0.5) * step_s`` and were still present at its end: the window
    in the same phase as ``(now, now + lead]`` ``j + 1`` steps back, closed by ``now``.

    A job counts for window end ``e`` when ``submit <= e < end`` and its age there is
    under the lead; so the table is a cumulative sum over age bins of the GPUs present
    at each window end, built from each job's run of window ends."""
    t_end = now - (np.arange(windows) + 0.5) * step_s  # decreasing in j
    oldest = t_end[-1] - horizon * step_s
    keep = (submit > oldest) & (end > t_end[-1])
    submit, end, gpus = submit[keep], end[keep], gpus[keep]
    # window ends e_j with submit <= e_j < min(end, submit + longest lead): a run of j
    first = np.ceil((now - np.minimum(end, submit + horizon * step_s)) / step_s - 0.5)
    first = np.maximum(first, 0).astype(int)
    last = np.minimum(np.floor((now - submit) / step_s - 0.5), windows - 1).astype(int)
    count = np.maximum(last - first + 1, 0)
    job = np.repeat(np.arange(len(submit)), count)
    j = np.repeat(first, count) + (
        np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count)
    )
    age = t_end[j] - submit[job]
    # lead k = (k + 0.5) steps counts the ages under it: bin b holds ages in
    # [(b - 0.5), (b + 0.5)) steps
    b = np.floor(age / step_s + 0.5).astype(int)
    # the rounding of the runs above, checked exactly; and ages past the longest lead
    counted = (age >= 0) & (t_end[j] < end[job]) & (b < horizon)
    table = np.zeros((windows, horizon))
    np.add.at(table, (j[counted], b[counted]), gpus[job[counted]])
    return np.cumsum(table, axis=1)


def demand_forecast(
    jobs: Sequence[JobSpan], history: np.ndarray, now: float, horizon: int, cfg: ModelConfig
) -> Forecast:
    """The forecaster's demand model: the mean of ``survival_forecast`` (from ``jobs``)
    and last-value (from ``history``, the demand series up to ``now``), point forecast
    and interval alike; the interval is calibrated from its own errors downstream."""
    s = survival_forecast(jobs, now, horizon, cfg)
    if len(history) == 0:
        return replace(s, model="forecaster", note="no series history: survival model alone")
    lv = last_value(history, now, horizon, cfg)
    return Forecast(
        "forecaster",
        now,
        cfg.step_s,
        (s.yhat + lv.yhat) / 2,
        (s.lower + lv.lower) / 2,
        (s.upper + lv.upper) / 2,
    ).clipped()
