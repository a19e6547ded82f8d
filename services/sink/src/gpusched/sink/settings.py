"""Settings of the sink service (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings
from gpusched.contracts.settings import TokenFileSettings

__all__ = ["SinkSettings"]


class SinkSettings(KafkaSettings, TokenFileSettings):
    """Batching of the sink, where it serves read-only SQL (its own `/sql` and ClickHouse's
    HTTP interface on `/`), and the limits of the analysts' queries there."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    sink_group_id: str = Field(
        default="gpusched-sink", description="consumer group (the topic prefix is put in front)"
    )
    sink_batch_max: int = Field(default=50_000, ge=1, description="most events in one insert")
    sink_flush_s: float = Field(
        default=1.0, gt=0, description="longest time an event waits before its batch is inserted"
    )
    sink_sql_host: str = Field(
        default="127.0.0.1",
        description="address of the read-only SQL endpoints: /sql, and ClickHouse's HTTP "
        "interface on /",
    )
    sink_sql_port: int = Field(
        default=18123, ge=0, le=65535, description="port of the read-only SQL endpoint (0: off)"
    )
    sink_query_workers: int = Field(
        default=2, ge=1, le=64, description="analyst queries (/) run at once; more wait their turn"
    )
    sink_query_max_threads: int = Field(
        default=1,
        ge=1,
        le=256,
        description="ClickHouse max_threads of an analyst query (leaves cores to ingestion)",
    )
    sink_query_max_execution_s: int = Field(
        default=60, ge=1, description="ClickHouse max_execution_time of a query on / and /sql"
    )
    sink_query_max_memory_bytes: int = Field(
        default=4 * 2**30,
        ge=2**20,
        description="ClickHouse max_memory_usage of a query on / and /sql",
    )
    sink_query_max_result_rows: int = Field(
        default=1_000_000, ge=1, description="ClickHouse max_result_rows of a query on / and /sql"
    )
    sink_query_result_overflow_mode: Literal["throw", "break"] = Field(
        default="throw",
        description="over max_result_rows: throw (an error) or break (a truncated result)",
    )

    def query_limits(self) -> dict[str, int | str]:
        """The ClickHouse settings that bound every query of the read-only endpoints (the
        analysts' also get ``max_threads``)."""
        return {
            "max_execution_time": self.sink_query_max_execution_s,
            "max_memory_usage": self.sink_query_max_memory_bytes,
            "max_result_rows": self.sink_query_max_result_rows,
            "result_overflow_mode": self.sink_query_result_overflow_mode,
        }

    store_server_host: str = Field(
        default="127.0.0.1",
        description="address of gpusched store-server: the embedded store, writable, over "
        "ClickHouse's HTTP interface",
    )
    store_server_port: int = Field(
        default=18124, ge=1, le=65535, description="port of gpusched store-server"
    )
    store_server_password: str = Field(
        default="",
        description="the password (any user name) gpusched store-server asks for (empty: none)",
    )

    sink_failpoint: Literal["", "after_insert"] = Field(
        default="",
        description="fault tests only: after_insert = exit at once after inserting a batch, "
        "before committing its offsets (a crash at the worst moment)",
    )
