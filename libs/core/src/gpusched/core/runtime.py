"""Online run-time prediction from finished jobs only (never from a job's own duration).

Durations of finished jobs are kept per (tenant, GPU-count class), per tenant and
overall, each a bounded window of recent values. From the empirical distribution of the
most specific history with enough samples it answers:

- ``expected_remaining(job, now)``: E[D - a | D > a], a = time the job has run;
- ``rank_time(job, now)``: the inverse Gittins index — the expected time a job needs per
  unit chance of finishing — which is the order that minimises mean completion time when
  sizes are unknown but their distribution is (Gittins; Aalto et al., 2009). Long-running
  jobs of a heavy-tailed class get *worse* ranks as they age, short classes better.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from gpusched.core.model import Job

__all__ = ["RuntimePredictor", "SortedWindow", "size_class"]


def size_class(num_gpu: float) -> int:
    """GPU-count class: 0 for a share or CPU-only, else log2 of the whole GPU count."""
    return 0 if num_gpu < 1 else 1 + int(math.log2(num_gpu))


@dataclass(slots=True)
class SortedWindow:
    """The last ``window`` values, kept in arrival order and sorted (as a list, and as an
    array of the same values for the vectorized scans)."""

    window: int
    order: deque[float] = field(default_factory=deque)
    sorted_: list[float] = field(default_factory=list)
    version: int = 0
    _array: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._array = np.empty(self.window + 1)
        self._array[: len(self.sorted_)] = self.sorted_

    def add(self, duration: float) -> None:
        self.order.append(duration)
        xs, array = self.sorted_, self._array
        i = bisect.bisect_right(xs, duration)
        xs.insert(i, duration)
        n = len(xs)
        array[i + 1 : n] = array[i : n - 1]  # numpy copies overlapping slices correctly
        array[i] = duration
        if n > self.window:
            old = self.order.popleft()
            j = bisect.bisect_left(xs, old)
            del xs[j]
            array[j : n - 1] = array[j + 1 : n]
        self.version += 1

    @property
    def array(self) -> np.ndarray:
        """``sorted_`` as an array (a view: valid until the next ``add``)."""
        return self._array[: len(self.sorted_)]

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile of the values (None while empty)."""
        xs = self.sorted_
        return xs[min(int(q * len(xs)), len(xs) - 1)] if xs else None


class RuntimePredictor:
    """Learns durations of finished jobs; predicts for running and pending ones."""

    def __init__(
        self,
        window: int = 400,
        min_samples: int = 8,
        prior_s: float = 3600.0,
        by_tenant: bool = True,
    ) -> None:
        self.window, self.min_samples, self.prior_s = window, min_samples, prior_s
        self.by_tenant = by_tenant  # False: condition on the GPU-count class only
        self._hist: dict[tuple[str, int] | str, SortedWindow] = {}
        self._cache: dict[tuple[object, int, int], float] = {}
        self._tail_mean: dict[tuple[int, int, float], float] = {}
        self._resolved: dict[tuple[str, float], SortedWindow | None] = {}
        # per job: (epoch, job, history, its version, rank time, the attained times its
        # time step spans: from, to) of its last rank_times answer; the epoch changes
        # whenever a job's history or a cached rank may change (a history becomes
        # usable, the cache is cleared)
        self._last: dict[str, tuple[int, Job, SortedWindow | None, int, float, float, float]]
        self._last = {}
        self._epoch = 0

    def _keys(self, job: Job) -> tuple[tuple[str, int] | str, ...]:
        """Histories from the most specific to everyone's."""
        size = size_class(job.request.num_gpu)
        if self.by_tenant:
            return ((job.tenant, size), job.tenant, "*")
        return (("*", size), "*")

    def observe(self, job: Job, duration_s: float) -> None:
        """A job finished after running ``duration_s`` seconds in all."""
        for key in self._keys(job):
            hist = self._hist.get(key)
            if hist is None:
                hist = self._hist[key] = SortedWindow(self.window)
            if len(hist.sorted_) + 1 == self.min_samples:
                self._resolved.clear()  # a more specific history becomes usable
                self._epoch += 1
            hist.add(max(duration_s, 1.0))
        self._last.pop(job.job_id, None)

    def _history(self, job: Job) -> SortedWindow | None:
        memo = (job.tenant, job.request.num_gpu)
        if memo in self._resolved:
            return self._resolved[memo]
        found = None
        for key in self._keys(job):
            hist = self._hist.get(key)
            if hist is not None and len(hist.sorted_) >= self.min_samples:
                found = hist
                break
        self._resolved[memo] = found
        return found

    def expected_remaining(self, job: Job, now: float) -> float:
        """E[D - a | D > a]; with no longer history, as long again as it has run."""
        a = job.executed_at(now)
        hist = self._history(job)
        if hist is None:
            return max(self.prior_s - a, a, 60.0)
        xs = hist.sorted_
        i = bisect.bisect_right(xs, a)
        if i >= len(xs):
            return max(a, 60.0)
        memo = (id(hist), hist.version, i)
        mean = self._tail_mean.get(memo)
        if mean is None:
            if len(self._tail_mean) > 200_000:
                self._tail_mean.clear()
            tail = xs[i:]
            mean = self._tail_mean[memo] = sum(tail) / len(tail)
        return mean - a

    def rank_time(self, job: Job, now: float) -> float:
        """1 / Gittins index of the job's remaining run time, in seconds (lower = sooner)."""
        return self.rank_times((job,), now)[0]

    def rank_times(self, jobs: Iterable[Job], now: float) -> list[float]:
        """``rank_time`` of each of ``jobs``, in one call (a cycle asks it of every
        running job). A job whose history and time step are those of its last answer
        gets that answer again, without resolving its history or building the key."""
        history, cache, prior, log2 = self._history, self._cache, self.prior_s, math.log2
        last = self._last
        out = []
        for job in jobs:
            start = job.run_start  # executed_at, inlined: this loop is the replay's hottest
            a = job.executed_s + (now - start if start is not None else 0.0)
            seen = last.get(job.job_id)
            if seen is not None and seen[0] == self._epoch and seen[1] is job:
                hist = seen[2]
                if hist is None:
                    out.append(max(prior - a, a, 60.0))
                    continue
                if seen[3] == hist.version and seen[5] <= a < seen[6]:  # the same step
                    out.append(seen[4])
                    continue
            else:
                hist = history(job)
                if hist is None:
                    last[job.job_id] = (self._epoch, job, None, 0, 0.0, 0.0, 0.0)
                    out.append(max(prior - a, a, 60.0))
                    continue
            step = int(log2(a + 1) * STEPS_PER_DOUBLING)
            key = (id(hist), hist.version, step)
            value = cache.get(key)
            if value is None:
                value = inverse_gittins(hist, a)
                if len(cache) > 200_000:
                    cache.clear()
                    self._epoch += 1  # a step may now be answered for another time
                cache[key] = value
            if len(last) > 200_000:
                last.clear()
            low, high = _step_bounds(step)
            last[job.job_id] = (self._epoch, job, hist, hist.version, value, low, high)
            out.append(value)
        return out


# Attained times share a rank within a step of a quarter doubling (~19%).
STEPS_PER_DOUBLING = 4


@functools.cache
def _step_bounds(step: int) -> tuple[float, float]:
    """Attained times surely in ``step`` (a hair inside its ends, so that the bounds
    never disagree with ``int(log2(a + 1) * STEPS_PER_DOUBLING)``; a time in the hair
    is stepped afresh)."""
    low = 2.0 ** (step / STEPS_PER_DOUBLING) - 1.0
    high = 2.0 ** ((step + 1) / STEPS_PER_DOUBLING) - 1.0
    return low + 1e-9 * (low + 1.0), high - 1e-9 * (high + 1.0)


# Below this many samples past the attained time, the scan in Python is quicker than
# numpy's per-call cost.
_VECTOR_FROM = 32


def inverse_gittins(hist: SortedWindow, a: float) -> float:
    """1 / Gittins index, in seconds, of a job that has run ``a`` seconds, from the
    durations in ``hist``: the least, over quanta Δ up to each longer sample d, of
    E[min(D - a, Δ)] / P(D - a <= Δ | D > a). The Python and the numpy scan do the
    same floating-point operations in the same order (the same answer to the bit)."""
    xs = hist.sorted_
    i = bisect.bisect_right(xs, a)
    n = len(xs) - i
    if n == 0:
        return max(a, 60.0)
    if n < _VECTOR_FROM:
        return _scan(xs[i:], a)
    over = hist.array[i:] - a  # d - a for each longer sample d
    spent = np.empty(n)  # E[min(D - a, Δ)] * n with Δ = d - a, in order of d
    spent[0] = 0.0
    np.cumsum(over[:-1], out=spent[1:])  # sum of (d - a) for samples already passed
    spent += np.arange(n, 0, -1, dtype=np.float64) * over
    spent /= np.arange(1, n + 1, dtype=np.float64)  # samples up to d finish within Δ
    return max(float(spent.min()), 1.0)


def _scan(tail: list[float], a: float) -> float:
    n = len(tail)
    best = math.inf
    cum = 0.0  # sum of (d - a) for samples already passed
    for k, d in enumerate(tail):
        ratio = (cum + (n - k) * (d - a)) / (k + 1)
        if ratio < best:
            best = ratio
        cum += d - a
    return max(best, 1.0)
