"""Kafka connection settings shared by every service that talks to the broker."""

from __future__ import annotations

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["KafkaSettings"]


class KafkaSettings(BaseSettings):
    """Where the broker is and under which topic prefix this deployment lives."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:19092",
        validation_alias=AliasChoices(
            "GPUSCHED_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS"
        ),
        description="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS is read too)",
    )
    topic_prefix: str = Field(default="", description="prefix before every topic name")
