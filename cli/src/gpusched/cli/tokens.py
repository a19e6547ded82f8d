"""``gpusched token create | list | revoke``: the REST API's bearer tokens.

The records live in ``GPUSCHED_API_TOKENS_FILE`` (default ``<checkout>/var/tokens.json``),
the file the API reads; a token is printed once, at creation, and only its hash is kept.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpusched.api import ApiSettings
from gpusched.contracts.tokens import Role, TokenError, TokenFile, describe

__all__ = ["token_app"]

token_app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)
console = Console(stderr=True)


def _file() -> TokenFile:
    return TokenFile(ApiSettings().api_tokens_file)


@token_app.command("create")
def create(
    role: Annotated[Role, typer.Option(help="viewer, submitter, operator or admin")],
    tenant: Annotated[
        list[str] | None, typer.Option(help="a tenant it acts for (repeat; '*': every one)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="who or what holds it (audit name)")] = None,
) -> None:
    """Create a token and print it (once: it is not stored, only its hash)."""
    try:
        record, token = _file().create(role, tenant or [], name)
    except TokenError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    console.print(
        f"token {record.name!r} ({record.role.value}, tenants: "
        f"{', '.join(record.tenants) or 'none'}); it is shown only now:"
    )
    typer.echo(token)


@token_app.command("list")
def list_tokens(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    revoked: Annotated[bool, typer.Option(help="include revoked tokens")] = False,
) -> None:
    """The tokens (never their secrets)."""
    try:
        records = [r for r in _file().records() if revoked or r.active]
    except TokenError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from exc
    if as_json:
        typer.echo(json.dumps([describe(r) for r in records]))
        return
    table = Table(title=f"{len(records)} token(s)")
    for column in ("id", "name", "role", "tenants", "created (UTC)", "revoked (UTC)"):
        table.add_column(column, overflow="fold")
    for r in records:
        revoked_at = r.revoked_at.strftime("%Y-%m-%d %H:%M") if r.revoked_at else ""
        table.add_row(r.id, r.name, r.role.value, ", ".join(r.tenants),
                      r.created_at.strftime("%Y-%m-%d %H:%M"), revoked_at)  # fmt: skip
    Console().print(table)


@token_app.command("revoke")
def revoke(which: Annotated[str, typer.Argument(help="the token's id or name")]) -> None:
    """Revoke a token: the API refuses it within seconds."""
    try:
        record = _file().revoke(which)
    except TokenError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    typer.echo(f"revoked {record.name!r} ({record.id})")
