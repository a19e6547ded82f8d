"""``gpusched forecast backtest``: rolling-origin evaluation of the demand forecasters."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpusched.cli.progress import progress_bar
from gpusched.cli.services import forecast
from gpusched.forecaster import ForecasterSettings, backtest, offered_demand
from gpusched.forecaster.backtest import BACKTEST_MODELS, JobModel
from gpusched.forecaster.series import JobDemand
from gpusched.forecaster.survival import JobSpan, demand_forecast, survival_forecast
from gpusched.sim import SimError
from gpusched.sim.traces import load_jobs, trace_name

__all__ = ["forecast_app", "parse_duration"]

forecast_app = typer.Typer(help="Demand forecasting.", no_args_is_help=True)
forecast_app.command("serve")(forecast)
console = Console(stderr=True)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> float:
    """'10m', '6h', '14d', '90s' or plain seconds -> seconds."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 10m, 6h, 14d")
    return float(match.group(1)) * _UNITS[match.group(2) or "s"]


def _steps(seconds: float, step_s: float, what: str) -> int:
    steps = seconds / step_s
    if steps < 1 or steps != int(steps):
        raise typer.BadParameter(f"{what} must be a whole number (>= 1) of steps of {step_s:g} s")
    return int(steps)


@forecast_app.command("backtest")
def backtest_command(
    jobs: Annotated[Path, typer.Option(help="a *.jobs.csv trace")],
    json_out: Annotated[Path, typer.Option("--json", help="where to write the result JSON")],
    step: Annotated[str, typer.Option(help="series step")] = "10m",
    horizons: Annotated[str, typer.Option(help="comma-separated leads to score")] = "1h,6h",
    series: Annotated[str, typer.Option(help="series to forecast, e.g. gpu_demand/all")] = (
        "gpu_demand/all"
    ),
    every: Annotated[str, typer.Option(help="time between forecast origins")] = "6h",
    min_train: Annotated[str, typer.Option(help="history before the first origin")] = "14d",
    workers: Annotated[int, typer.Option(help="fits run in parallel")] = 2,
) -> None:
    """Backtest the forecasting models on the demand a trace offers: last_value,
    seasonal_naive, prophet (plain, for reference) and, for gpu_demand series, survival
    and forecaster (what the forecaster service publishes for them).

    Model settings (history window, changepoint prior, interval width) are the
    forecaster's (GPUSCHED_FORECASTER_*)."""
    step_s = parse_duration(step)
    leads = {
        h.strip(): _steps(parse_duration(h), step_s, "--horizons") for h in horizons.split(",")
    }
    try:
        trace = load_jobs(jobs)
    except SimError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    builder = offered_demand(
        ((j.job_id, j.submit_time, j.duration_s, JobDemand.of(j.job())) for j in trace), step_s
    )
    if series not in builder.names():
        console.print(
            f"[red]error:[/] no series {series!r}; this trace has: {', '.join(builder.names())}"
        )
        raise typer.Exit(2)
    values = builder.values(series)
    cfg = replace(ForecasterSettings().models(), step_s=step_s)
    every_steps = _steps(parse_duration(every), step_s, "--every")
    train_steps = _steps(parse_duration(min_train), step_s, "--min-train")
    job_models: dict[str, JobModel] = {}
    metric, scope = series.split("/", 1)
    if metric == "gpu_demand":
        spans = [
            JobSpan.of(j.submit_time, j.duration_s, j.request.num_gpu)
            for j in trace
            if scope in JobDemand.of(j.job()).scopes()
        ]
        job_models["survival"] = lambda _, t, horizon: survival_forecast(spans, t, horizon, cfg)
        job_models["forecaster"] = lambda history, t, horizon: demand_forecast(
            spans, history, t, horizon, cfg
        )
    models = (*BACKTEST_MODELS, *job_models)
    with progress_bar(console) as progress:
        origins = max((len(values) - max(leads.values()) - train_steps) // every_steps + 1, 0)
        task = progress.add_task("fits", total=origins * len(BACKTEST_MODELS))
        try:
            result = backtest(
                values,
                builder.origin,
                cfg,
                leads,
                every_steps,
                train_steps,
                workers,
                on_fit=lambda _: progress.advance(task),
                job_models=job_models,
            )
        except ValueError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
    doc = {
        "trace": trace_name(jobs),
        "series": series,
        "step_s": step_s,
        "every_s": every_steps * step_s,
        "min_train_s": train_steps * step_s,
        "interval_width": cfg.interval_width,
        **result,
    }
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=2) + "\n")
    # a row per model: as many models as there are, still within 80 columns
    table = Table(title=f"{doc['trace']} {series}: {result['origins']} origins")
    table.add_column("model")
    for label in result["horizons"]:
        table.add_column(f"{label} MASE", justify="right")
        table.add_column(f"{label} 80% cover", justify="right")
    for model in models:
        cells = []
        for by_model in result["horizons"].values():
            cells += [f"{by_model[model]['mase']:.3f}", f"{by_model[model]['coverage']:.2f}"]
        table.add_row(model, *cells)
    Console().print(table)
