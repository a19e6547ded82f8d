"""Settings of the dispatcher and of the simulated cluster (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings

__all__ = ["DispatcherSettings", "SimClusterSettings"]


class DispatcherSettings(KafkaSettings):
    """Which backend, which policy, how often to cycle."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    dispatcher_backend: Literal["sim", "slurm", "kubernetes"] = Field(
        default="sim",
        description="cluster backend: sim (a `gpusched simcluster` process), slurm, kubernetes",
    )
    dispatcher_sim_url: str = Field(
        default="http://127.0.0.1:18200", description="where the simulated cluster listens"
    )
    dispatcher_slurm_url: str = Field(
        default="http://127.0.0.1:6820", description="slurmrestd (backend slurm)"
    )
    dispatcher_slurm_token: str = Field(
        default="", description="JWT for slurmrestd (`scontrol token`); default: $SLURM_JWT"
    )
    dispatcher_slurm_partition: str = Field(default="gpu", description="partition jobs go to")
    dispatcher_slurm_job_s: float = Field(
        default=60.0, gt=0, description="how long the placeholder job script sleeps (slurm)"
    )
    dispatcher_kube_url: str = Field(
        default="", description="kube-apiserver URL (backend kubernetes); empty: kubeconfig"
    )
    dispatcher_kube_token: str = Field(default="", description="bearer token for the URL")
    dispatcher_kube_verify_tls: bool = Field(
        default=True, description="verify the API server's certificate"
    )
    dispatcher_kube_scheduler_name: str = Field(
        default="gpusched", description="pods naming this schedulerName are ours"
    )
    dispatcher_policy: str = Field(default="dynamic", description="scheduling policy (core)")
    dispatcher_placement: str = Field(default="bestfit", description="placement strategy")
    dispatcher_tick_s: float = Field(
        default=5.0, gt=0, description="longest time between two scheduling cycles"
    )
    dispatcher_min_cycle_s: float = Field(
        default=0.05, ge=0, description="shortest time between two cycles (batches bursts)"
    )


class SimClusterSettings(KafkaSettings):
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
