"""What-if: the last hours of the cluster's real job events replayed through the
simulator (the core the dispatcher runs) with the parameters in force and with a
candidate change, compared per class (wait), and in preemptions, energy and fairness.

What the store knows is not a trace: a job that finished ran for (end - first start); one
still running is replayed with the time it has run so far (a lower bound); one that never
started gets the median run time of those that finished (the store has no duration for
it). The nodes are those of the live view, each with its GPU model and count.
"""

from __future__ import annotations

import statistics
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from gpusched.core import NodeSpec, Params, Request
from gpusched.sim import SimError, Simulation, TraceJob, summarize
from gpusched.store import StoreSettings, read_query

__all__ = ["WhatIf", "WhatIfRuns"]

POLICY = "dynamic"
_UNLIMITED_CPU, _UNLIMITED_MEM = 10**9, 10**12
_DEFAULT_RUN_S = 600.0  # when no job has finished yet

_JOBS = """
SELECT job_id,
       anyIf(tenant, type = 'submitted'), anyIf(priority_class, type = 'submitted'),
       anyIf(num_gpu, type = 'submitted'), anyIf(gpu_models, type = 'submitted'),
       toUnixTimestamp64Milli(minIf(ts, type = 'submitted')) / 1000 AS submitted,
       toUnixTimestamp64Milli(minIf(ts, type IN ('placed', 'running'))) / 1000,
       toUnixTimestamp64Milli(maxIf(ts, type IN ('finished', 'failed'))) / 1000,
       countIf(type IN ('placed', 'running')) > 0, countIf(type IN ('finished', 'failed')) > 0,
       countIf(type = 'cancelled') > 0
FROM job_events FINAL GROUP BY job_id
HAVING countIf(type = 'submitted') > 0 AND submitted > {since}
ORDER BY submitted
"""
_NODES = """
SELECT node_id, argMax(gpu_model, ts), argMax(gpus_total, ts)
FROM node_views FINAL GROUP BY node_id ORDER BY node_id
"""


def load(hours: float, store: StoreSettings) -> tuple[list[NodeSpec], list[TraceJob], int]:
    """The live view's nodes, the jobs submitted in the last ``hours`` as a trace, and
    how many of them got an estimated run time."""
    now = time.time()
    nodes = [
        NodeSpec(str(n), str(m), int(g), _UNLIMITED_CPU, _UNLIMITED_MEM)
        for n, m, g in read_query(_NODES, store).rows
        if int(g) > 0
    ]
    rows = read_query(_JOBS.format(since=now - hours * 3600), store).rows
    finished = [float(e) - float(s) for *_, s, e, ran, done, _ in rows if ran and done]
    typical = statistics.median(finished) if finished else _DEFAULT_RUN_S
    jobs, estimated = [], 0
    for job_id, tenant, qos, gpus, models, sub, start, end, ran, done, cancelled in rows:
        if cancelled and not ran:
            continue  # withdrawn while pending: it never needed a GPU
        if ran:
            run_s = (float(end) if done else now) - float(start)
        else:
            run_s, estimated = typical, estimated + 1
        request = Request(float(gpus or 1), frozenset(models or ()))
        jobs.append(
            TraceJob(str(job_id), float(sub), max(run_s, 1.0), request, str(tenant), str(qos))
        )
    return nodes, jobs, estimated


@dataclass
class WhatIf:
    """One what-if run: progress while it runs, then the comparison (or an error)."""

    changes: dict[str, Any]
    hours: float
    done: int = 0
    total: int = 0
    rows: list[tuple[str, float, float]] = field(default_factory=list)  # metric, now, after
    note: str = ""
    error: str | None = None
    finished: bool = False

    def run(self, current: Params, store: StoreSettings) -> None:
        """Replay with ``current`` and with ``current`` changed (in a worker thread)."""
        try:
            candidate = current
            for name, value in self.changes.items():
                candidate = candidate.with_setting(name, value)
            nodes, jobs, estimated = load(self.hours, store)
            if not nodes or not jobs:
                raise SimError("no node or no job in the store for that window yet")
            self.total = 2 * len(jobs)
            self.note = (
                f"{len(jobs)} jobs on {len(nodes)} nodes, policy {POLICY}; "
                f"{estimated} never started and were given the median run time"
            )
            results = []
            for params in (current, candidate):
                base = self.done
                sim = Simulation(nodes, jobs, POLICY, "bestfit", params)
                run = sim.run(partial(self._progress, base))
                self.done = base + len(jobs)
                results.append(summarize(run, "queueing"))
            self.rows = _compare(*results)
        except Exception as exc:  # shown on the page: a bad value, an empty window, a bug
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.finished = True

    def _progress(self, base: int, arrived: int) -> None:
        self.done = base + arrived


def _compare(now: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, float, float]]:
    rows = []
    for qos in sorted(set(now["wait_by_qos"]) | set(after["wait_by_qos"])):
        for stat in ("avg_s", "p99_s"):
            a = now["wait_by_qos"].get(qos, {}).get(stat, 0.0)
            b = after["wait_by_qos"].get(qos, {}).get(stat, 0.0)
            rows.append((f"wait {stat.removesuffix('_s')} ({qos}), s", a, b))
    for key, label in (
        ("avg_wait_s", "wait avg (all), s"),
        ("p99_wait_s", "wait p99 (all), s"),
        ("avg_jct_s", "completion time avg, s"),
        ("preemptions", "preemptions"),
        ("energy_kwh", "energy, kWh (power model)"),
        ("fairness", "fairness (Jain, per-tenant slowdown)"),
    ):
        rows.append((label, float(now[key]), float(after[key])))
    return rows


class WhatIfRuns:
    """The what-if runs of this API process, by id (the latest few are kept)."""

    def __init__(self, keep: int = 20) -> None:
        self.keep = keep
        self.runs: dict[str, WhatIf] = {}

    def add(self, run: WhatIf) -> str:
        run_id = uuid.uuid4().hex[:12]
        self.runs[run_id] = run
        while len(self.runs) > self.keep:
            del self.runs[next(iter(self.runs))]
        return run_id
