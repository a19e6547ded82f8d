"""Settings of the collector service (environment, prefix GPUSCHED_COLLECTOR_ for its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings

__all__ = ["CollectorSettings"]


class CollectorSettings(KafkaSettings):
    """Where samples come from, how often, and how much to buffer during a broker outage."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    collector_source: Literal["nvml", "host", "simulated"] = Field(
        default="nvml",
        description="nvml: read this machine's GPUs; host: this machine as a node without "
        "GPUs (its CPUs and memory); simulated: the nodes of collector_cluster",
    )
    collector_cluster: Path | None = Field(
        default=None, description="*.cluster.csv of the simulated GPUs (source=simulated)"
    )
    collector_node_id: str | None = Field(
        default=None, description="node id of this machine (nvml, host; default: host name)"
    )
    collector_interval_s: float = Field(default=1.0, gt=0, le=3600, description="sampling period")
    collector_speed: float = Field(
        default=1.0,
        gt=0,
        description="simulated clock speed-up: rounds are interval_s apart in sample time "
        "and interval_s/speed apart in wall time",
    )
    collector_rounds: int | None = Field(
        default=None, ge=1, description="stop after this many rounds (default: run until stopped)"
    )
    collector_buffer_samples: int = Field(
        default=200_000,
        ge=1,
        description="samples held while the broker is unreachable; beyond it the oldest are "
        "dropped and counted",
    )
    collector_seed: int = Field(default=0, description="seed of the simulated readings")
