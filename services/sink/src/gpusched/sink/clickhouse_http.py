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

**Writable** (``AnalystEngine(..., writable=True)``, served by ``gpusched store-server``):
the same interface as a ClickHouse server gives its clients, so that processes other than
the one owning the embedded store can write into it (the sink in server-DSN mode, the
store-outage fault test): no limits and no ``readonly``; the request's settings
parameters apply to its query (``SET`` before it, ``DEFAULT`` after), except that a
request with ``readonly`` (which cannot be undone once set: the sink's ``/sql`` reader
sends it) runs on a read-only connection kept for its set of settings; an ``INSERT ...
FORMAT F`` in the ``query`` parameter, or as the body's first line (clickhouse-connect's
``Native`` inserts), takes its rows from the body (spooled to a file the engine reads
with ``file()``, its structure the insert's columns), decoded per
``Content-Encoding`` (lz4 frames, as clickhouse-connect sends, gzip, deflate, identity) or
``decompress=1``. Its credential is one password (any user name), or none.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import chdb
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from gpusched.contracts.tokens import TokenFile
from gpusched.sink.clickhouse_request import (
    Query,
    QueryFailed,
    decoded_body,
    insert_rows,
    literal,
)
from gpusched.sink.compressed import compress
from gpusched.sink.settings import SinkSettings
from gpusched.store import quoted

__all__ = ["AnalystEngine", "mount_clickhouse_http"]

_FORMAT = re.compile(r"\bFORMAT\s+(\w+)\s*;?\s*$", re.IGNORECASE)
_SETTING = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_READERS = 16  # read-only connections kept, one per set of settings
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
_CONTENT_TYPES = {
    "TabSeparated": "text/tab-separated-values; charset=UTF-8",
    "CSV": "text/csv; charset=UTF-8; header=absent",
    "CSVWithNames": "text/csv; charset=UTF-8; header=present",
    "JSONEachRow": "application/x-ndjson; charset=UTF-8",
}


@dataclass
class Answer:
    body: bytes
    fmt: str
    rows_read: int
    bytes_read: int
    elapsed_s: float
    rows_written: int = 0
    bytes_written: int = 0


class AnalystEngine:
    """A few engine connections, each read-only with the limits set first (or, writable,
    with neither); a query takes one (waiting while all are busy) and gives it back."""

    def __init__(
        self, dsn: str, database: str, settings: SinkSettings, writable: bool = False
    ) -> None:
        self.path = urlsplit(dsn).path or urlsplit(dsn).netloc
        self.database = database
        self.writable = writable
        self.limits = (
            {} if writable
            else {**settings.query_limits(), "max_threads": settings.sink_query_max_threads}
        )  # fmt: skip
        self._free: asyncio.Queue[Any] = asyncio.Queue()
        for _ in range(settings.sink_query_workers):
            self._free.put_nowait(None)  # a connection is made on first use
        self.timezone = "UTC"
        self._readers: dict[tuple[tuple[str, str], ...], Any] = {}
        self._reading = threading.Lock()
        # an insert's rows wait in a file beside the engine's data until it reads them
        self._spool = Path(self.path, "gpusched-spool") if writable else None
        if self._spool is not None:
            self._spool.mkdir(parents=True, exist_ok=True)
            for left in self._spool.iterdir():  # a killed server's, never inserted
                left.unlink()

    def _open(self, limits: dict[str, Any], readonly: str = "") -> Any:
        conn = chdb.connect(self.path)  # type: ignore[no-untyped-call,unused-ignore]
        if limits:
            conn.query("SET " + ", ".join(f"{k} = {literal(v)}" for k, v in limits.items()))
        if self.writable:
            conn.query(f"CREATE DATABASE IF NOT EXISTS {self.database}")
        readonly = readonly or ("" if self.writable else "1")
        if readonly:
            conn.query(f"SET readonly = {literal(readonly)}")
        conn.query(f"USE {self.database}")
        self.timezone = conn.query("SELECT timezone()", "TabSeparated").bytes().decode().strip()
        return conn

    def _reader(self, settings: dict[str, str]) -> Any:
        """A connection made read-only with ``settings`` (its ``readonly`` among them, set
        last): once set, ``readonly`` cannot be undone, so each such set of settings has a
        connection of its own (callers hold ``_reading``)."""
        key = tuple(sorted(settings.items()))
        if key not in self._readers:
            if len(self._readers) >= _READERS:
                self._readers.pop(next(iter(self._readers))).close()
            others = {k: v for k, v in settings.items() if k != "readonly"}
            self._readers[key] = self._open(others, settings["readonly"])
        return self._readers[key]

    @contextmanager
    def _on(self, conn: Any, database: str | None, settings: dict[str, str]) -> Iterator[None]:
        if database and database != self.database:
            if not re.fullmatch(r"\w+", database):
                raise QueryFailed(f"invalid database name {database!r}", 36, "BAD_ARGUMENTS")
            conn.query(f"USE {database}")
        if settings:
            values = ", ".join(f"{k} = {literal(v)}" for k, v in settings.items())
            conn.query(f"SET {values}")
        try:
            yield
        finally:
            if settings:
                conn.query("SET " + ", ".join(f"{k} = DEFAULT" for k in settings))
            if database and database != self.database:
                conn.query(f"USE {self.database}")

    def _run(self, conn: Any, request: Query) -> tuple[Any, Answer]:
        spooled, reading = None, False
        try:
            if conn is None:
                conn = self._open(self.limits)
            sql, on, settings = request.sql, conn, request.settings
            if settings.get("readonly", "0") != "0":  # a reader's (the sink's /sql)
                reading = self._reading.acquire()
                on, settings = self._reader(settings), {}
            if request.rows is not None:  # writable only: an insert's rows from the body
                assert self._spool is not None
                table, fmt = request.rows
                spooled = self._spool / f"{uuid.uuid4().hex}.{fmt}"
                spooled.write_bytes(request.body)
                sql = f"INSERT INTO {table} SELECT * FROM file({quoted(str(spooled))}, {fmt})"
            with self._on(on, request.database, settings):
                result = (
                    on.query(sql, request.fmt, params=request.params) if request.params
                    else on.query(sql, request.fmt)
                )  # fmt: skip
        except Exception as exc:  # the engine's errors are ClickHouse's text
            raise QueryFailed(str(exc)) from exc
        finally:
            if reading:
                self._reading.release()
            if spooled is not None:
                spooled.unlink(missing_ok=True)
        return conn, Answer(
            result.bytes(), request.fmt, result.rows_read(), result.bytes_read(),
            result.elapsed(), result.rows_written(), result.bytes_written(),
        )  # fmt: skip

    async def query(self, request: Query) -> Answer:
        conn = await self._free.get()
        try:
            conn, answer = await asyncio.to_thread(self._run, conn, request)
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


def mount_clickhouse_http(
    app: FastAPI, engine: AnalystEngine, tokens: TokenFile | None, password: str = ""
) -> None:
    """Serve ClickHouse's HTTP interface on ``app``'s ``/`` and ``/ping``: credentials are
    gpusched tokens, or with ``tokens`` None the one ``password`` (none when empty)."""

    def refused(token: str | None) -> QueryFailed | None:
        if tokens is None:
            if password and token != password:
                return QueryFailed("wrong password", 516, "AUTHENTICATION_FAILED")
            return None
        if not token:
            return QueryFailed(
                "a gpusched token is required as the password", 194, "REQUIRED_PASSWORD"
            )
        if tokens.identify(token) is None:
            return QueryFailed("unknown, malformed or revoked token", 516, "AUTHENTICATION_FAILED")
        return None

    @app.get("/ping", include_in_schema=False)
    async def ping() -> PlainTextResponse:
        return PlainTextResponse("Ok.\n")

    @app.api_route("/", methods=["GET", "POST"], include_in_schema=False)
    async def query(request: Request) -> Response:
        args = request.query_params
        query_id = args.get("query_id") or str(uuid.uuid4())
        body = b"" if request.method != "POST" else await request.body()
        try:
            body = decoded_body(body, request.headers.get("content-encoding", ""), args)
        except QueryFailed as exc:
            return _error(exc, query_id)
        insert = insert_rows(args.get("query", ""), body) if engine.writable else None
        if insert is not None:
            sql, rows, body = insert
        else:
            text = body.decode("utf-8", errors="replace")  # a query is text; bad bytes show
            sql = "\n".join(part for part in (args.get("query", ""), text) if part.strip())
            rows, body = None, b""
        if not sql.strip():
            return PlainTextResponse("Ok.\n")
        failed = refused(_credentials(request))
        if failed is not None:
            return _error(failed, query_id)
        unknown = sorted(k for k in args if k not in _OWN and not k.startswith("param_"))
        if unknown and not engine.writable:
            return _error(
                QueryFailed(
                    f"Cannot modify '{unknown[0]}' setting in readonly mode: the limits of "
                    "this store are fixed (GPUSCHED_SINK_QUERY_*)", 164, "READONLY"
                ), query_id,
            )  # fmt: skip
        bad = [k for k in unknown if not _SETTING.match(k)]
        if bad:
            failed = QueryFailed(f"Unknown setting '{bad[0]}'", 115, "UNKNOWN_SETTING")
            return _error(failed, query_id)
        fmt = (
            args.get("default_format") or request.headers.get("x-clickhouse-format")
            or "TabSeparated"
        )  # fmt: skip
        database = args.get("database") or request.headers.get("x-clickhouse-database")
        named = _FORMAT.search(sql) if rows is None else None
        shown = named.group(1) if named else fmt
        params = {k[6:]: v for k, v in args.items() if k.startswith("param_")}
        started = time.monotonic()
        try:
            answer = await engine.query(
                Query(sql, fmt, params, database, {k: args[k] for k in unknown}, rows, body)
            )
        except QueryFailed as exc:
            return _error(exc, query_id)
        summary = {
            "read_rows": str(answer.rows_read),
            "read_bytes": str(answer.bytes_read),
            "written_rows": str(answer.rows_written),
            "written_bytes": str(answer.bytes_written),
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
