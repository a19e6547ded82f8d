"""Settings of the forecaster service (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from gpusched.contracts import KafkaSettings
from pydantic_settings import SettingsConfigDict

__all__ = ["ForecasterSettings"]


class ForecasterSettings(KafkaSettings):
    """The forecaster's settings; its own fields arrive with the issue that builds it."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")
