"""The sink process: the consumer, and the SQL endpoint when it owns an embedded store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from urllib.parse import urlsplit

import uvicorn

from gpusched.contracts.health import Dependency, service_health
from gpusched.contracts.tokens import TokenFile
from gpusched.sink.clickhouse_http import AnalystEngine, mount_clickhouse_http
from gpusched.sink.consumer import Sink, SinkStats
from gpusched.sink.settings import SinkSettings
from gpusched.sink.sql import sql_app
from gpusched.store import Store, StoreSettings, connect

__all__ = ["run_sink"]

log = logging.getLogger(__name__)


class _Server(uvicorn.Server):
    """uvicorn inside the sink's event loop: the sink handles SIGINT/SIGTERM itself and
    stops the server after its last batch is committed."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def run_sink(
    settings: SinkSettings, store_settings: StoreSettings, stop: asyncio.Event | None = None
) -> SinkStats:
    """Consume into the store until ``stop``; serve SQL on ``sink_sql_port`` (0: not):
    /sql, and ClickHouse's HTTP interface on / for an embedded store."""
    stop = stop or asyncio.Event()
    store = Store.open(store_settings)
    server = None
    if settings.sink_sql_port:
        app = sql_app(connect(store_settings.dsn, store_settings.database), settings.query_limits())
        if urlsplit(store_settings.dsn).scheme == "chdb":
            engine = AnalystEngine(store_settings.dsn, store_settings.database, settings)
            mount_clickhouse_http(app, engine, TokenFile(settings.api_tokens_file))
        config = uvicorn.Config(
            app,
            host=settings.sink_sql_host,
            port=settings.sink_sql_port,
            log_level="warning",
        )
        server = _Server(config)
        serving = asyncio.create_task(server.serve())
        log.info(
            "read-only SQL on http://%s:%d/sql and / (ClickHouse's HTTP interface)",
            settings.sink_sql_host,
            settings.sink_sql_port,
        )
    store_state = Dependency("the store (ClickHouse)", store_settings.shown_dsn, log)
    try:
        async with service_health(settings, "sink", log, store_state):
            return await Sink(settings, store, store_state).run(stop)
    finally:
        if server is not None:
            server.should_exit = True
            await serving
