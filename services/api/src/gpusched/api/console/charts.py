"""The overview's time series, per minute over the last hours: jobs pending and running
(from the job events: pending from submission to first start, running from first start
to the end), the GPUs' power draw (from telemetry: energy of the minute's samples / 60 s),
and the energy drawn since midnight UTC."""

from __future__ import annotations

import time
from typing import Any

from gpusched.store import StoreSettings, read_query

__all__ = ["overview_series"]

HOURS = 3

_JOBS = """
SELECT minIf(ts, type = 'submitted') AS submitted,
       minIf(ts, type IN ('placed', 'running')) AS started,
       maxIf(ts, type IN ('finished', 'failed', 'cancelled')) AS ended,
       countIf(type IN ('placed', 'running')) > 0 AS ran,
       countIf(type IN ('finished', 'failed', 'cancelled')) > 0 AS done
FROM job_events FINAL GROUP BY job_id
HAVING countIf(type = 'submitted') > 0 AND (NOT done OR ended > now64(3) - INTERVAL {h} HOUR)
"""
# one row per (job, minute it spent in a state), then counted per minute
_STATES = """
SELECT toUnixTimestamp(m) AS t, countIf(state = 'pending'), countIf(state = 'running')
FROM (
    SELECT state, arrayJoin(arrayMap(i -> toStartOfMinute(a) + toIntervalMinute(i),
           range(toUInt32(greatest(dateDiff('minute', toStartOfMinute(a), b), 0)) + 1))) AS m
    FROM (
        SELECT 'pending' AS state, submitted AS a,
               if(ran, started, if(done, ended, now64(3))) AS b FROM jobs
        UNION ALL
        SELECT 'running', started, if(done, ended, now64(3)) FROM jobs WHERE ran
    )
    WHERE b > now64(3) - INTERVAL {h} HOUR
)
WHERE m > now() - INTERVAL {h} HOUR
GROUP BY t ORDER BY t
"""
_POWER = """
SELECT toUnixTimestamp(toStartOfMinute(ts)) AS t, sum(power_w * interval_s) / 60 / 1000
FROM telemetry FINAL WHERE ts > now64(3) - INTERVAL {h} HOUR
GROUP BY t ORDER BY t
"""
_ENERGY_TODAY = """
SELECT round(sum(power_w * interval_s) / 3.6e6, 3) FROM telemetry FINAL
WHERE ts >= toStartOfDay(now())
"""


def overview_series(store: StoreSettings) -> dict[str, Any]:
    """uPlot's columns (minute, pending, running, power kW) and the energy today (kWh)."""
    jobs = _JOBS.format(h=HOURS)
    states = read_query(f"WITH jobs AS ({jobs}) " + _STATES.format(h=HOURS), store).rows
    power = read_query(_POWER.format(h=HOURS), store).rows
    energy = read_query(_ENERGY_TODAY, store).rows
    by_minute: dict[int, list[Any]] = {}
    for t, pending, running in states:
        by_minute.setdefault(int(t), [None, None, None])[0:2] = [int(pending), int(running)]
    for t, kw in power:
        by_minute.setdefault(int(t), [None, None, None])[2] = round(float(kw), 3)
    times = sorted(by_minute)
    columns = [times] + [[by_minute[t][i] for t in times] for i in range(3)]
    return {
        "data": columns,
        "energy_today_kwh": float(energy[0][0] or 0.0),
        "hours": HOURS,
        "now": time.time(),
    }
