"""``DemandHistory``: GPU demand (pending plus running) as the scheduler saw it.

The dynamic policy's forecast path asks it how much demand has risen over a span as
long as a wake's lead: a forecast on a 10-minute step predicts the level, not the
bursts within a step, and those are what a woken node arrives too late for. The answer
is a quantile of the rises realised in the last ``history_s``, so it only ever reads
the past (no job's duration, no trace's future).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["DemandHistory"]

FOLD_EVERY = 10_000  # changes between folds when no reading folds them


class DemandHistory:
    """Changes of GPU demand in time; ``rise_quantile`` reads them on a ``sample_s`` grid.

    Changes may be added out of order (a restore adds the ended jobs' after the live
    ones'); those older than ``history_s`` before the latest reading are folded into the
    level they start from.
    """

    def __init__(self, history_s: float = 7 * 86400.0, sample_s: float = 60.0) -> None:
        self.history_s, self.sample_s = history_s, sample_s
        self._times: list[float] = []
        self._deltas: list[float] = []
        self._base = 0.0  # demand at ``_since``, the changes before it folded in
        self._since = -math.inf
        self.level = 0.0  # demand now
        self._latest = -math.inf  # the latest change's time

    def change(self, t: float, gpus: float) -> None:
        """Demand changed by ``gpus`` at ``t`` (a job was submitted: +, ended: -)."""
        if gpus:
            self._times.append(t)
            self._deltas.append(gpus)
            self.level += gpus
            self._latest = max(self._latest, t)
            if len(self._times) % FOLD_EVERY == 0:  # bounded where nobody reads it
                self._fold(self._latest)

    def _fold(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """Sorts the changes and folds those older than ``history_s`` before ``now``
        into the base level; returns the rest as (times, deltas)."""
        times = np.asarray(self._times)
        deltas = np.asarray(self._deltas)
        order = np.argsort(times, kind="stable")
        times, deltas = times[order], deltas[order]
        cutoff = now - self.history_s
        old = times < cutoff
        if old.any():
            self._base += float(deltas[old].sum())
            self._since = max(self._since, cutoff)
            times, deltas = times[~old], deltas[~old]
        self._times, self._deltas = times.tolist(), deltas.tolist()
        return times, deltas

    def rise_quantile(self, now: float, span_s: float, q: float) -> float | None:
        """The ``q`` quantile, over the sample times of the last ``history_s`` before
        ``now``, of the largest rise of demand within ``span_s`` after a sample time
        (0 where it only falls); None with less than a day of history."""
        times, deltas = self._fold(now)
        start = max(self._since, float(times[0])) if len(times) else self._since
        if math.isinf(start) or now - start < 86400.0:  # less than a day of history
            return None
        grid = np.arange(start, now, self.sample_s)
        levels = self._base + np.concatenate(([0.0], np.cumsum(deltas)))
        demand = levels[np.searchsorted(times, grid, side="right")]
        ahead = max(1, math.ceil(span_s / self.sample_s))
        if len(demand) <= ahead:
            return None
        peaks = np.lib.stride_tricks.sliding_window_view(demand[1:], ahead).max(axis=1)
        rises = np.maximum(peaks - demand[: len(peaks)], 0.0)
        return float(np.quantile(rises, q))
