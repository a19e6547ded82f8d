"""The ``gpusched`` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from gpusched.cli.admin import store_app, topics_app
from gpusched.cli.feed import feed
from gpusched.cli.forecast import forecast_app
from gpusched.cli.listing import cancel, nodes, queue
from gpusched.cli.matrix import run_matrix_command
from gpusched.cli.params import params_app
from gpusched.cli.platform import up
from gpusched.cli.progress import progress_bar
from gpusched.cli.services import (
    api,
    collect,
    dispatch,
    process,
    simcluster,
    sink,
    status,
    store_server,
    submit,
)
from gpusched.cli.sql import sql
from gpusched.cli.tables import fitted_table
from gpusched.cli.tokens import token_app
from gpusched.core import CoreError
from gpusched.forecaster import ForecastOutlook
from gpusched.sim import SimError, replay
from gpusched.sim.report import write_report

app = typer.Typer(help="gpusched: dynamic-priority GPU cluster scheduling.", no_args_is_help=True)
console = Console(stderr=True)

# (header with its unit, result key, format, shown without --wide): two-line headers
# keep the default table within 80 columns
_TABLE = (
    ("jobs", "jobs", "{:,d}", False),
    ("avg\nJCT h", "avg_jct_s", "h", True),
    ("p99\nJCT h", "p99_jct_s", "h", True),
    ("avg\nwait h", "avg_wait_s", "h", True),
    ("util", "gpu_util", "{:.2f}", False),
    ("energy\nMWh", "energy_kwh", "mwh", True),
    ("above\nfloor MWh", "idle_energy_kwh", "mwh", False),
    ("wake\nwait h", "wake_wait_s", "h", False),
    ("parked\nnode-h", "parked_node_hours", "{:,.0f}", False),
    ("pre-\nempt", "preemptions", "{:,d}", True),
    ("fair-\nness", "fairness", "{:.2f}", False),
    ("wall\ns", "sim_wall_s", "{:,.0f}", False),
)


def _cell(value: object, fmt: str) -> str:
    """A number formatted for its unit: hours and MWh with one decimal, ratios with two."""
    if value is None:
        return "-"
    if fmt == "h":
        return f"{float(value) / 3600:,.1f}"  # type: ignore[arg-type]
    if fmt == "mwh":
        return f"{float(value) / 1000:,.1f}"  # type: ignore[arg-type]
    return fmt.format(value)


def _replay_table(doc: dict[str, Any], experiment: str, placement: str, wide: bool) -> Table:
    """One row per policy; no number or policy name is cut (--wide needs a wide terminal)."""
    columns = [(title, key, fmt) for title, key, fmt, default in _TABLE if wide or default]
    if experiment == "packing":
        columns += [
            ("alloc@1st fail", "alloc_frac_at_first_failure", "{:.3f}"),
            ("alloc final", "alloc_frac_final", "{:.3f}"),
        ]
    rows = [
        [name, *(_cell(r[key], fmt) for _, key, fmt in columns)]
        for name, r in doc["results"].items()
    ]
    title = f"{doc['trace']} on {doc['cluster']} ({experiment}, {placement})"
    return fitted_table(title, ["policy", *(c[0] for c in columns)], rows)


@app.callback()
def main() -> None:
    """gpusched command line."""


app.command("collect")(collect)
app.command("process")(process)
app.command("sink")(sink)
app.command("store-server")(store_server)
app.command("sql")(sql)
app.command("simcluster")(simcluster)
app.command("dispatch")(dispatch)
app.command("api")(api)
app.command("submit")(submit)
app.command("status")(status)
app.command("queue")(queue)
app.command("nodes")(nodes)
app.command("cancel")(cancel)
app.command("feed")(feed)
app.command("up")(up)
app.add_typer(forecast_app, name="forecast")
app.add_typer(token_app, name="token")
app.add_typer(params_app, name="params")
app.add_typer(topics_app, name="topics")
app.add_typer(store_app, name="store")


@app.command("replay")
def replay_command(
    json_out: Annotated[Path, typer.Option("--json", help="where to write the result JSON")],
    jobs: Annotated[Path | None, typer.Option(help="a *.jobs.csv trace")] = None,
    cluster: Annotated[Path | None, typer.Option(help="a *.cluster.csv node list")] = None,
    policies: Annotated[
        str,
        typer.Option(
            help="comma-separated: fifo, backfill, tiresias, tiresias-qos, srpt-oracle, "
            "dynamic, dynamic-noforecast; NAME+powersave for Slurm-style power saving"
        ),
    ] = "fifo,backfill,tiresias,srpt-oracle,dynamic",
    experiment: Annotated[str, typer.Option(help="queueing or packing")] = "queueing",
    placement: Annotated[str, typer.Option(help="spread, bestfit or fgd")] = "bestfit",
    time_scale: Annotated[
        float, typer.Option(help="divide inter-arrival times by this (raises load)")
    ] = 1.0,
    seed: Annotated[int, typer.Option(help="seed (runs are deterministic)")] = 0,
    report: Annotated[
        Path | None,
        typer.Option(
            help="also write an HTML report here (with --matrix: a folder of one report "
            "per scenario and index.html)"
        ),
    ] = None,
    matrix: Annotated[
        Path | None,
        typer.Option(help="a scenario matrix (bench/scenarios.yaml): run it instead of one trace"),
    ] = None,
    matrix_set: Annotated[
        list[str] | None,
        typer.Option("--set", help="with --matrix: only this set (tune, validation); repeatable"),
    ] = None,
    workers: Annotated[
        int | None, typer.Option(help="with --matrix: worker processes (default: one per CPU)")
    ] = None,
    wide: Annotated[
        bool, typer.Option(help="every column (jobs, util, energy above floor, fairness, wall)")
    ] = False,
    baseline: Annotated[
        str | None,
        typer.Option(help="with --report: the policy ratios are to (default: tiresias if run)"),
    ] = None,
) -> None:
    """Replay a trace through the scheduling policies and compare them, or a whole
    scenario matrix (--matrix) in parallel."""
    if matrix is not None:
        try:
            run_matrix_command(
                matrix,
                json_out,
                matrix_set or ["tune", "validation"],
                workers,
                console,
                report,
                wide,
            )
        except (SimError, CoreError) as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
        console.print(f"json: {json_out}")
        if report is not None:
            console.print(f"reports: {report / 'index.html'}")
        return
    if jobs is None or cluster is None:
        console.print("[red]error:[/] --jobs and --cluster are required (or --matrix FILE)")
        raise typer.Exit(2)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    if report is not None and baseline is not None and baseline not in names:
        console.print(f"[red]error:[/] --baseline {baseline} is not among --policies")
        raise typer.Exit(2)
    with progress_bar(console) as progress:
        task = None

        def on_start(name: str, total: int) -> None:
            nonlocal task
            if task is not None:
                progress.update(task, completed=progress.tasks[task].total)
            task = progress.add_task(f"{name:<12}", total=total)

        def on_progress(n: int) -> None:
            if task is not None:
                progress.advance(task, n)

        try:
            doc, runs = replay(
                jobs,
                cluster,
                names,
                experiment,
                placement,
                time_scale,
                seed,
                on_start=on_start,
                on_progress=on_progress,
                outlook=ForecastOutlook.from_settings,
            )
        except (SimError, CoreError) as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    table = _replay_table(doc, experiment, placement, wide)
    Console().print(table)
    if doc["skipped"]:
        console.print(f"[yellow]{len(doc['skipped'])} job(s) skipped[/] (listed in the JSON):")
        for s in doc["skipped"][:5]:
            console.print(f"  {s['job_id']}: {s['reason']}")
    if report is not None:
        try:
            write_report(report, doc, runs, baseline)
        except ValueError as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from exc
        console.print(f"report: {report}")
    console.print(f"json: {json_out}")
