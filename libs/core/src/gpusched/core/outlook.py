"""What the dynamic policy asks of a demand forecast (``DemandOutlook``).

The core only reads forecasts; who makes them (the forecaster service live, the same
forecaster code fitted on a trace's past in the simulator) is the caller's business.
Times are scheduler time; amounts are GPUs requested.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["DEMAND_SERIES", "DemandOutlook", "StepForecast", "arrivals_series"]

# The forecast series an outlook answers from (names as the forecaster publishes them).
DEMAND_SERIES = "gpu_demand/all"


def arrivals_series(priority_class: str) -> str:
    return f"arrivals/class={priority_class}"


@runtime_checkable
class DemandOutlook(Protocol):
    def demand_rise(self, now: float, span_s: float) -> float | None:
        """The largest predicted rise of GPU demand (pending plus running) above its
        predicted level at ``now``, within ``(now, now + span_s]``; negative when demand
        is expected only to fall; None without a forecast covering that window."""
        ...

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        """Upper bound (top of the forecast interval) of the GPUs that jobs of one
        priority class will request within ``(now, now + span_s]``; None without a
        forecast for that class."""
        ...


@dataclass(frozen=True, slots=True)
class StepForecast:
    """One forecast series on a fixed step (values from ``start``, ``step_s`` apart), with
    the two readings a ``DemandOutlook`` makes of it. Every reading needs the forecast to
    cover the whole window asked about; None otherwise."""

    start: float
    step_s: float
    yhat: tuple[float, ...]
    upper: tuple[float, ...]

    def _window(self, now: float, span_s: float) -> range | None:
        if not self.start <= now or now + span_s >= self.start + len(self.yhat) * self.step_s:
            return None
        first = math.floor((now - self.start) / self.step_s)
        last = math.floor((now + span_s - self.start) / self.step_s)
        return range(first, last + 1)

    def rise(self, now: float, span_s: float) -> float | None:
        """Largest point forecast within ``[now, now + span_s]`` minus the one at ``now``."""
        steps = self._window(now, span_s)
        if steps is None:
            return None
        return max(self.yhat[i] for i in steps) - self.yhat[steps[0]]

    def upper_sum(self, now: float, span_s: float) -> float | None:
        """Each step's upper bound times the part of the step inside the window, summed
        (an upper bound of the sum: on the safe side for headroom)."""
        steps = self._window(now, span_s)
        if steps is None:
            return None
        end = now + span_s
        total = 0.0
        for i in steps:
            lo = max(self.start + i * self.step_s, now)
            hi = min(self.start + (i + 1) * self.step_s, end)
            total += self.upper[i] * (hi - lo) / self.step_s
        return total
