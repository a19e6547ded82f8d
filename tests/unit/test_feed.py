"""`gpusched feed` (the live load of `make run`)."""

from __future__ import annotations

from gpusched.cli.feed import busy_start
from gpusched.sim import load_jobs, traces_dir


def test_the_feed_skips_a_quiet_lead_in() -> None:
    """`make run` is busy within a minute: the feed starts where arrivals come as fast as
    they usually do in the trace (openb_default: after 2,828 quiet hours)."""
    quiet = [i * 3600.0 for i in range(20)]  # one job an hour ...
    busy = [quiet[-1] + 60.0 * (i + 1) for i in range(200)]  # ... then one a minute
    assert busy_start(quiet + busy, window=10) == 19  # the last quiet one opens the burst
    assert busy_start(busy, window=10) == 0
    assert busy_start([1.0, 2.0], window=10) == 0
    jobs = load_jobs(traces_dir() / "openb_default.jobs.csv")
    assert busy_start([j.submit_time for j in jobs]) == 366
