"""The sink process: the consumer, and the SQL endpoint when it owns an embedded store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import uvicorn
from fastapi import FastAPI

from gpusched.contracts.health import Dependency, service_health
from gpusched.contracts.tokens import TokenFile
from gpusched.sink.clickhouse_http import AnalystEngine, mount_clickhouse_http
from gpusched.sink.consumer import Sink, SinkStats
from gpusched.sink.settings import SinkSettings
from gpusched.sink.sql import sql_app
from gpusched.store import Store, StoreSettings, UnsupportedDsn, connect

__all__ = ["run_sink", "serve_store"]

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn inside the sink's event loop: the sink handles SIGINT/SIGTERM itself and
    stops the server after its last batch is committed."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def _serving(app: FastAPI, host: str, port: int) -> AsyncIterator[None]:
    """``app`` served on ``host:port`` while inside; stopped (requests finished) on exit."""
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    serving = asyncio.create_task(server.serve())
    try:
        yield
    finally:
        server.should_exit = True
        await serving


async def run_sink(
    settings: SinkSettings, store_settings: StoreSettings, stop: asyncio.Event | None = None
) -> SinkStats:
    """Consume into the store until ``stop``; serve SQL on ``sink_sql_port`` (0: not):
    /sql, and ClickHouse's HTTP interface on / for an embedded store."""
    stop = stop or asyncio.Event()
    store = Store.open(store_settings)
    async with contextlib.AsyncExitStack() as stack:
        if settings.sink_sql_port:
            app = sql_app(
                connect(store_settings.dsn, store_settings.database), settings.query_limits()
            )
            if urlsplit(store_settings.dsn).scheme == "chdb":
                engine = AnalystEngine(store_settings.dsn, store_settings.database, settings)
                mount_clickhouse_http(app, engine, TokenFile(settings.api_tokens_file))
            host, port = settings.sink_sql_host, settings.sink_sql_port
            await stack.enter_async_context(_serving(app, host, port))
            log.info("read-only SQL on http://%s:%d/sql and / (ClickHouse's HTTP interface)",
                     host, port)  # fmt: skip
        store_state = Dependency("the store (ClickHouse)", store_settings.shown_dsn, log)
        async with service_health(settings, "sink", log, store_state):
            return await Sink(settings, store, store_state).run(stop)


async def serve_store(
    settings: SinkSettings, store_settings: StoreSettings, stop: asyncio.Event | None = None
) -> None:
    """Serve the embedded store of ``store_settings`` (a ``chdb://`` DSN), writable, over
    ClickHouse's HTTP interface until ``stop``: other processes reach it with an
    ``http://`` DSN, as they would a ClickHouse server."""
    stop = stop or asyncio.Event()
    if urlsplit(store_settings.dsn).scheme != "chdb":
        shown = store_settings.shown_dsn
        raise UnsupportedDsn(f"gpusched store-server serves an embedded store, not {shown}")
    app = FastAPI(title="gpusched store-server", docs_url=None, redoc_url=None, openapi_url=None)
    engine = AnalystEngine(store_settings.dsn, store_settings.database, settings, writable=True)
    mount_clickhouse_http(app, engine, None, settings.store_server_password)
    host, port = settings.store_server_host, settings.store_server_port
    async with _serving(app, host, port):
        log.info("the store %s, writable, on http://%s:%d (ClickHouse's HTTP interface)",
                 store_settings.shown_dsn, host, port)  # fmt: skip
        await stop.wait()
