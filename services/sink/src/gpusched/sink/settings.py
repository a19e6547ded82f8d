"""Settings of the sink service (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings

__all__ = ["SinkSettings"]


class SinkSettings(KafkaSettings):
    """Batching of the sink, and where it serves read-only SQL."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    sink_group_id: str = Field(
        default="gpusched-sink", description="consumer group (the topic prefix is put in front)"
    )
    sink_batch_max: int = Field(default=50_000, ge=1, description="most events in one insert")
    sink_flush_s: float = Field(
        default=1.0, gt=0, description="longest time an event waits before its batch is inserted"
    )
    sink_sql_host: str = Field(
        default="127.0.0.1", description="address of the read-only SQL endpoint"
    )
    sink_sql_port: int = Field(
        default=18123, ge=0, le=65535, description="port of the read-only SQL endpoint (0: off)"
    )
