"""Read-only SQL over HTTP on the sink's store (the embedded engine allows one process).

``POST /sql`` with the query as the body (or ``GET /sql?query=...``) answers
``{"columns": [...], "types": [...], "rows": [[...], ...]}``. Queries run with ClickHouse's
``readonly=1``: anything that would write, or read files, is refused with 400 and
ClickHouse's message.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any

from fastapi import Body, FastAPI, HTTPException, Query
from fastapi.encoders import jsonable_encoder

from gpusched.store import Store

__all__ = ["sql_app"]

_MAX_ROWS = 100_000


def sql_app(store: Store, lock: threading.Lock) -> FastAPI:
    """The FastAPI app that serves ``store`` read-only."""
    app = FastAPI(title="gpusched sink SQL", version="1")

    def run(sql: str) -> dict[str, Any]:
        with lock:
            result = store.client.query(sql, settings={"readonly": 1, "max_result_rows": _MAX_ROWS})
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
            raise HTTPException(status_code=400, detail=str(exc).strip()) from exc

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
