"""Demand series folded from job lifecycle events, on a fixed step.

Two metrics, each for the whole cluster and per GPU model, tenant and priority class:

- ``gpu_demand``: GPUs requested by pending plus running jobs, averaged over the step
  (time-weighted), so a job that waits adds to demand just as one that runs;
- ``arrivals``: GPUs requested by the jobs submitted during the step.

Series names read ``<metric>/<scope>``: ``gpu_demand/all``, ``gpu_demand/model=V100``,
``arrivals/class=high``. Events may arrive a little out of order (the jobs topic has
several partitions); one older than the open step counts at the open step's start.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from gpusched.core import Job
from gpusched.forecaster.survival import JobSpan

__all__ = ["JobDemand", "SeriesBuilder", "offered_demand", "series_name"]

METRICS = ("gpu_demand", "arrivals")


@dataclass(frozen=True, slots=True)
class JobDemand:
    """What one job adds to demand, and the scopes it counts in."""

    gpus: float
    gpu_model: str  # "any" when the job accepts every model
    tenant: str
    priority_class: str

    @classmethod
    def asking(
        cls, gpus: float, gpu_models: Iterable[str], tenant: str, priority_class: str
    ) -> JobDemand:
        """A job's demand from its request: alternative models joined by '|', none: 'any'."""
        return cls(gpus, "|".join(sorted(gpu_models)) or "any", tenant, priority_class)

    @classmethod
    def of(cls, job: Job) -> JobDemand:
        r = job.request
        return cls.asking(r.num_gpu, r.gpu_models, job.tenant or "default", job.qos or "default")

    def scopes(self) -> tuple[str, ...]:
        return (
            "all",
            f"model={self.gpu_model}",
            f"tenant={self.tenant}",
            f"class={self.priority_class}",
        )


@dataclass(slots=True)
class _Seen:
    submit: float
    end: float | None
    demand: JobDemand


def series_name(metric: str, scope: str) -> str:
    return f"{metric}/{scope}"


class SeriesBuilder:
    """Folds submissions and ends into step-aligned series of every scope seen."""

    def __init__(self, step_s: float, origin: float) -> None:
        self.step_s = float(step_s)
        self.origin = origin - origin % self.step_s  # steps align to multiples of step_s
        self._open = self.origin  # start of the step being accumulated
        self._jobs: dict[str, JobDemand] = {}
        self._ended: set[str] = set()
        self._level: dict[str, float] = {}  # scope -> GPUs now outstanding
        self._area: dict[str, float] = {}  # scope -> GPU-seconds in the open step
        self._arrived: dict[str, float] = {}  # scope -> GPUs submitted in the open step
        self._since = self.origin  # last change inside the open step
        self._closed: dict[str, list[float]] = {}  # series name -> one value per step
        self._steps = 0
        self._spans: dict[str, _Seen] = {}  # every job seen, for the models that read jobs

    # -- folding ------------------------------------------------------------------------
    def submitted(self, job_id: str, demand: JobDemand, t: float) -> None:
        """A job arrived (once per job id: a repeat, even after its end, is ignored)."""
        if job_id in self._jobs or job_id in self._ended:
            return
        self._move_to(t)
        self._jobs[job_id] = demand
        self._spans[job_id] = _Seen(t, None, demand)
        for scope in demand.scopes():
            self._level[scope] = self._level.get(scope, 0.0) + demand.gpus
            self._arrived[scope] = self._arrived.get(scope, 0.0) + demand.gpus

    def ended(self, job_id: str, t: float) -> None:
        """A job finished, failed or was cancelled; an unknown id is ignored."""
        demand = self._jobs.pop(job_id, None)
        if demand is None:
            return
        self._ended.add(job_id)  # redelivered events (at-least-once) must not count twice
        self._spans[job_id].end = t
        self._move_to(t)
        for scope in demand.scopes():
            self._level[scope] = max(self._level[scope] - demand.gpus, 0.0)

    def advance(self, t: float) -> None:
        """Close every step that ends at or before ``t``."""
        self._move_to(t)

    def _move_to(self, t: float) -> None:
        t = max(t, self._since)
        while t >= self._open + self.step_s:
            end = self._open + self.step_s
            self._accumulate(end)
            self._close()
            self._open = end
        self._accumulate(t)

    def _accumulate(self, t: float) -> None:
        dt = t - self._since
        if dt > 0:
            for scope, level in self._level.items():
                if level:
                    self._area[scope] = self._area.get(scope, 0.0) + level * dt
        self._since = t

    def _close(self) -> None:
        for scope in self._level.keys() | self._arrived.keys():
            for metric, value in (
                ("gpu_demand", self._area.get(scope, 0.0) / self.step_s),
                ("arrivals", self._arrived.get(scope, 0.0)),
            ):
                values = self._closed.setdefault(series_name(metric, scope), [])
                values.extend([0.0] * (self._steps - len(values)))  # a scope new this step
                values.append(value)
        self._steps += 1
        self._area.clear()
        self._arrived.clear()

    # -- reading ------------------------------------------------------------------------
    @property
    def closed_until(self) -> float:
        """End of the last closed step: every value before it is final."""
        return self._open

    def names(self) -> list[str]:
        return sorted(self._closed)

    def values(self, name: str) -> np.ndarray:
        """The closed steps of one series, from ``origin``; zeros before it was first seen."""
        values = self._closed.get(name, [])
        return np.array(values + [0.0] * (self._steps - len(values)))

    def items(self) -> Iterator[tuple[str, np.ndarray]]:
        for name in self.names():
            yield name, self.values(name)

    def spans(self, scopes: Iterable[str]) -> dict[str, list[JobSpan]]:
        """The jobs of each scope asked (``all``, ``model=V100`` ...) with when they came
        and went (``end`` None: still present), in one pass over the jobs."""
        out: dict[str, list[JobSpan]] = {scope: [] for scope in scopes}
        for seen in self._spans.values():
            span = JobSpan(seen.submit, seen.end, seen.demand.gpus)
            for scope in seen.demand.scopes():
                if scope in out:
                    out[scope].append(span)
        return out

    def forget_ended_before(self, t: float) -> None:
        """Drop the spans of jobs that ended before ``t`` (older than any model reads)."""
        gone = [jid for jid, s in self._spans.items() if s.end is not None and s.end < t]
        for job_id in gone:
            del self._spans[job_id]


def offered_demand(
    jobs: Iterable[tuple[str, float, float, JobDemand]], step_s: float
) -> SeriesBuilder:
    """Series of a trace as if every job ran at once on an unbounded cluster.

    ``jobs`` gives (job id, submit time, duration, demand). This is the demand a trace
    offers, independent of any scheduler: what the backtest forecasts.
    """
    events: list[tuple[float, int, str, JobDemand | None]] = []
    for job_id, submit, duration, job_demand in jobs:
        events.append((submit, 1, job_id, job_demand))
        events.append((submit + duration, 0, job_id, None))  # an end before a submit at t
    if not events:
        raise ValueError("no jobs: nothing to build a series from")
    events.sort(key=lambda e: (e[0], e[1]))
    last_submit = max(t for t, kind, _, _ in events if kind)
    builder = SeriesBuilder(step_s, events[0][0])
    for t, _, job_id, demand in events:
        if t > last_submit:
            break  # after the last arrival the trace says nothing about demand
        if demand is not None:
            builder.submitted(job_id, demand, t)
        else:
            builder.ended(job_id, t)
    builder.advance(last_submit)
    return builder
