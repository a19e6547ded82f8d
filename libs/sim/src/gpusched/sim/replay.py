"""Replays a trace through named policies and returns the replay JSON document."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpusched.core import Params, UnknownName
from gpusched.core.placement import PLACEMENTS
from gpusched.core.policies import POLICIES, policy_names
from gpusched.sim.engine import RunResult, Simulation, TraceOutlook
from gpusched.sim.errors import SimError
from gpusched.sim.metrics import summarize
from gpusched.sim.traces import TraceJob, load_cluster, load_jobs, trace_name

__all__ = ["EXPERIMENTS", "VARIANTS", "replay", "select_jobs"]

EXPERIMENTS = ("queueing", "packing")
# Names a replay accepts besides the policies: the policy they run, without a forecast.
VARIANTS = {"dynamic-noforecast": "dynamic"}


def reads_outlook(policy: str) -> bool:
    return bool(getattr(POLICIES[policy], "reads_outlook", False))


def select_jobs(
    jobs_path: Path,
    time_scale: float = 1.0,
    window: tuple[float, float] | None = None,
    max_gpus: float | None = None,
) -> list[TraceJob]:
    """The jobs of a trace that a replay runs: submitted in ``window`` (seconds of the
    trace, before time scaling) and asking for at most ``max_gpus`` GPUs."""
    jobs = load_jobs(jobs_path, time_scale)
    if window is not None:
        start, end = window[0] / time_scale, window[1] / time_scale
        jobs = [j for j in jobs if start <= j.submit_time < end]
    if max_gpus is not None:
        jobs = [j for j in jobs if j.request.num_gpu <= max_gpus]
    if not jobs:
        where = f" in the window {window}" if window is not None else ""
        fits = f" asking for <= {max_gpus:g} GPUs" if max_gpus is not None else ""
        raise SimError(f"{jobs_path}: no job{where}{fits}")
    return jobs


def replay(
    jobs_path: Path,
    cluster_path: Path,
    policies: list[str],
    experiment: str = "queueing",
    placement: str = "bestfit",
    time_scale: float = 1.0,
    seed: int = 0,
    params: Params | None = None,
    on_start: Callable[[str, int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
    outlook: Callable[[], TraceOutlook] | None = None,
    window: tuple[float, float] | None = None,
    max_gpus: float | None = None,
) -> tuple[dict[str, Any], dict[str, RunResult]]:
    """Run each policy over the trace; the JSON document and the raw runs (for plots).

    ``outlook`` makes a fresh demand forecast for each run of a policy by its own name
    (``dynamic``); a variant of ``VARIANTS`` runs its policy without one. ``window``
    keeps the jobs submitted in [start, end) seconds of the trace (before time scaling),
    ``max_gpus`` those that ask for at most that many GPUs.
    """
    if experiment not in EXPERIMENTS:
        raise SimError(f"unknown experiment {experiment!r}; accepted: {', '.join(EXPERIMENTS)}")
    for name in policies:
        if name not in policy_names() and name not in VARIANTS:
            raise UnknownName("policy", name, [*policy_names(), *VARIANTS])
    if placement not in PLACEMENTS:
        raise UnknownName("placement", placement, list(PLACEMENTS))
    nodes = load_cluster(cluster_path)
    jobs = select_jobs(jobs_path, time_scale, window, max_gpus)
    runs: dict[str, RunResult] = {}
    results: dict[str, Any] = {}
    skipped: list[dict[str, str]] = []
    for name in policies:
        if on_start:
            on_start(name, len(jobs))
        policy = VARIANTS.get(name, name)
        sim = Simulation(
            nodes,
            jobs,
            policy,
            placement,
            params,
            experiment=experiment,
            seed=seed,
            outlook=outlook() if outlook and name in POLICIES and reads_outlook(name) else None,
        )
        run = sim.run(on_progress)
        run.policy = name
        runs[name] = run
        results[name] = summarize(run, experiment)
        skipped = [{"job_id": j, "reason": r} for j, r in run.skipped]
    doc = {
        "trace": trace_name(jobs_path),
        "cluster": trace_name(cluster_path),
        "experiment": experiment,
        "placement": placement,
        "time_scale": time_scale,
        "seed": seed,
        **({"window_s": list(window)} if window is not None else {}),
        **({"max_gpus": max_gpus} if max_gpus is not None else {}),
        "results": results,
        "skipped": skipped,
    }
    return doc, runs
