"""Settings of the dispatcher and of the simulated cluster (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings
from gpusched.core import live_policy, placement_name

__all__ = ["DispatcherSettings"]


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
        default="",
        description="kube-apiserver URL (backend kubernetes); empty: the pod's ServiceAccount "
        "inside a cluster, else kubeconfig",
    )
    dispatcher_kube_token: str = Field(default="", description="bearer token for the URL")
    dispatcher_kube_verify_tls: bool = Field(
        default=True, description="verify the API server's certificate"
    )
    dispatcher_kube_scheduler_name: str = Field(
        default="gpusched", description="pods naming this schedulerName are ours"
    )
    dispatcher_policy: Annotated[str, AfterValidator(live_policy)] = Field(
        default="dynamic", description="scheduling policy (core; NAME+powersave accepted)"
    )
    dispatcher_placement: Annotated[str, AfterValidator(placement_name)] = Field(
        default="bestfit", description="placement strategy: spread, bestfit, fgd"
    )
    dispatcher_tick_s: float = Field(
        default=5.0, gt=0, description="longest time between two scheduling cycles"
    )
    dispatcher_min_cycle_s: float = Field(
        default=0.05, ge=0, description="shortest time between two cycles (batches bursts)"
    )
