"""ClickHouse's HTTP interface, read-only, on the embedded store: what analysts' own tools
speak (clickhouse-connect, the JDBC driver, Grafana's data source, curl).

``GET|POST /`` with the query in the ``query`` parameter and/or the body (a POST's body
follows the parameter's text), ``database`` and ``default_format`` (TabSeparated when not
given; also as the ``X-ClickHouse-Database`` and ``X-ClickHouse-Format`` headers) and the
query's own ``FORMAT`` clause: the engine itself writes every ClickHouse
output format (JSON, JSONEachRow, TabSeparatedWithNamesAndTypes, CSVWithNames, Parquet,
Native, RowBinaryWithNamesAndTypes, ...). ``param_<name>=`` binds ``{name:Type}``.
``GET /ping`` answers ``Ok.``. Errors come as ClickHouse writes them: the status its
server gives the error code, the ``Code: N. DB::Exception: ...`` text, and the
``X-ClickHouse-Exception-Code`` header; a result carries ``X-ClickHouse-Summary``,
``X-ClickHouse-Format``, ``X-ClickHouse-Query-Id`` and ``X-ClickHouse-Timezone``.
``compress=1`` / ``decompress=1`` use ClickHouse's compressed block stream
(``compressed``); HTTP's own compression (``enable_http_compression``) is not offered:
answers are sent identity-encoded, which every client accepts.

Credentials are gpusched API tokens (viewer role and above): HTTP basic auth,
``X-ClickHouse-User``/``X-ClickHouse-Key`` or ``user``/``password`` parameters, with the
token as the password (any user name).

Every query runs on one of a few engine connections of its own, which are ``readonly=1``
with the limits of the sink's settings (time, memory, result rows, threads) set before
``readonly``, so a query can neither write nor lift them. They share no lock with the
sink's inserts: a heavy query slows ingestion only by the cores it takes
(``sink_query_max_threads``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import chdb
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from gpusched.contracts.tokens import TokenFile
from gpusched.sink.compressed import compress, decompress
from gpusched.sink.settings import SinkSettings

__all__ = ["AnalystEngine", "mount_clickhouse_http"]

_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_CODE = re.compile(r"Code: (\d+)\.")
_NAME = re.compile(r"\(([A-Z_]+)\)(?: \(version [^)]*\))?\.?\s*$")
# parameters of the HTTP interface itself, not settings of the query
_OWN = frozenset(
    {
        "query", "database", "default_format", "user", "password", "query_id", "session_id",
        "session_timeout", "session_check", "compress", "decompress", "buffer_size",
        "wait_end_of_query", "client_protocol_version", "quota_key", "role", "extremes",
        "enable_http_compression", "send_progress_in_http_headers",
        "http_headers_progress_interval_ms", "http_response_buffer_size",
    }
)  # fmt: skip
# ClickHouse's server answers these error names with these statuses (exceptionCodeToHTTPStatus)
_STATUS = {
    **dict.fromkeys(("REQUIRED_PASSWORD",), 401),
    **dict.fromkeys(
        ("UNKNOWN_USER", "WRONG_PASSWORD", "AUTHENTICATION_FAILED", "ACCESS_DENIED"), 403
    ),
    **dict.fromkeys(
        (
            "BAD_ARGUMENTS", "CANNOT_PARSE_TEXT", "CANNOT_PARSE_QUOTED_STRING",
            "CANNOT_PARSE_DATE", "CANNOT_PARSE_DATETIME", "CANNOT_PARSE_NUMBER",
            "CANNOT_PARSE_INPUT_ASSERTION_FAILED", "DUPLICATE_COLUMN", "ILLEGAL_COLUMN",
            "THERE_IS_NO_COLUMN", "SYNTAX_ERROR", "INCORRECT_DATA", "TYPE_MISMATCH",
            "TOO_DEEP_AST", "TOO_BIG_AST",
        ),
        400,
    ),
    **dict.fromkeys(
        (
            "UNKNOWN_TABLE", "UNKNOWN_FUNCTION", "UNKNOWN_IDENTIFIER", "UNKNOWN_TYPE",
            "UNKNOWN_STORAGE", "UNKNOWN_DATABASE", "UNKNOWN_SETTING", "UNKNOWN_FORMAT",
            "UNKNOWN_AGGREGATE_FUNCTION", "UNKNOWN_TYPE_OF_QUERY",
        ),
        404,
    ),
    "QUERY_IS_TOO_LARGE": 413,
    "NOT_IMPLEMENTED": 501,
    "TIMEOUT_EXCEEDED": 408,
}  # fmt: skip
_CONTENT_TYPES = {
    "TabSeparated": "text/tab-separated-values; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8; header=absent",
    "CSVWithNames": "text/csv; charset=UTF-8; header=present",
    "JSONEachRow": "application/x-ndjson; charset=UTF-8",
}


class QueryFailed(Exception):
    """A ClickHouse error: its code, name and text as the server would send them."""

    def __init__(self, message: str, code: int | None = None, name: str | None = None) -> None:
        text = message.strip()
        found = _CODE.findall(text)
        self.code = code if code is not None else int(found[0]) if found else 1001
        named = _NAME.search(text)
        self.name = name or (named.group(1) if named else "STD_EXCEPTION")
        # the embedded engine repeats "Code: N. DB::Exception: " when it rethrows
        prefix = f"Code: {self.code}. DB::Exception: "
        while text.startswith(prefix + prefix):
            text = text[len(prefix) :]
        self.text = text if text.startswith("Code:") else f"{prefix}{text} ({self.name})"
        super().__init__(self.text)

    @property
    def status(self) -> int:
        return _STATUS.get(self.name, 500)


@dataclass
class Answer:
    body: bytes
    fmt: str
    rows_read: int
    bytes_read: int
    elapsed_s: float


class AnalystEngine:
    """A few engine connections, each read-only with the limits set first; a query takes
    one (waiting while all are busy) and gives it back."""

    def __init__(self, dsn: str, database: str, settings: SinkSettings) -> None:
        self.path = urlsplit(dsn).path or urlsplit(dsn).netloc
        self.database = database
        self.limits = {**settings.query_limits(), "max_threads": settings.sink_query_max_threads}
        self._free: asyncio.Queue[Any] = asyncio.Queue()
        for _ in range(settings.sink_query_workers):
            self._free.put_nowait(None)  # a connection is made on first use
        self.timezone = "UTC"

    def _open(self) -> Any:
        conn = chdb.connect(self.path)  # type: ignore[no-untyped-call,unused-ignore]
        limits = ", ".join(f"{k} = {v!r}" for k, v in self.limits.items())
        conn.query(f"SET {limits}")
        conn.query("SET readonly = 1")
        conn.query(f"USE {self.database}")
        self.timezone = conn.query("SELECT timezone()", "TabSeparated").bytes().decode().strip()
        return conn

    @contextmanager
    def _on(self, conn: Any, database: str | None) -> Iterator[None]:
        if database and database != self.database:
            if not re.fullmatch(r"\w+", database):
                raise QueryFailed(f"invalid database name {database!r}", 36, "BAD_ARGUMENTS")
            conn.query(f"USE {database}")
        try:
            yield
        finally:
            if database and database != self.database:
                conn.query(f"USE {self.database}")

    def _run(
        self, conn: Any, sql: str, fmt: str, params: dict[str, str], database: str | None
    ) -> tuple[Any, Answer]:
        try:
            if conn is None:
                conn = self._open()
            with self._on(conn, database):
                result = conn.query(sql, fmt, params=params) if params else conn.query(sql, fmt)
        except Exception as exc:  # the engine's errors are ClickHouse's text
            raise QueryFailed(str(exc)) from exc
        return conn, Answer(
            result.bytes(), fmt, result.rows_read(), result.bytes_read(), result.elapsed()
        )

    async def query(
        self, sql: str, fmt: str, params: dict[str, str], database: str | None
    ) -> Answer:
        conn = await self._free.get()
        try:
            conn, answer = await asyncio.to_thread(self._run, conn, sql, fmt, params, database)
        finally:
            self._free.put_nowait(conn)
        return answer


def _credentials(request: Request) -> str | None:
    """The password (a gpusched token) from basic auth, the X-ClickHouse-Key header or
    the ``password`` parameter."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("basic "):
        try:
            return base64.b64decode(auth[6:]).decode().partition(":")[2] or None
        except (ValueError, UnicodeDecodeError):
            return None
    return request.headers.get("x-clickhouse-key") or request.query_params.get("password")


def _error(exc: QueryFailed, query_id: str) -> Response:
    return PlainTextResponse(
        exc.text + "\n",
        status_code=exc.status,
        headers={"X-ClickHouse-Exception-Code": str(exc.code), "X-ClickHouse-Query-Id": query_id},
    )


def mount_clickhouse_http(app: FastAPI, engine: AnalystEngine, tokens: TokenFile) -> None:
    """Serve ClickHouse's HTTP interface on ``app``'s ``/`` and ``/ping``."""

    @app.get("/ping", include_in_schema=False)
    async def ping() -> PlainTextResponse:
        return PlainTextResponse("Ok.\n")

    @app.api_route("/", methods=["GET", "POST"], include_in_schema=False)
    async def query(request: Request) -> Response:
        args = request.query_params
        query_id = args.get("query_id") or str(uuid.uuid4())
        body = b"" if request.method != "POST" else await request.body()
        if args.get("decompress") == "1" and body:
            try:
                body = decompress(body)
            except ValueError as exc:
                return _error(QueryFailed(str(exc), 271, "CANNOT_DECOMPRESS"), query_id)
        text = body.decode("utf-8", errors="replace")  # a query is text; bad bytes show as such
        sql = "\n".join(part for part in (args.get("query", ""), text) if part.strip())
        if not sql.strip():
            return PlainTextResponse("Ok.\n")
        token = _credentials(request)
        if not token:
            return _error(
                QueryFailed("a gpusched token is required as the password", 194,
                            "REQUIRED_PASSWORD"), query_id)  # fmt: skip
        who = tokens.identify(token)
        if who is None:
            return _error(
                QueryFailed("unknown, malformed or revoked token", 516, "AUTHENTICATION_FAILED"),
                query_id,
            )
        unknown = sorted(k for k in args if k not in _OWN and not k.startswith("param_"))
        if unknown:
            return _error(
                QueryFailed(
                    f"Cannot modify '{unknown[0]}' setting in readonly mode: the limits of "
                    "this store are fixed (GPUSCHED_SINK_QUERY_*)", 164, "READONLY"
                ), query_id,
            )  # fmt: skip
        fmt = (
            args.get("default_format") or request.headers.get("x-clickhouse-format")
            or "TabSeparated"
        )  # fmt: skip
        database = args.get("database") or request.headers.get("x-clickhouse-database")
        named = _FORMAT.search(sql)
        shown = named.group(1) if named else fmt
        params = {k[6:]: v for k, v in args.items() if k.startswith("param_")}
        started = time.monotonic()
        try:
            answer = await engine.query(sql, fmt, params, database)
        except QueryFailed as exc:
            return _error(exc, query_id)
        summary = {
            "read_rows": str(answer.rows_read),
            "read_bytes": str(answer.bytes_read),
            "written_rows": "0",
            "written_bytes": "0",
            "total_rows_to_read": str(answer.rows_read),
            "result_bytes": str(len(answer.body)),
            "elapsed_ns": str(int((time.monotonic() - started) * 1e9)),
        }
        content_type = _CONTENT_TYPES.get(shown)
        if content_type is None:
            textual = shown.startswith(("JSON", "TabSeparated", "TSV", "CSV", "Pretty", "Values"))
            content_type = (
                "application/json; charset=UTF-8" if shown.startswith("JSON")
                else "text/plain; charset=UTF-8" if textual else "application/octet-stream"
            )  # fmt: skip
        return Response(
            compress(answer.body) if args.get("compress") == "1" else answer.body,
            media_type=content_type,
            headers={
                "X-ClickHouse-Summary": json.dumps(summary, separators=(",", ":")),
                "X-ClickHouse-Format": shown,
                "X-ClickHouse-Query-Id": query_id,
                "X-ClickHouse-Timezone": engine.timezone,
                "X-ClickHouse-Server-Display-Name": "gpusched-sink",
            },
        )
