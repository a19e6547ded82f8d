"""Read-only SQL over HTTP on the sink's store (the embedded engine allows one process).

``POST /sql`` with the query as the body (or ``GET /sql?query=...``) answers
``{"columns": [...], "types": [...], "rows": [[...], ...]}``. Queries run on a client of
their own with ClickHouse's ``readonly=1``: anything that would write, or read files, is
refused with 400 and ClickHouse's message. The limits of ``GPUSCHED_SINK_QUERY_*`` (time,
memory, result rows) bound every query; one over a limit is refused with 400, naming the
limits. A client of its own because the embedded engine
keeps query settings in the client's session: on the sink's writing client, ``readonly``
would stay and refuse its next insert. It is the other services' door to an embedded
store (``GPUSCHED_STORE_SQL_URL``); analysts' tools use ClickHouse's HTTP interface on
``/`` (``clickhouse_http``), with tokens and limits.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from clickhouse_connect.driver.client import Client
from fastapi import Body, FastAPI, HTTPException, Query
from fastapi.encoders import jsonable_encoder

__all__ = ["sql_app"]


# ClickHouse's error codes of a query stopped by a limit
_OVER_LIMIT = ("TIMEOUT_EXCEEDED", "MEMORY_LIMIT_EXCEEDED", "TOO_MANY_ROWS_OR_BYTES")


def sql_app(reader: Client, limits: dict[str, int | str]) -> FastAPI:
    """The FastAPI app that answers queries through ``reader`` (a client used only here),
    each under ``limits`` (ClickHouse settings)."""
    app = FastAPI(title="gpusched sink SQL", version="1")
    said = ", ".join(f"{k}={v}" for k, v in limits.items())

    def run(sql: str) -> dict[str, Any]:
        result = reader.query(sql, settings={**limits, "readonly": 1})
        return {
            "columns": list(result.column_names),
            "types": [t.name for t in result.column_types],
            "rows": jsonable_encoder([list(r) for r in result.result_rows]),
        }

    async def answer(sql: str) -> dict[str, Any]:
        if not sql.strip():
            raise HTTPException(status_code=400, detail="empty query")
        try:
            return await asyncio.to_thread(run, sql)
        except Exception as exc:  # ClickHouse's own message says what was wrong
            detail = str(exc).strip()
            if any(code in detail for code in _OVER_LIMIT):
                detail += f"\n(this endpoint's limits: {said}; GPUSCHED_SINK_QUERY_*)"
            raise HTTPException(status_code=400, detail=detail) from exc

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/sql")
    async def sql_get(query: Annotated[str, Query(description="a SELECT")]) -> dict[str, Any]:
        return await answer(query)

    @app.post("/sql")
    async def sql_post(query: Annotated[str, Body(media_type="text/plain")]) -> dict[str, Any]:
        return await answer(query)

    return app
