"""The data of the console's forecast page: a series' latest forecast with its 80%
interval, what actually happened over the last day (from the job events, by the same
definitions as the forecaster's series), and the dispatcher's park and wake decisions,
all on the forecast's step."""

from __future__ import annotations

import re
from typing import Any

from gpusched.store import StoreSettings, read_query

__all__ = ["forecast_chart", "forecast_series"]

_SERIES = re.compile(
    r"^(gpu_demand|arrivals)/(all|(tenant|class|model)=[A-Za-z0-9][\w.:-]{0,127})$"
)
_HISTORY_H = 24

_LATEST = """
SELECT toUnixTimestamp64Milli(target_ts) / 1000, yhat, lower, upper, step_s,
       toString(generated_at)
FROM forecasts FINAL
WHERE series = '{series}'
  AND generated_at = (SELECT max(generated_at) FROM forecasts WHERE series = '{series}')
ORDER BY target_ts
"""

# GPUs of the jobs present (submitted, not yet ended) at each step, or submitted in it
_JOBS = """
SELECT anyIf(num_gpu, type = 'submitted') AS gpus,
       minIf(ts, type = 'submitted') AS submitted,
       maxIf(ts, type IN ('finished', 'failed', 'cancelled')) AS ended
FROM job_events FINAL
GROUP BY job_id
HAVING countIf(type = 'submitted') > 0 AND {scope}
"""
_DEMAND = """
SELECT toUnixTimestamp(b) AS t, sum(gpus) FROM (
    SELECT gpus, arrayJoin(arrayMap(
        i -> toStartOfInterval(submitted, INTERVAL {step} SECOND) + toIntervalSecond({step} * i),
        range(toUInt32(greatest(dateDiff('second', submitted,
            if(ended > submitted, ended, now64(3))), 0) / {step}) + 1))) AS b
    FROM ({jobs})
    WHERE if(ended > submitted, ended, now64(3)) > now64(3) - INTERVAL {hours} HOUR
) WHERE b > now() - INTERVAL {hours} HOUR GROUP BY b ORDER BY b
"""
_ARRIVALS = """
SELECT toUnixTimestamp(toStartOfInterval(submitted, INTERVAL {step} SECOND)) AS t, sum(gpus)
FROM ({jobs}) WHERE submitted > now64(3) - INTERVAL {hours} HOUR GROUP BY t ORDER BY t
"""
_DECISIONS = """
SELECT toUnixTimestamp(toStartOfInterval(ts, INTERVAL {step} SECOND)) AS t,
       countIf(action = 'park'), countIf(action = 'wake')
FROM placements FINAL
WHERE action IN ('park', 'wake') AND ts > now64(3) - INTERVAL {hours} HOUR
GROUP BY t ORDER BY t
"""


def forecast_series(store: StoreSettings) -> list[str]:
    """The series the forecaster has published."""
    rows = read_query("SELECT DISTINCT series FROM forecasts ORDER BY series", store).rows
    return [str(r[0]) for r in rows]


def _scope(series: str) -> str:
    scope = series.split("/", 1)[1]
    if scope == "all":
        return "1"
    kind, value = scope.split("=", 1)
    column = {"tenant": "anyIf(tenant, type = 'submitted')",
              "class": "anyIf(priority_class, type = 'submitted')"}.get(kind)  # fmt: skip
    if column is None:  # model=
        return f"has(anyIf(gpu_models, type = 'submitted'), '{value}')"
    return f"{column} = '{value}'"


def forecast_chart(series: str, store: StoreSettings) -> dict[str, Any] | None:
    """uPlot's columns (time, actual, forecast, lower, upper, parks, wakes) on one time
    axis, with when the forecast was made; None for a malformed or unknown series."""
    if not _SERIES.match(series):
        return None
    latest = read_query(_LATEST.format(series=series), store).rows
    if not latest:
        return None
    step = int(latest[0][4])
    jobs = _JOBS.format(scope=_scope(series))
    query = _DEMAND if series.startswith("gpu_demand") else _ARRIVALS
    actual = read_query(query.format(step=step, jobs=jobs, hours=_HISTORY_H), store).rows
    decisions = read_query(_DECISIONS.format(step=step, hours=_HISTORY_H), store).rows
    times = sorted({int(r[0]) for r in actual} | {int(r[0]) for r in latest}
                   | {int(r[0]) for r in decisions})  # fmt: skip
    by_time: dict[int, list[Any]] = {t: [None] * 6 for t in times}
    for t, value in actual:
        by_time[int(t)][0] = float(value)
    for t, yhat, lower, upper, _, _ in latest:
        by_time[int(t)][1:4] = [float(yhat), float(lower), float(upper)]
    for t, parks, wakes in decisions:
        by_time[int(t)][4:6] = [int(parks) or None, int(wakes) or None]
    columns = [times] + [[by_time[t][i] for t in times] for i in range(6)]
    return {"series": series, "generated_at": latest[0][5], "step_s": step, "data": columns}
