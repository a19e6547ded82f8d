"""The dev scenario matrix (bench/scenarios.yaml) end to end, in worker processes: the
wall time of `make scenarios`, and as a same-run baseline the fifo replay of philly_dev
on philly_512gpu (one process)."""

from __future__ import annotations

import time
from pathlib import Path

from gpusched.sim import replay
from gpusched.sim.matrix import load_matrix, run_matrix

HERE = Path(__file__).resolve().parent


def run() -> dict[str, float]:
    matrix, traces = load_matrix(HERE / "scenarios.yaml")
    start = time.perf_counter()
    replay(traces / "philly_dev.jobs.csv", traces / "philly_512gpu.cluster.csv", ["fifo"])
    baseline_s = time.perf_counter() - start
    start = time.perf_counter()
    run_matrix(matrix, traces)
    matrix_s = time.perf_counter() - start
    return {
        "scenarios_dev_matrix_s": matrix_s,
        "fifo_replay_philly_dev_s": baseline_s,
        "scenarios_dev_matrix_vs_fifo_replay_ratio": matrix_s / baseline_s,
    }
