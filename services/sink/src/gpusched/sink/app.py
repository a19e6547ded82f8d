"""The sink process: the consumer, and the SQL endpoint when it owns an embedded store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Iterator

import uvicorn

from gpusched.contracts.health import Dependency, service_health
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
    """Consume into the store until ``stop``; serve SQL on ``sink_sql_port`` (0: not)."""
    stop = stop or asyncio.Event()
    store = Store.open(store_settings)
    lock = threading.Lock()
    server = None
    if settings.sink_sql_port:
        config = uvicorn.Config(
            sql_app(connect(store_settings.dsn, store_settings.database), lock),
            host=settings.sink_sql_host,
            port=settings.sink_sql_port,
            log_level="warning",
        )
        server = _Server(config)
        serving = asyncio.create_task(server.serve())
        log.info(
            "read-only SQL on http://%s:%d/sql", settings.sink_sql_host, settings.sink_sql_port
        )
    store_state = Dependency("the store (ClickHouse)", store_settings.shown_dsn, log)
    try:
        async with service_health(settings, "sink", log, store_state):
            return await Sink(settings, store, lock, store_state).run(stop)
    finally:
        if server is not None:
            server.should_exit = True
            await serving
