"""Fitting many series at once: a process pool with a time budget.

Prophet fits are CPU-bound (Stan), so they run in worker processes. A fit that has not
finished within the budget is dropped for this round and that series gets a
seasonal-naive forecast instead, with a note saying so: a late forecast of demand is
worth less than a timely simpler one.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, replace

import numpy as np

from gpusched.forecaster.models import MODELS, Forecast, ModelConfig, forecast_auto, seasonal_naive

__all__ = ["FitTask", "fit_many", "fit_pool", "submit_fits"]


@dataclass(frozen=True, slots=True)
class FitTask:
    """One series to forecast: its history, the time of its first forecast step, and how far."""

    history: np.ndarray
    start: float
    horizon: int
    model: str = "auto"  # or a name of MODELS


def fit_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of fit processes that end with the process that made them, however it
    ends: a SIGKILL to it alone (a killed matrix worker, dispatcher or forecaster) would
    otherwise leave them, and multiprocessing's resource tracker, running for nobody."""
    return ProcessPoolExecutor(max_workers=max(workers, 1), initializer=_end_with_parent)


def _end_with_parent() -> None:
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_after, args=(parent,), daemon=True).start()


def _exit_after(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()
    os._exit(1)


def _fit(task: FitTask, cfg: ModelConfig) -> Forecast:
    if task.model == "auto":
        return forecast_auto(task.history, task.start, task.horizon, cfg)
    return MODELS[task.model](task.history, task.start, task.horizon, cfg)


def submit_fits(
    pool: Executor, tasks: Mapping[str, FitTask], cfg: ModelConfig
) -> dict[str, Future[Forecast]]:
    """Start every task on ``pool``; the caller collects the futures when it needs them."""
    return {name: pool.submit(_fit, task, cfg) for name, task in tasks.items()}


def fit_many(
    tasks: Mapping[str, FitTask],
    cfg: ModelConfig,
    workers: int = 1,
    budget_s: float | None = None,
    on_done: Callable[[str], None] | None = None,
) -> dict[str, Forecast]:
    """Forecast every task, ``workers`` at a time; within ``budget_s`` when given."""
    if workers <= 1 and budget_s is None:
        out = {}
        for name, task in tasks.items():
            out[name] = _fit(task, cfg)
            if on_done:
                on_done(name)
        return out
    deadline = None if budget_s is None else time.monotonic() + budget_s
    out = {}
    pool = fit_pool(workers)
    try:
        futures = {future: name for name, future in submit_fits(pool, tasks, cfg).items()}
        pending = set(futures)
        while pending:
            timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            done, pending = wait(pending, timeout=timeout, return_when="FIRST_COMPLETED")
            for future in done:
                out[futures[future]] = future.result()
                if on_done:
                    on_done(futures[future])
            if not done:
                break  # the budget is spent
        for future in pending:
            future.cancel()
            name = futures[future]
            out[name] = _late(tasks[name], cfg, budget_s or 0.0)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return out


def _late(task: FitTask, cfg: ModelConfig, budget_s: float) -> Forecast:
    note = f"fallback: the Prophet fit did not finish within the {budget_s:g} s budget"
    if len(task.history) >= cfg.season_steps:
        return replace(seasonal_naive(task.history, task.start, task.horizon, cfg), note=note)
    return replace(forecast_auto(task.history, task.start, task.horizon, cfg), note=note)
