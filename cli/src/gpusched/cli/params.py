"""``gpusched params show | set | history | revert``: the scheduling parameters through the
REST API (so every change is checked, numbered and audited as one made in the console).

Exit codes: 0 done, 1 the API refused (the reason is printed) or is unreachable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from gpusched.api import ApiSettings

__all__ = ["api_client", "params_app"]

params_app = typer.Typer(
    help="Scheduling parameters: show, set, history, revert (through the REST API).",
    no_args_is_help=True,
)
console = Console()
errors = Console(stderr=True, soft_wrap=True)

Api = Annotated[
    str | None, typer.Option(help="the REST API (default http://GPUSCHED_API_HOST:_PORT)")
]
Token = Annotated[
    str | None,
    typer.Option(envvar="GPUSCHED_TOKEN", help="an API token (GPUSCHED_TOKEN)", show_default=False),
]
AsJson = Annotated[bool, typer.Option("--json", help="the API's JSON answer")]


@contextmanager
def api_client(api: str | None, token: str | None) -> Iterator[httpx.Client]:
    """A client of the REST API; exit 1 naming it when it cannot be reached."""
    settings = ApiSettings()
    url = (api or f"http://{settings.api_host}:{settings.api_port}").rstrip("/")
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with httpx.Client(base_url=url, timeout=30, headers=headers) as client:
            yield client
    except httpx.TransportError as exc:
        errors.print(
            f"[red]error:[/] the REST API at {url} is unreachable ({exc}); "
            "is the platform up? (make run)"
        )
        raise typer.Exit(1) from exc


def _answer(response: httpx.Response, as_json: bool) -> Any:
    """The JSON of a 2xx answer (printed with --json); else print why and exit 1."""
    if response.is_success:
        body = response.json()
        if as_json:
            typer.echo(json.dumps(body, indent=2, default=str))
        return body
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if isinstance(detail, list):  # 422: [{"loc": [...], "msg": ...}]
        detail = "; ".join(
            d["msg"] if str(d["loc"][-1]) in d["msg"] else f"{d['loc'][-1]}: {d['msg']}"
            for d in detail
        )
    elif isinstance(detail, dict):  # 409: {"message", "revision", "values"}
        detail = detail["message"]
    errors.print(f"[red]refused ({response.status_code}):[/] {detail}")
    raise typer.Exit(1)


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


@params_app.command("show")
def show(api: Api = None, token: Token = None, as_json: AsJson = False) -> None:
    """Every parameter: value (* where not the default), bounds, unit, who set it."""
    with api_client(api, token) as client:
        body = _answer(client.get("/params"), as_json)
    if as_json:
        return
    applied = ", ".join(f"{s} {at}" for s, at in body["applied_at"].items()) or "not reported"
    table = Table(title=f"parameters at revision {body['revision']} (applied: {applied})")
    for column in ("name", "value", "bounds", "set by", "doc"):
        table.add_column(column, overflow="fold")
    for p in body["params"]:
        changed = "*" if p["value"] != p["default"] else ""
        lo, hi = p["lo"], p["hi"]
        bounds = "" if lo is None and hi is None else f"[{_shown(lo)}, {_shown(hi)}]"
        unit = f" {p['unit']}" if p["unit"] else ""
        name = f"{p['name']} (admin)" if p["dangerous"] else p["name"]
        by = f"{p['set_by']} r{p['revision']}" if p["set_by"] else ""
        doc = f"{p['doc']} REFUSED: {p['refused']}" if p["refused"] else p["doc"]
        table.add_row(name, f"{_shown(p['value'])}{unit}{changed}", bounds, by, doc)
    console.print(table)


@params_app.command("set")
def set_params(
    changes: Annotated[list[str], typer.Argument(help="NAME=VALUE ... (one revision)")],
    reason: Annotated[str, typer.Option(help="why (kept in the audit trail)")],
    revision: Annotated[
        int | None,
        typer.Option(help="the revision you read (default: the one in force now)"),
    ] = None,
    api: Api = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Change parameters as one new revision (operator; admin for dangerous ones)."""
    parsed = {}
    for change in changes:
        name, sep, value = change.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{change!r} is not NAME=VALUE", param_hint="CHANGES")
        parsed[name.strip()] = value.strip()
    with api_client(api, token) as client:
        if revision is None:
            revision = _answer(client.get("/params"), False)["revision"]
        body = {"changes": parsed, "reason": reason, "revision": revision}
        _done(_answer(client.patch("/params", json=body), as_json), as_json)


@params_app.command("revert")
def revert(
    revision: Annotated[int, typer.Argument(help="the revision whose values come back")],
    reason: Annotated[
        str | None, typer.Option(help="why (default: 'revert to revision N')")
    ] = None,
    api: Api = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Publish the values of a past revision as a new revision (0: the defaults)."""
    with api_client(api, token) as client:
        answer = client.post("/params/revert", json={"revision": revision, "reason": reason})
        _done(_answer(answer, as_json), as_json)


def _done(body: dict[str, Any], as_json: bool) -> None:
    if as_json:
        return
    for name, change in body["changes"].items():
        typer.echo(f"{name}: {_shown(change['old'])} -> {_shown(change['new'])}")
    typer.echo(f"revision {body['revision']} published")


@params_app.command("history")
def history(
    limit: Annotated[int, typer.Option(help="at most this many changes")] = 50,
    api: Api = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """The audit trail: who changed what, when, why, and whether it was applied."""
    with api_client(api, token) as client:
        rows = _answer(client.get("/params/history", params={"limit": limit}), as_json)
    if as_json:
        return
    table = Table(title="parameter changes, newest first")
    for column in ("rev", "parameter", "old -> new", "who", "when", "why", "outcome"):
        table.add_column(column, overflow="fold")
    for r in rows:
        outcome = r["outcome"]
        if r["applied_at"]:
            outcome += f" {r['applied_at']} ({', '.join(r['applied_by'])})"
        if r["error"]:
            outcome += f": {r['error']}"
        table.add_row(
            str(r["revision"]),
            r["parameter"],
            f"{r['old_value']} -> {r['new_value']}",
            f"{r['actor']} ({r['role']}, {r['source']})",
            str(r["requested_at"]),
            r["reason"] or "",
            outcome,
        )
    console.print(table)
