"""gpusched.sink: every gpusched topic into ClickHouse, and read-only SQL over HTTP."""

from gpusched.sink.app import run_sink, serve_store
from gpusched.sink.consumer import Sink, SinkStats
from gpusched.sink.settings import SinkSettings
from gpusched.sink.sql import sql_app

__all__ = ["Sink", "SinkSettings", "SinkStats", "run_sink", "serve_store", "sql_app"]
