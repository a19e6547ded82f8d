"""`gpusched queue`, `nodes` and `cancel`: what a Slurm user finds in squeue, sinfo and
scancel. Listings read the store (as `gpusched status` does); cancel goes through the
REST API. Exit codes: 0 done, 1 nothing found, a job the API refused to cancel, or a
dependency (store, API) unreachable (the message names it), 2 a bad option."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from gpusched.api import InvalidJob, list_nodes, list_queue
from gpusched.api.listing import JobState, NodeState
from gpusched.cli.params import api_client
from gpusched.store import StoreError

__all__ = ["cancel", "nodes", "queue"]

console = Console()
T = TypeVar("T")


def _table(title: str, *columns: str) -> Table:
    """A table whose long cells wrap; a column named ">x" is x, right-aligned."""
    table = Table(title=title)
    for name in columns:
        right = name.startswith(">")
        table.add_column(name.lstrip(">"), justify="right" if right else "left", overflow="fold")
    return table


def _listing(read: Callable[[], list[T]]) -> list[T]:
    """The rows ``read`` gives; a bad filter exits 2, an unreachable store 1, saying why."""
    try:
        return read()
    except InvalidJob as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    except StoreError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f}"


def queue(
    state: Annotated[JobState | None, typer.Option(help="pending or running")] = None,
    tenant: Annotated[str | None, typer.Option(help="only this tenant")] = None,
    priority_class: Annotated[str | None, typer.Option("--class", help="only this class")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Jobs not ended: pending ones in priority order with why they wait, then running."""
    rows = _listing(lambda: list_queue(state=state, tenant=tenant, priority_class=priority_class))
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in rows]))
        return
    table = _table(
        f"{len(rows)} job(s)", "job", "tenant", "class", ">GPUs", "state", ">wait h", ">score",
        "why pending / nodes",
    )  # fmt: skip
    for r in rows:
        why = r.pending_reason or ", ".join(r.nodes)
        if r.estimated_start:
            why += f" (start ~{r.estimated_start[:16]} UTC)"
        score = "" if r.score is None else f"{r.score:.2f}"
        wait = _hours(r.wait_s) if r.state == "pending" else ""
        table.add_row(
            r.job_id, r.tenant, r.priority_class, f"{r.gpus:g}", r.state, wait, score, why
        )
    console.print(table)


def nodes(
    state: Annotated[NodeState | None, typer.Option(help="on, parked, waking, unhealthy")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every node: model, GPUs free of total, power state, health, jobs running."""
    rows = _listing(lambda: list_nodes(state=state))
    if as_json:
        typer.echo(json.dumps([r.as_dict() for r in rows]))
        return
    table = _table(
        f"{len(rows)} node(s)", "node", "model", ">GPUs free/total", "power", "healthy", "jobs"
    )
    for n in rows:
        table.add_row(
            n.node_id,
            n.gpu_model,
            f"{n.gpus_free:g}/{n.gpus_total}",
            n.power_state,
            "yes" if n.healthy else "NO",
            ", ".join(n.jobs),
        )
    console.print(table)


def cancel(
    job_ids: Annotated[list[str], typer.Argument(help="the jobs to cancel")],
    api: Annotated[
        str | None, typer.Option(help="the REST API (default http://GPUSCHED_API_HOST:_PORT)")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="GPUSCHED_TOKEN", help="a submitter (or above) token", show_default=False
        ),
    ] = None,
) -> None:
    """Cancel jobs through the REST API (pending: withdrawn; running: stopped)."""
    refused = 0
    with api_client(api, token) as client:
        for job_id in job_ids:
            response = client.delete(f"/jobs/{job_id}")
            if response.status_code == 202:
                typer.echo(f"{job_id}: cancel requested")
            else:
                refused += 1
                console.print(f"[red]{job_id}: {response.status_code}[/] {response.text}")
    if refused:
        raise typer.Exit(1)
