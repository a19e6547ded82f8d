"""``gpusched sql "SELECT ..."``: a query against the store, printed as a table.

With the embedded store (a ``chdb://`` DSN) the sink owns the data and the query goes to
its read-only SQL endpoint; with a ClickHouse server DSN it goes to the server directly.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import typer
from rich.console import Console
from rich.table import Table

from gpusched.sink import SinkSettings
from gpusched.store import StoreSettings, connect

__all__ = ["sql"]

console = Console(stderr=True)


def _via_sink(url: str, query: str) -> dict[str, Any]:
    try:
        response = httpx.post(f"{url.rstrip('/')}/sql", content=query.encode(), timeout=120)
    except httpx.HTTPError as exc:
        console.print(
            f"[red]error:[/] the sink's SQL endpoint at {url} is not reachable ({exc}); "
            "start the sink (`gpusched sink`, or `make run`) or set GPUSCHED_SINK_SQL_URL"
        )
        raise typer.Exit(2) from exc
    if response.status_code != 200:
        console.print(f"[red]query refused:[/] {response.json().get('detail', response.text)}")
        raise typer.Exit(1)
    answer: dict[str, Any] = response.json()
    return answer


def _via_server(store: StoreSettings, query: str) -> dict[str, Any]:
    try:
        result = connect(store.dsn, store.database).query(query, settings={"readonly": 1})
    except Exception as exc:  # ClickHouse's message says what was wrong
        console.print(f"[red]query refused:[/] {exc}")
        raise typer.Exit(1) from exc
    return {"columns": list(result.column_names), "rows": [list(r) for r in result.result_rows]}


def sql(
    query: Annotated[str, typer.Argument(help="a SELECT (read-only)")],
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of a table")] = False,
) -> None:
    """Run a read-only query on the gpusched store and print the rows."""
    store = StoreSettings()
    if urlsplit(store.dsn).scheme == "chdb":
        answer = _via_sink(SinkSettings().sink_sql_url, query)
    else:
        answer = _via_server(store, query)
    if as_json:
        typer.echo(json.dumps(answer, default=str))
        return
    table = Table(*answer["columns"])
    for row in answer["rows"]:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    Console().print(table)
