"""Per-policy figures of a run, in the JSON contract of ``gpusched replay``."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from gpusched.sim.engine import JobOutcome, RunResult
from gpusched.sim.errors import SimError

__all__ = ["jain", "percentile", "summarize"]

J_PER_KWH = 3.6e6


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]); 0.0 for no values."""
    if not values:
        return 0.0
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one takes all."""
    if not values:
        return 1.0
    square_sum = sum(v * v for v in values)
    return (sum(values) ** 2) / (len(values) * square_sum) if square_sum else 1.0


def _jct(o: JobOutcome) -> float:
    return o.finish - o.submit


def _wait(o: JobOutcome) -> float:
    # Time pending in all: completion time minus the time it ran.
    return max(_jct(o) - o.run_s, 0.0)


def _by_class(outcomes: list[JobOutcome], metric: Any) -> dict[str, dict[str, float]]:
    groups: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        groups[o.qos or "default"].append(metric(o))
    return {
        qos: {"avg_s": sum(v) / len(v), "p99_s": percentile(v, 99)}
        for qos, v in sorted(groups.items())
    }


def summarize(run: RunResult, experiment: str) -> dict[str, Any]:
    """The result object of one policy, as the replay JSON carries it; ``SimError`` when
    a queueing run left jobs unfinished (averages over the finished ones would flatter)."""
    outs = run.outcomes
    if experiment != "packing" and (run.unfinished or len(outs) != run.submitted):
        first = ", ".join(run.unfinished[:5])
        raise SimError(
            f"{run.policy}: {run.submitted - len(outs)} of {run.submitted} jobs never finished"
            f" (a scheduling bug: they waited forever){'; first: ' + first if first else ''}"
        )
    jcts = [_jct(o) for o in outs]
    waits = [_wait(o) for o in outs]
    start, end = run.window
    span = max(end - start, 1e-9)
    slowdowns: dict[str, list[float]] = defaultdict(list)
    for o in outs:
        slowdowns[o.tenant].append(_jct(o) / max(o.duration_s, 1.0))
    tenant_means = [sum(v) / len(v) for v in slowdowns.values()]
    result: dict[str, Any] = {
        "jobs": len(outs),
        "avg_jct_s": sum(jcts) / len(jcts) if jcts else 0.0,
        "p50_jct_s": percentile(jcts, 50),
        "p95_jct_s": percentile(jcts, 95),
        "p99_jct_s": percentile(jcts, 99),
        "avg_wait_s": sum(waits) / len(waits) if waits else 0.0,
        "p99_wait_s": percentile(waits, 99),
        "max_wait_s": max(waits, default=0.0),
        "wait_by_qos": _by_class(outs, _wait),
        "jct_by_qos": _by_class(outs, _jct),
        "makespan_s": run.makespan_s,
        "gpu_util": run.allocated_gpu_s / (max(run.total_gpus, 1) * span),
        "energy_kwh": run.energy_j / J_PER_KWH,
        "idle_energy_kwh": (run.energy_j - run.floor_energy_j) / J_PER_KWH,
        "floor_energy_kwh": run.floor_energy_j / J_PER_KWH,
        "preemptions": run.preemptions,
        "migrations": run.migrations,
        "wake_wait_s": run.wake_wait_s,
        "parked_node_hours": run.parked_node_s / 3600,
        "fairness": jain(tenant_means),
        "sim_wall_s": run.wall_s,
        "placement": run.placement,
        "skipped": len(run.skipped),
    }
    if experiment == "packing":
        result.update(
            alloc_frac_at_first_failure=run.alloc_frac_at_first_failure,
            alloc_frac_final=run.alloc_frac_final,
            unallocated_gpus_final=run.unallocated_gpus_final,
            failed=run.failed,
        )
    return result
