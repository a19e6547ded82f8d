"""Scheduling-core speed: one dynamic cycle with 2,000 pending jobs on the openb cluster,
and the full philly_dev replay of all five policies (figures named in issue 3)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from gpusched.core import Scheduler, make_placement, make_policy
from gpusched.forecaster import ForecastOutlook
from gpusched.sim import load_cluster, load_jobs, replay, traces_dir

REPO = Path(__file__).resolve().parents[1]
TRACES = traces_dir(REPO.parent / "shared" / "traces")
REPEATS = 7


def _cycle_ms(policy: str) -> float:
    nodes = load_cluster(TRACES / "openb.cluster.csv")
    trace = load_jobs(TRACES / "openb_default.jobs.csv")
    times = []
    for _ in range(REPEATS):
        sched = Scheduler(nodes, make_policy(policy), make_placement("bestfit"))
        now = trace[1999].submit_time
        for t in trace[:2000]:
            sched.submit(t.job(), now)
        start = time.perf_counter()
        sched.cycle(now)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run() -> dict[str, float]:
    dynamic_ms = _cycle_ms("dynamic")
    fifo_ms = _cycle_ms("fifo")
    start = time.perf_counter()
    replay(
        TRACES / "philly_dev.jobs.csv",
        TRACES / "philly_512gpu.cluster.csv",
        ["fifo", "backfill", "tiresias", "srpt-oracle", "dynamic"],
        outlook=ForecastOutlook.from_settings,  # as `gpusched replay` runs dynamic
    )
    replay_s = time.perf_counter() - start
    return {
        "dynamic_cycle_openb_2000_pending_median_ms": dynamic_ms,
        "fifo_cycle_openb_2000_pending_median_ms": fifo_ms,
        "dynamic_cycle_vs_fifo_ratio": dynamic_ms / fifo_ms,
        "replay_philly_dev_all_policies_s": replay_s,
    }
