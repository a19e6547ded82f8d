"""A scenario matrix: many (trace, cluster, window, time scale) replays, run in parallel
worker processes, compared by ratios to reference policies and summarised over scenarios.

The matrix file (YAML, e.g. ``bench/scenarios.yaml``) declares a tune set and a
validation set; parameters are chosen on the tune set only, and the validation set is
reported first. Every run goes through ``replay`` (the same core the dispatcher runs).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpusched.core import Params
from gpusched.core.policies import policy_names
from gpusched.sim.engine import RunResult, TraceOutlook
from gpusched.sim.errors import SimError
from gpusched.sim.replay import EXPERIMENTS, VARIANTS, replay, select_jobs
from gpusched.sim.report import write_index, write_report
from gpusched.sim.traces import traces_dir

__all__ = [
    "REFERENCES",
    "Matrix",
    "Scenario",
    "Variant",
    "load_matrix",
    "run_matrix",
    "summarize_matrix",
]

REFERENCES = ("tiresias", "srpt-oracle")  # ratios are given against these
SETS = ("validation", "tune")  # the order of every report: validation first


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Variant(_Strict):
    """A policy run with parameters of its own, under a name of its own (a sweep point)."""

    policy: str
    params: dict[str, Any] = Field(default_factory=dict)


class Scenario(_Strict):
    """One workload: a trace (optionally a window of it) on a cluster."""

    name: str
    set: Literal["tune", "validation"]
    jobs: str
    cluster: str
    window_s: tuple[float, float] | None = None
    max_gpus: float | None = Field(default=None, gt=0)  # keep jobs of at most this many GPUs
    time_scale: float = Field(default=1.0, gt=0)
    experiment: str = "queueing"
    placement: str = "bestfit"
    policies: list[str] | None = None  # default: the matrix's
    tags: list[Literal["queueing", "classes", "energy"]] = Field(default_factory=list)
    note: str = ""


class Matrix(_Strict):
    traces: str = "../shared/traces"  # relative to the file; GPUSCHED_TRACES_DIR overrides
    policies: list[str]
    variants: dict[str, Variant] = Field(default_factory=dict)
    scenarios: list[Scenario]

    @model_validator(mode="after")
    def _known_names(self) -> Matrix:
        known = {*policy_names(), *VARIANTS}
        for name, variant in self.variants.items():
            if variant.policy not in known:
                raise ValueError(f"variant {name}: unknown policy {variant.policy!r}")
            _params(variant.params)
        names = [s.name for s in self.scenarios]
        if len(set(names)) != len(names):
            raise ValueError("scenario names must be unique")
        for scenario in self.scenarios:
            if scenario.experiment not in EXPERIMENTS:
                raise ValueError(f"scenario {scenario.name}: unknown experiment")
            for policy in self.policies_of(scenario):
                if policy not in known and policy not in self.variants:
                    raise ValueError(
                        f"scenario {scenario.name}: unknown policy {policy!r}; accepted: "
                        f"{', '.join([*policy_names(), *VARIANTS, *self.variants])}"
                    )
        return self

    def policies_of(self, scenario: Scenario) -> list[str]:
        return scenario.policies if scenario.policies is not None else self.policies


@dataclass(frozen=True, slots=True)
class _Task:
    scenario: Scenario
    policy: str  # the name reported (a variant's name, or a policy)
    runs: str  # the policy that runs
    params: dict[str, Any]
    jobs: Path
    cluster: Path
    size: int  # jobs in the scenario, for progress and for ordering
    outlook: Callable[[], TraceOutlook] | None  # makes a demand forecast (picklable)


def load_matrix(path: Path) -> tuple[Matrix, Path]:
    """The matrix of ``path`` and the directory its trace names are relative to."""
    try:
        data = yaml.safe_load(path.read_text())
        matrix = Matrix.model_validate(data)
    except OSError as exc:
        raise SimError(f"{path}: cannot read: {exc.strerror}") from exc
    except (yaml.YAMLError, ValidationError) as exc:
        raise SimError(f"{path}: not a valid scenario matrix: {exc}") from exc
    return matrix, traces_dir((path.parent / matrix.traces).resolve())


def _trace_path(traces: Path, name: str) -> Path:
    path = Path(name)
    return path if path.is_absolute() or path.exists() else traces / name


def _tasks(
    matrix: Matrix, traces: Path, sets: set[str], outlook: Callable[[], TraceOutlook] | None
) -> list[_Task]:
    tasks = []
    for scenario in matrix.scenarios:
        if scenario.set not in sets:
            continue
        jobs = _trace_path(traces, scenario.jobs)
        cluster = _trace_path(traces, scenario.cluster)
        size = len(select_jobs(jobs, scenario.time_scale, scenario.window_s, scenario.max_gpus))
        for policy in matrix.policies_of(scenario):
            variant = matrix.variants.get(policy)
            runs = variant.policy if variant else policy
            params = variant.params if variant else {}
            tasks.append(_Task(scenario, policy, runs, params, jobs, cluster, size, outlook))
    return tasks


# Relative cost per job of each policy's replay (measured on philly_dev), to start the
# longest runs first so that the workers finish together.
_COST = {"fifo": 0.1, "backfill": 0.6, "srpt-oracle": 1.0, "tiresias": 1.0, "dynamic": 1.4}


def _cost(task: _Task) -> float:
    base = task.runs.split("+")[0]
    return task.size * _COST.get(base, _COST.get(base.split("-")[0], 1.0))


@dataclass(frozen=True)
class _Done:
    scenario: str
    policy: str
    result: dict[str, Any]
    skipped: list[dict[str, str]]
    names: tuple[str, str]  # trace and cluster, as the replay names them
    run: RunResult | None  # for the scenario's report (None when no report is written)


_progress: Any = None  # in a worker: the queue its progress increments go to


def _start_worker(progress: Any) -> None:
    """Worker initializer: keep the progress queue, and end this worker when the matrix
    process ends, however it ends (a SIGTERM or SIGKILL to it alone would otherwise
    leave its workers replaying for nobody)."""
    global _progress
    _progress = progress
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_with, args=(parent,), daemon=True).start()


def _exit_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()
    os._exit(1)


def _run_task(task: _Task, keep_run: bool) -> _Done:
    """Worker: one policy over one scenario; progress increments go to the queue."""
    scenario = task.scenario
    key = f"{scenario.name}/{task.policy}"

    def on_progress(n: int) -> None:
        _progress.put((key, n))

    doc, runs = replay(
        task.jobs,
        task.cluster,
        [task.runs],
        scenario.experiment,
        scenario.placement,
        scenario.time_scale,
        params=_params(task.params),
        on_progress=on_progress,
        outlook=task.outlook,
        window=scenario.window_s,
        max_gpus=scenario.max_gpus,
    )
    return _Done(
        scenario.name,
        task.policy,
        doc["results"][task.runs],
        doc["skipped"],
        (doc["trace"], doc["cluster"]),
        runs[task.runs] if keep_run else None,
    )


def _params(values: dict[str, Any]) -> Params | None:
    """Parameters of a variant (YAML lists become the tuples ``Params`` holds)."""
    if not values:
        return None
    return Params().with_values(
        {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    )


Events = Callable[[str, str, int], None]  # (kind: start|advance|done, run key, number)


def run_matrix(
    matrix: Matrix,
    traces: Path,
    sets: set[str] | None = None,
    workers: int | None = None,
    on_event: Events | None = None,
    report_dir: Path | None = None,
    outlook: Callable[[], TraceOutlook] | None = None,
) -> dict[str, Any]:
    """Run every (scenario, policy) of the chosen sets in ``workers`` processes; the
    matrix document: per scenario its results and ratios, then the summary. With
    ``report_dir``, each scenario's HTML report is written there as soon as its runs are
    done, and ``index.html`` links them. ``outlook`` (a picklable factory, as for
    ``replay``) gives the policies that read one a demand forecast; ``dynamic-noforecast``
    runs without."""
    tasks = _tasks(matrix, traces, set(sets or SETS), outlook)
    left = Counter(t.scenario.name for t in tasks)
    kept: dict[str, dict[str, RunResult]] = {}
    tasks.sort(key=_cost, reverse=True)
    workers = workers or max(os.cpu_count() or 1, 1)
    results: dict[str, dict[str, Any]] = {}
    skipped: dict[str, list[dict[str, str]]] = {}
    context = multiprocessing.get_context("spawn")
    progress = context.Queue()
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start_worker, initargs=(progress,)
    ) as pool:
        futures: dict[Future[Any], _Task] = {}
        for task in tasks:
            futures[pool.submit(_run_task, task, report_dir is not None)] = task
            if on_event:
                on_event("start", f"{task.scenario.name}/{task.policy}", task.size)
        pending = set(futures)
        finished: set[str] = set()  # runs whose increments, late from the queue, are dropped
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            _drain(progress, on_event, finished)
            for future in done:
                d: _Done = future.result()
                results.setdefault(d.scenario, {})[d.policy] = d.result
                skipped[d.scenario] = d.skipped
                left[d.scenario] -= 1
                if report_dir is not None and d.run is not None:
                    kept.setdefault(d.scenario, {})[d.policy] = d.run
                    if not left[d.scenario]:
                        _scenario_report(report_dir, matrix, d, results, kept.pop(d.scenario))
                finished.add(f"{d.scenario}/{d.policy}")
                if on_event:
                    on_event("done", f"{d.scenario}/{d.policy}", 0)
    scenarios = {}
    for scenario in matrix.scenarios:
        if scenario.name not in results:
            continue
        ordered = {p: results[scenario.name][p] for p in matrix.policies_of(scenario)}
        scenarios[scenario.name] = {
            **scenario.model_dump(),
            "results": ordered,
            "ratios": ratios(ordered),
            "skipped": len(skipped.get(scenario.name, [])),
        }
    if report_dir is not None:
        write_index(report_dir / "index.html", scenarios)
    return {"scenarios": scenarios, "summary": summarize_matrix(scenarios)}


def _scenario_report(
    report_dir: Path,
    matrix: Matrix,
    done: _Done,
    results: dict[str, dict[str, Any]],
    runs: dict[str, RunResult],
) -> None:
    scenario = next(s for s in matrix.scenarios if s.name == done.scenario)
    order = matrix.policies_of(scenario)
    doc = {
        "trace": done.names[0],
        "cluster": done.names[1],
        "experiment": scenario.experiment,
        "results": {p: results[scenario.name][p] for p in order},
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    baseline = "tiresias" if "tiresias" in doc["results"] else None
    write_report(report_dir / f"{scenario.name}.html", doc, {p: runs[p] for p in order}, baseline)


def _drain(progress: Any, on_event: Events | None, finished: set[str]) -> None:
    while True:
        try:
            key, n = progress.get_nowait()
        except queue.Empty:
            return
        if on_event and key not in finished:
            on_event("advance", key, n)


_RATIO_FIGURES = (
    "avg_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "preemptions",
    "fairness",
    "energy_kwh",
    "idle_energy_kwh",
    "wake_wait_s",
)


def ratios(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """policy -> reference -> figure -> policy's figure / the reference's (None for 0/0)."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for reference in REFERENCES:
        ref = results.get(reference)
        if ref is None:
            continue
        for policy, r in results.items():
            out.setdefault(policy, {})[reference] = {
                f: _ratio(r.get(f), ref.get(f)) for f in _RATIO_FIGURES
            }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 1.0 if a == 0 else None
    return a / b


def summarize_matrix(scenarios: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per set and policy, over the queueing scenarios: the geometric mean and the worst
    case of its avg and p99 JCT ratios to tiresias."""
    summary: dict[str, Any] = {}
    for set_name in SETS:
        per_policy: dict[str, dict[str, list[float]]] = {}
        for sc in scenarios.values():
            if sc["set"] != set_name or "queueing" not in sc["tags"]:
                continue
            for policy, refs in sc["ratios"].items():
                to_tiresias = refs.get("tiresias", {})
                for figure in ("avg_jct_s", "p99_jct_s"):
                    value = to_tiresias.get(figure)
                    if value:
                        per_policy.setdefault(policy, {}).setdefault(figure, []).append(value)
        if per_policy:
            summary[set_name] = {
                policy: {
                    f"{figure}_vs_tiresias": {
                        "geomean": math.exp(sum(math.log(v) for v in values) / len(values)),
                        "worst": max(values),
                        "scenarios": len(values),
                    }
                    for figure, values in figures.items()
                }
                for policy, figures in per_policy.items()
            }
    return summary
