"""Settings of the sink service (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings

__all__ = ["SinkSettings"]


class SinkSettings(KafkaSettings):
    """The sink's settings; its own fields arrive with the issue that builds it."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")
