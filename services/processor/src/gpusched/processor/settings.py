"""Settings of the processor service (environment, prefix GPUSCHED_)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings
from gpusched.core import live_policy

__all__ = ["ProcessorSettings"]


def _default_data_dir() -> Path:
    return Path("var") / "processor"


class ProcessorSettings(KafkaSettings):
    """The Faust worker: which policy scores jobs, how often, and when a GPU is stale."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    processor_app_id: str = Field(
        default="gpusched-processor",
        description="Faust app id: the name of its consumer groups and internal topics "
        "(<id>-merge); the topic prefix is put in front",
    )
    processor_policy: Annotated[str, AfterValidator(live_policy)] = Field(
        default="dynamic", description="policy whose priorities it publishes"
    )
    processor_priority_interval_s: float = Field(
        default=5.0, gt=0, description="priorities are recomputed at least this often"
    )
    processor_min_recompute_s: float = Field(
        default=0.25, ge=0, description="least time between two recomputations on job events"
    )
    processor_stale_after_s: float = Field(
        default=30.0, gt=0, description="a GPU with no sample for this long is stale"
    )
    processor_flush_s: float = Field(
        default=0.2,
        gt=0,
        description="longest wait for a telemetry batch before the view is published",
    )
    processor_ended_jobs_per_tenant: int = Field(
        default=2000,
        ge=0,
        description="ended jobs kept per tenant (the newest) for run-time predictions and "
        "fair share; older ones are forgotten (a tombstone on the merge topic)",
    )
    processor_data_dir: Path = Field(
        default_factory=_default_data_dir, description="Faust's data directory"
    )
