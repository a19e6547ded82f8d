"""The run-time predictor's fast paths give the answers of their plain definitions."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core.runtime import (
    _VECTOR_FROM,
    STEPS_PER_DOUBLING,
    SortedWindow,
    _scan,
    _step_bounds,
    inverse_gittins,
)

durations_st = st.lists(st.floats(1.0, 1e7, allow_nan=False), min_size=1, max_size=300)


def _window(values: list[float], size: int = 400) -> SortedWindow:
    window = SortedWindow(size)
    for v in values:
        window.add(v)
    return window


@settings(max_examples=200, deadline=None)
@given(durations_st, st.integers(1, 120), st.data())
def test_the_window_array_holds_its_sorted_values(values, size, data):
    window = _window(values, size)
    assert window.sorted_ == sorted(values[-size:])
    assert window.array.tolist() == window.sorted_


@settings(max_examples=300, deadline=None)
@given(durations_st, st.floats(0.0, 2e7, allow_nan=False))
def test_the_vectorized_inverse_gittins_is_the_scan_to_the_bit(values, a):
    window = _window(values)
    tail = [d for d in window.sorted_ if d > a]
    expected = _scan(tail, a) if tail else max(a, 60.0)
    assert inverse_gittins(window, a) == expected  # either path: the same bits


def test_long_tails_take_the_vectorized_path_and_agree_with_the_scan():
    rng = random.Random(7)
    for _ in range(300):
        values = [max(rng.lognormvariate(7.0, 2.5), 1.0) for _ in range(rng.choice([40, 400]))]
        window = _window(values)
        xs = window.sorted_
        a = rng.choice([0.0, xs[0] / 2, rng.uniform(0.0, xs[-_VECTOR_FROM - 1])])
        tail = [d for d in xs if d > a]
        assert len(tail) >= _VECTOR_FROM
        assert inverse_gittins(window, a) == _scan(tail, a)


def test_a_fixed_duration_ranks_as_what_is_left_of_it():
    window = _window([5000.0] * 50)
    assert inverse_gittins(window, 1000.0) == 4000.0
    assert inverse_gittins(window, 6000.0) == 6000.0  # past every sample: as long again


def test_step_bounds_never_disagree_with_the_step():
    # the times next to each step's exact ends, to the last bit: those the bounds take in
    # are in the step
    for step in range(200):
        low, high = _step_bounds(step)
        for end in (2.0 ** (step / STEPS_PER_DOUBLING) - 1.0, 2.0 ** ((step + 1) / 4) - 1.0):
            for a in _ulps_around(end, 64):
                if low <= a < high:
                    assert int(math.log2(a + 1) * STEPS_PER_DOUBLING) == step, (step, a)


def _ulps_around(x: float, n: int) -> list[float]:
    out, lo, hi = [x], x, x
    for _ in range(n):
        lo, hi = math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)
        out += [lo, hi]
    return [a for a in out if a >= 0.0]


def test_a_time_just_inside_a_step_is_within_its_bounds():
    for step in range(1, 100):
        low, high = _step_bounds(step)
        middle = (low + high) / 2
        assert int(math.log2(middle + 1) * STEPS_PER_DOUBLING) == step
        assert low < middle < high
