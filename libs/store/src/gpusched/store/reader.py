"""Read-only queries from any process: ``read_query``.

The embedded engine (``chdb://``) belongs to the process that opened it, the sink; other
processes (``gpusched sql``, the forecaster) query it through the sink's read-only SQL
endpoint. With a ClickHouse server they query it directly, as a read-only session that
needs no rights beyond SELECT (no CREATE DATABASE, unlike ``connect``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import clickhouse_connect
import httpx

from gpusched.store.errors import StoreError
from gpusched.store.settings import StoreSettings

__all__ = ["QueryAnswer", "QueryRefused", "StoreUnreachable", "read_query"]


class StoreUnreachable(StoreError):
    """Nothing answered where the store should be."""


class QueryRefused(StoreError):
    """The store answered and refused the query (ClickHouse's message is the text)."""


@dataclass(frozen=True, slots=True)
class QueryAnswer:
    columns: list[str]
    rows: list[list[Any]]


def read_query(
    query: str, settings: StoreSettings | None = None, timeout_s: float = 120
) -> QueryAnswer:
    """Run one read-only query where ``settings`` say the store is."""
    settings = settings or StoreSettings()
    if urlsplit(settings.dsn).scheme == "chdb":
        return _via_sink(settings.sql_url, query, timeout_s)
    return _via_server(settings, query)


def _via_sink(url: str, query: str, timeout_s: float) -> QueryAnswer:
    try:
        response = httpx.post(f"{url.rstrip('/')}/sql", content=query.encode(), timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise StoreUnreachable(
            f"the store (the sink's SQL endpoint) at {url} is unreachable ({exc}); is the "
            "platform up? (make run; or `gpusched sink`, or set GPUSCHED_STORE_SQL_URL)"
        ) from exc
    if response.status_code != 200:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise QueryRefused(str(detail))
    answer = response.json()
    return QueryAnswer(list(answer["columns"]), [list(r) for r in answer["rows"]])


def _via_server(settings: StoreSettings, query: str) -> QueryAnswer:
    parts = urlsplit(settings.dsn)
    try:
        client = clickhouse_connect.get_client(
            host=parts.hostname or "localhost",
            port=parts.port or (8443 if parts.scheme == "https" else 8123),
            username=parts.username or "default",
            password=parts.password or "",
            secure=parts.scheme == "https",
            database=settings.database,
        )
    except Exception as exc:  # clickhouse-connect raises several types for "not there"
        raise StoreUnreachable(
            f"the store (ClickHouse) at {parts.hostname}:{parts.port} is unreachable ({exc}); "
            "is the server up, and is GPUSCHED_STORE_DSN right?"
        ) from exc
    try:
        result = client.query(query, settings={"readonly": 1})
    except Exception as exc:  # ClickHouse's message says what was wrong
        raise QueryRefused(str(exc)) from exc
    finally:
        client.close()
    return QueryAnswer(list(result.column_names), [list(r) for r in result.result_rows])
