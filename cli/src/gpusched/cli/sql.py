"""``gpusched sql "SELECT ..."``: a query against the store, printed as a table.

With the embedded store (a ``chdb://`` DSN) the sink owns the data and the query goes to
its read-only SQL endpoint; with a ClickHouse server DSN it goes to the server directly.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from gpusched.store import QueryRefused, StoreUnreachable, read_query

__all__ = ["sql"]

console = Console(stderr=True)


def sql(
    query: Annotated[str, typer.Argument(help="a SELECT (read-only)")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Run a read-only query on the gpusched store and print the rows."""
    try:
        answer = read_query(query)
    except StoreUnreachable as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from exc
    except QueryRefused as exc:
        console.print(f"[red]query refused:[/] {exc}")
        raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps({"columns": answer.columns, "rows": answer.rows}, default=str))
        return
    # Values fold onto more lines rather than being cut, whatever the terminal's width.
    table = Table()
    for column in answer.columns:
        table.add_column(column, overflow="fold")
    for row in answer.rows:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    Console().print(table)
