"""``LiveOutlook``: the core's DemandOutlook answered from the forecasts topic."""

from __future__ import annotations

from datetime import datetime

from gpusched.contracts import DemandForecast
from gpusched.core import DEMAND_SERIES, StepForecast, arrivals_series

__all__ = ["LiveOutlook"]


class LiveOutlook:
    """The latest forecast of each series, as the forecaster published it."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[datetime, StepForecast]] = {}

    def apply(self, forecast: DemandForecast) -> None:
        held = self._latest.get(forecast.series)
        if (held is None or forecast.ts >= held[0]) and forecast.points:
            steps = StepForecast(
                forecast.points[0].ts.timestamp(),
                float(forecast.step_s),
                tuple(p.yhat for p in forecast.points),
                tuple(p.upper for p in forecast.points),
            )
            self._latest[forecast.series] = (forecast.ts, steps)

    def demand_rise(self, now: float, span_s: float) -> float | None:
        held = self._latest.get(DEMAND_SERIES)
        return held[1].rise(now, span_s) if held else None

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        held = self._latest.get(arrivals_series(priority_class))
        return held[1].upper_sum(now, span_s) if held else None
