"""Settings shared by several services: the Kafka connection of every service that talks
to the broker, and the token file of those that check API tokens (the API, the sink's
ClickHouse HTTP interface)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "KafkaSettings",
    "LogSettings",
    "TokenFileSettings",
    "checkout_root",
    "client_options",
    "producer_options",
]


def checkout_root() -> Path:
    """The gpusched checkout this package runs from; the working directory for an installed
    wheel (state then lives in ./var unless settings say otherwise)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "uv.lock").is_file() and (parent / "libs" / "store").is_dir():
            return parent
    return Path.cwd()


class KafkaSettings(BaseSettings):
    """Where the broker is, under which topic prefix this deployment lives, and how a
    client proves who it is (SASL/SCRAM when the broker asks for it)."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    kafka_bootstrap_servers: str = Field(
        default="127.0.0.1:19092",
        validation_alias=AliasChoices(
            "GPUSCHED_KAFKA_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS"
        ),
        description="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS is read too)",
    )
    topic_prefix: str = Field(default="", description="prefix before every topic name")
    health_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="serve GET /healthz (the state of the service's dependencies) on "
        "127.0.0.1:PORT; 0: none (the API has /readyz)",
    )
    kafka_instance_id: str = Field(
        default="",
        description="static group membership (group.instance.id): a stable name per "
        "replica, e.g. the pod name; a consumer restarted under it within the session "
        "timeout gets its partitions back without a rebalance of the group. Empty: "
        "dynamic membership",
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="PLAINTEXT, or SASL_PLAINTEXT / SASL_SSL to authenticate with SCRAM",
    )
    kafka_sasl_mechanism: Literal["SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        default="SCRAM-SHA-256", description="the SASL mechanism (with SASL_*)"
    )
    kafka_sasl_username: str | None = Field(
        default=None, description="the client's Kafka principal (with SASL_*)"
    )
    kafka_sasl_password: SecretStr | None = Field(
        default=None, description="its password (with SASL_*)"
    )

    @model_validator(mode="after")
    def _credentials(self) -> KafkaSettings:
        sasl = self.kafka_security_protocol.startswith("SASL")
        if sasl and not (self.kafka_sasl_username and self.kafka_sasl_password):
            raise ValueError(
                f"GPUSCHED_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                "GPUSCHED_KAFKA_SASL_USERNAME and GPUSCHED_KAFKA_SASL_PASSWORD"
            )
        return self

    def client_options(self) -> dict[str, Any]:
        """The connection keyword arguments of an aiokafka client (producer, consumer,
        admin): the bootstrap servers and, with SASL, the credentials."""
        options: dict[str, Any] = {"bootstrap_servers": self.kafka_bootstrap_servers}
        if self.kafka_security_protocol != "PLAINTEXT":
            assert self.kafka_sasl_password is not None  # checked above
            options.update(
                security_protocol=self.kafka_security_protocol,
                sasl_mechanism=self.kafka_sasl_mechanism,
                sasl_plain_username=self.kafka_sasl_username,
                sasl_plain_password=self.kafka_sasl_password.get_secret_value(),
            )
        if self.kafka_security_protocol == "SASL_SSL":
            from aiokafka.helpers import create_ssl_context

            options["ssl_context"] = create_ssl_context()
        return options

    def group_options(self, role: str) -> dict[str, Any]:
        """A group consumer's membership options: with ``kafka_instance_id``, the static
        member ``<instance id>-<role>`` (``role`` tells this process's groups apart)."""
        if not self.kafka_instance_id:
            return {}
        return {"group_instance_id": f"{self.kafka_instance_id}-{role}"}


def producer_options(kafka: KafkaSettings | str) -> dict[str, Any]:
    """The options every gpusched producer shares: its connection, writes acknowledged
    by every in-sync replica (``acks=all``: with min.insync.replicas 2 on 3 brokers a
    write survives one broker's loss) and idempotence (a batch retried after a lost
    answer is written once, in order). Use them through ``gpusched.contracts.producer``,
    which bounds what aiokafka's idempotent producer would wait for without end."""
    return {**client_options(kafka), "acks": "all", "enable_idempotence": True}


def client_options(kafka: KafkaSettings | str) -> dict[str, Any]:
    """aiokafka connection options from settings, or from bare bootstrap servers (a
    broker without authentication)."""
    if isinstance(kafka, str):
        return {"bootstrap_servers": kafka}
    return kafka.client_options()


class TokenFileSettings(BaseSettings):
    """Where the API tokens' records are (gpusched.contracts.tokens)."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    api_tokens_file: Path = Field(
        default_factory=lambda: checkout_root() / "var" / "tokens.json",
        description="the token records (hashes, roles, tenants); "
        "default <checkout>/var/tokens.json",
    )


class LogSettings(BaseSettings):
    """How every service writes its log (to stderr)."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    log_format: Literal["text", "json"] = Field(
        default="text",
        description="text: one readable line per record; json: one JSON object per line "
        "(timestamp, level, logger, message, exception), for log collectors",
    )
