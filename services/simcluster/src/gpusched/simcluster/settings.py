"""Settings of the simulated cluster (environment variables GPUSCHED_SIMCLUSTER_*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["SimClusterSettings"]


class SimClusterSettings(BaseSettings):
    """The simulated cluster behind the ``sim`` backend."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    simcluster_cluster: Path | None = Field(
        default=None, description="*.cluster.csv of the simulated nodes"
    )
    simcluster_trace: Path | None = Field(
        default=None, description="*.jobs.csv whose durations jobs of the same id run for"
    )
    simcluster_speed: float = Field(
        default=1.0, gt=0, description="run times and wake latency are divided by this"
    )
    simcluster_default_duration_s: float = Field(
        default=60.0, gt=0, description="run time of a job not in the trace (before speed-up)"
    )
    simcluster_host: str = Field(default="127.0.0.1", description="listen address")
    simcluster_port: int = Field(default=18200, ge=1, le=65535, description="listen port")
