"""What the dynamic policy asks of a demand forecast (``DemandOutlook``).

The core only reads forecasts; who makes them (the forecaster service live, the same
forecaster code fitted on a trace's past in the simulator) is the caller's business.
Times are scheduler time; amounts are GPUs requested.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["DemandOutlook"]


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
