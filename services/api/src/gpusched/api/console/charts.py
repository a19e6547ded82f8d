"""The console's time series. The overview's, per minute over the last hours: jobs pending
and running (from the job events: pending from submission to first start, running from
first start to the end), the GPUs' power draw (from telemetry: energy of the minute's
samples / 60 s), and the energy drawn since midnight UTC. The tenants page's: each
tenant's part of the GPU time per hour beside its fair share (the query pack's
``fair_share_by_tenant_hour``)."""

from __future__ import annotations

import time
from typing import Any

from gpusched.store import StoreSettings, query_pack, read_query

__all__ = ["fair_share_series", "overview_series"]

HOURS = 3
SHARE_HOURS = 48
SHARE_TENANTS = 8  # the tenants that held the most GPU time; the rest are summed

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


def fair_share_series(store: StoreSettings) -> dict[str, Any]:
    """uPlot's columns over the last SHARE_HOURS: hour, the fair share, then each of the
    SHARE_TENANTS tenants' part of the GPU time (then 'others', when there are more)."""
    sql = (
        f"SELECT toUnixTimestamp(hour), tenant, used_share, fair_share, gpu_hours "
        f"FROM ({query_pack()['fair_share_by_tenant_hour']}) "
        f"WHERE hour > now() - INTERVAL {SHARE_HOURS} HOUR"
    )
    rows = read_query(sql, store).rows
    held: dict[str, float] = {}
    for _, tenant, _, _, gpu_hours in rows:
        held[tenant] = held.get(tenant, 0.0) + float(gpu_hours)
    shown = sorted(held, key=lambda t: -held[t])[:SHARE_TENANTS]
    names = shown + (["others"] if len(held) > len(shown) else [])
    hours = sorted({int(r[0]) for r in rows})
    at = {h: i for i, h in enumerate(hours)}
    fair: list[float | None] = [None] * len(hours)
    used: dict[str, list[float | None]] = {n: [None] * len(hours) for n in names}
    for t, tenant, share, fair_share, _ in rows:
        i = at[int(t)]
        fair[i] = float(fair_share)
        name = tenant if tenant in used else "others"
        used[name][i] = (used[name][i] or 0.0) + float(share)
    return {
        "data": [hours, fair, *used.values()],
        "tenants": names,
        "hours": SHARE_HOURS,
        "now": time.time(),
    }
