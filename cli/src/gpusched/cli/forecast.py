"""``gpusched forecast backtest``: rolling-origin evaluation of the demand forecasters;
``gpusched forecast show``: the latest published forecast of a series, from the store."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import datetime
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
from gpusched.store import StoreError, read_query

__all__ = ["forecast_app", "parse_duration"]

_SERIES = re.compile(r"[A-Za-z0-9_]+/[A-Za-z0-9_.:|=+-]+")
_LATEST_SQL = """
SELECT toString(target_ts), yhat, lower, upper, model, note, toString(generated_at),
       interval_width
FROM forecasts FINAL
WHERE series = '{series}'
  AND generated_at = (SELECT max(generated_at) FROM forecasts WHERE series = '{series}')
ORDER BY target_ts
"""

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
    models: Annotated[
        str | None, typer.Option(help="comma-separated models to score (default: all)")
    ] = None,
) -> None:
    """Backtest the forecasting models on the demand a trace offers: last_value,
    seasonal_naive, seasonal_quantile (what the service publishes for arrival series),
    prophet (plain, for reference) and, for gpu_demand series, survival and forecaster
    (what the service publishes for them).

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
    every_model = (*BACKTEST_MODELS, *job_models)
    chosen = [m.strip() for m in models.split(",") if m.strip()] if models else list(every_model)
    if unknown := [m for m in chosen if m not in every_model]:
        console.print(
            f"[red]error:[/] no model {', '.join(map(repr, unknown))} for {series}; "
            f"accepted: {', '.join(every_model)}"
        )
        raise typer.Exit(2)
    fitted = [m for m in BACKTEST_MODELS if m in chosen]
    job_models = {name: model for name, model in job_models.items() if name in chosen}
    with progress_bar(console) as progress:
        origins = max((len(values) - max(leads.values()) - train_steps) // every_steps + 1, 0)
        task = progress.add_task("fits", total=origins * len(fitted))
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
                series_models=fitted,
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
    for model in (*fitted, *job_models):
        cells = []
        for by_model in result["horizons"].values():
            cells += [f"{by_model[model]['mase']:.3f}", f"{by_model[model]['coverage']:.2f}"]
        table.add_row(model, *cells)
    Console().print(table)


@forecast_app.command("show")
def show_command(
    series: Annotated[str, typer.Argument(help="e.g. gpu_demand/all, arrivals/class=high")] = (
        "gpu_demand/all"
    ),
    hours: Annotated[float, typer.Option(help="how far ahead to show")] = 6.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """The latest published forecast of one series (from the store): each step's
    forecast, its interval and a bar. Exit 1: no forecast of that series, or the store
    is unreachable; 2: a malformed name."""
    if not _SERIES.fullmatch(series):
        console.print(f"[red]error:[/] {series!r} is not a series name like gpu_demand/all")
        raise typer.Exit(2)
    try:
        rows = read_query(_LATEST_SQL.format(series=series)).rows
        if not rows:
            names = read_query("SELECT DISTINCT series FROM forecasts ORDER BY series").rows
    except StoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    if not rows:
        known = ", ".join(r[0] for r in names) or "none yet (is the forecaster running?)"
        console.print(f"[red]error:[/] no forecast of {series!r}; series forecast: {known}")
        raise typer.Exit(1)
    first = rows[0][0]
    step_s = 0.0 if len(rows) < 2 else _seconds_between(rows[0][0], rows[1][0])
    shown = rows[: max(int(hours * 3600 / step_s), 1)] if step_s else rows
    model, note, generated, width = rows[0][4], rows[0][5], rows[0][6], rows[0][7]
    if as_json:
        points = [{"ts": r[0], "yhat": r[1], "lower": r[2], "upper": r[3]} for r in shown]
        doc = {"series": series, "model": model, "note": note, "generated_at": generated,
               "interval_width": width, "points": points}  # fmt: skip
        typer.echo(json.dumps(doc))
        return
    top = max(float(r[3]) for r in shown) or 1.0
    table = Table(
        title=f"{series}: {model}, made {generated[:16]} UTC",
        caption=note,
    )
    table.add_column("time (UTC)")
    table.add_column("forecast", justify="right")
    table.add_column(f"{width:.0%} interval", justify="right")
    table.add_column(f"0 .. {top:,.0f}", no_wrap=True)
    for ts, yhat, lower, upper, *_ in shown:
        table.add_row(ts[5:16] if ts[:10] != first[:10] else ts[11:16], f"{yhat:,.1f}",
                      f"{lower:,.1f} - {upper:,.1f}", _bar(yhat, lower, upper, top))  # fmt: skip
    Console().print(table)


def _seconds_between(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def _bar(yhat: float, lower: float, upper: float, top: float, width: int = 24) -> str:
    """The forecast as a bar (█), its interval as shading around its end (░)."""
    cells = [" "] * width
    lo, hi, mid = (min(round(v / top * width), width) for v in (lower, upper, yhat))
    for i in range(lo, hi):
        cells[i] = "░"
    for i in range(mid):
        cells[i] = "█"
    return "".join(cells)
