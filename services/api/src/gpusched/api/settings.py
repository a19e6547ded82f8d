"""Settings of the REST API (environment, prefix GPUSCHED_API_ for its own)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings
from gpusched.contracts.settings import TokenFileSettings

__all__ = ["ApiSettings"]


class ApiSettings(KafkaSettings, TokenFileSettings):
    """Where the REST API listens, who may use it, and how fresh its view of the cluster's
    GPUs is."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    api_host: str = Field(default="127.0.0.1", description="REST API listen address")
    api_port: int = Field(default=18080, ge=1, le=65535, description="REST API port")
    api_catalog_ttl_s: float = Field(
        default=30.0, ge=0, description="how long the cluster's GPU models are cached"
    )
    api_auth: bool = Field(
        default=True,
        description="require a bearer token on every route (off only for tests that say why)",
    )
    api_kafka_timeout_s: float = Field(
        default=5.0,
        gt=0,
        le=120,
        description="how long a submission or cancel waits for the event log (Kafka) to "
        "acknowledge it before the API answers 503",
    )
