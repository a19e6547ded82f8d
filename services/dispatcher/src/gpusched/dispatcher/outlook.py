"""``LiveOutlook``: the core's DemandOutlook answered from the forecasts topic."""

from __future__ import annotations

from gpusched.contracts import DemandForecast

__all__ = ["LiveOutlook"]

DEMAND = "gpu_demand/all"


class LiveOutlook:
    """The latest forecast of each series, as the forecaster published it."""

    def __init__(self) -> None:
        self.latest: dict[str, DemandForecast] = {}

    def apply(self, forecast: DemandForecast) -> None:
        held = self.latest.get(forecast.series)
        if held is None or forecast.ts >= held.ts:
            self.latest[forecast.series] = forecast

    def _points(self, series: str, now: float, span_s: float) -> list[tuple[float, float, float]]:
        """(start, yhat, upper) of the steps of ``series`` overlapping [now, now + span]."""
        f = self.latest.get(series)
        if f is None or not f.points:
            return []
        steps = [(p.ts.timestamp(), p.yhat, p.upper) for p in f.points]
        if not steps[0][0] <= now or now + span_s >= steps[-1][0] + f.step_s:
            return []  # the forecast does not cover the whole window
        return [s for s in steps if s[0] + f.step_s > now and s[0] <= now + span_s]

    def demand_rise(self, now: float, span_s: float) -> float | None:
        steps = self._points(DEMAND, now, span_s)
        if not steps:
            return None
        return max(s[1] for s in steps) - steps[0][1]

    def arrivals(self, now: float, span_s: float, priority_class: str) -> float | None:
        series = f"arrivals/class={priority_class}"
        steps = self._points(series, now, span_s)
        if not steps:
            return None
        step_s = self.latest[series].step_s
        end = now + span_s
        return sum(
            upper * (min(start + step_s, end) - max(start, now)) / step_s
            for start, _, upper in steps
        )
