"""Event schemas carried on the gpusched topics (pydantic v2 models).

Every event is frozen, rejects unknown fields and carries ``schema_version`` so that a
reader can refuse a version it does not understand instead of misreading it. Times are
timezone-aware UTC datetimes; quantities carry their unit in the field name.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "SCHEMA_VERSION",
    "ControlOutcome",
    "ControlParameter",
    "ControlStatus",
    "DecisionAction",
    "DemandForecast",
    "Event",
    "ForecastPoint",
    "GpuTelemetrySample",
    "HostSample",
    "JobEvent",
    "JobEventType",
    "JobRequest",
    "NodeView",
    "PlacementDecision",
    "PowerState",
    "PriorityUpdate",
]

SCHEMA_VERSION: Final = 1

NonNegFloat = Annotated[float, Field(ge=0)]
Percent = Annotated[float, Field(ge=0, le=100)]
Name = Annotated[str, Field(min_length=1, max_length=256)]


_UUID4_CLEAR = ~(0xF << 76 | 0x3 << 62) & ((1 << 128) - 1)  # version and variant bits
_UUID4_SET = 4 << 76 | 2 << 62


def _new_id() -> str:
    """A random UUID (version 4) in hex, as ``uuid.uuid4().hex`` but in a third of the
    time (its ``UUID`` object is the cost), for the 10,000 samples a second of a fleet."""
    value = int.from_bytes(os.urandom(16)) & _UUID4_CLEAR | _UUID4_SET
    return value.to_bytes(16).hex()


def _now() -> datetime:
    return datetime.now(UTC)


class Event(BaseModel):
    """Common base: identity, time and schema version of one event."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1] = SCHEMA_VERSION
    event_id: Name = Field(default_factory=_new_id, description="unique id, for idempotent sinks")
    ts: AwareDatetime = Field(default_factory=_now, description="when the event happened (UTC)")


class GpuTelemetrySample(Event):
    """One reading of one GPU (NVML or simulated). Keyed by ``gpu_uuid``."""

    gpu_uuid: Name
    node_id: Name
    gpu_index: Annotated[int, Field(ge=0, le=1023)]
    gpu_model: Name
    utilization_pct: Percent
    memory_used_mib: NonNegFloat
    memory_total_mib: NonNegFloat
    power_w: NonNegFloat
    temperature_c: Annotated[float, Field(ge=-50, le=200)]
    sm_clock_mhz: NonNegFloat
    ecc_uncorrected: Annotated[int, Field(ge=0)] = 0
    mig_mode: bool = False
    interval_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        description="sampling interval: the sample stands for this much time (for energy)"
    )
    job_id: Name | None = None
    source: Literal["nvml", "simulated"] = "nvml"

    @model_validator(mode="after")
    def _memory_fits(self) -> GpuTelemetrySample:
        if self.memory_used_mib > self.memory_total_mib:
            raise ValueError(
                f"memory_used_mib ({self.memory_used_mib}) exceeds "
                f"memory_total_mib ({self.memory_total_mib})"
            )
        return self


class HostSample(Event):
    """That a node without GPUs is there, and its size: one reading per collector round,
    so the live view has every node, GPU or not. Keyed by ``node_id``."""

    node_id: Name
    cpu_milli: Annotated[int, Field(ge=0)]
    memory_mib: Annotated[int, Field(ge=0)]
    interval_s: Annotated[float, Field(gt=0, le=3600)] = Field(
        description="sampling interval: the next reading is due after this long"
    )
    source: Literal["host", "simulated"] = "simulated"


class JobEventType(StrEnum):
    """A job's lifecycle: submitted → (placed → running → (preempted → placed …)) → end."""

    SUBMITTED = "submitted"
    PLACED = "placed"
    RUNNING = "running"
    PREEMPTED = "preempted"
    REQUEUED = "requeued"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def holds_gpus(self) -> bool:
        """After this event the job holds the GPUs named in the event."""
        return self in (JobEventType.PLACED, JobEventType.RUNNING)

    @property
    def requeues(self) -> bool:
        """After this event the job has released its GPUs and waits to run again."""
        return self in (JobEventType.PREEMPTED, JobEventType.REQUEUED)

    @property
    def ends(self) -> bool:
        """After this event the job is over and holds nothing."""
        return self in (JobEventType.FINISHED, JobEventType.FAILED, JobEventType.CANCELLED)


class JobRequest(BaseModel):
    """What a job asks for: a gang of whole GPUs, or a fraction of one GPU."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_gpu: Annotated[float, Field(ge=0, le=4096)] = Field(
        description="0 = CPU only; 0 < x < 1 = share of one GPU; else whole GPUs, all at once"
    )
    gpu_models: tuple[Name, ...] = Field(default=(), description="allowed GPU models; empty = any")
    cpu_milli: Annotated[int, Field(ge=0)] = 0
    memory_mib: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _whole_or_fraction(self) -> JobRequest:
        if self.num_gpu > 1 and self.num_gpu != int(self.num_gpu):
            raise ValueError(f"num_gpu above 1 must be whole, got {self.num_gpu}")
        return self


class JobEvent(Event):
    """A change in a job's lifecycle. Keyed by ``job_id``."""

    job_id: Name
    type: JobEventType
    tenant: Name = "default"
    priority_class: Name = "normal"
    request: JobRequest | None = Field(
        default=None, description="required on 'submitted'; absent afterwards"
    )
    node_ids: tuple[Name, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = Field(
        default=(), description="per node in node_ids, the GPU indices used"
    )
    decision_id: Name | None = None
    reason: str | None = None
    actor: Name | None = Field(
        default=None,
        description="who asked for it through the API (the token's name): submissions and "
        "cancels; None for what the platform itself records",
    )

    @model_validator(mode="after")
    def _submitted_has_request(self) -> JobEvent:
        if self.type is JobEventType.SUBMITTED and self.request is None:
            raise ValueError("a 'submitted' job event must carry its request")
        return self


class PriorityUpdate(Event):
    """A job's recomputed priority, with the parts it is made of. Keyed by ``job_id``."""

    job_id: Name
    policy: Name
    score: float
    components: dict[Name, float] = Field(
        default_factory=dict, description="named terms of the score, e.g. aging, fair_share"
    )
    pending_reason: str | None = Field(
        default=None, description="why the job is not running, in words; None when running"
    )
    estimated_start: AwareDatetime | None = Field(
        default=None,
        description="when the scheduling core expects it to start (its reservation, or when "
        "the node it waits for is predicted to free up); None when it cannot tell",
    )
    epoch: Annotated[int, Field(ge=0)] = 0
    params_revision: Annotated[int, Field(ge=0)] = Field(
        default=0, description="the parameter revision in force when it was computed"
    )


class PowerState(StrEnum):
    ON = "on"
    PARKED = "parked"
    WAKING = "waking"


class NodeView(Event):
    """The live view of one node, as the processor sees it. Keyed by ``node_id``."""

    node_id: Name
    gpu_model: Name
    gpus_total: Annotated[int, Field(ge=0)]
    gpus_allocatable: NonNegFloat
    gpus_allocated: NonNegFloat
    utilization_pct: Percent
    power_w: NonNegFloat
    power_state: PowerState = PowerState.ON
    healthy: bool = True
    stale_gpus: tuple[Name, ...] = ()
    last_seen: AwareDatetime | None = None


class ForecastPoint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    ts: AwareDatetime
    yhat: float
    lower: float
    upper: float

    @model_validator(mode="after")
    def _ordered(self) -> ForecastPoint:
        if not self.lower <= self.yhat <= self.upper:
            raise ValueError(
                f"need lower <= yhat <= upper, got {self.lower}, {self.yhat}, {self.upper}"
            )
        return self


class DemandForecast(Event):
    """A forecast of one demand series with its interval. Keyed by ``series``."""

    series: Name = Field(description="e.g. 'gpu_demand/model=V100' or 'arrivals/tenant=vc1'")
    metric: Literal["gpu_demand", "arrivals"]
    model: Name = Field(description="'prophet', 'seasonal_naive', ...")
    step_s: Annotated[int, Field(gt=0)]
    interval_width: Annotated[float, Field(gt=0, lt=1)] = 0.8
    points: tuple[ForecastPoint, ...]
    note: str | None = Field(default=None, description="e.g. why a fallback model was used")


class DecisionAction(StrEnum):
    PLACE = "place"
    PREEMPT = "preempt"
    PARK = "park"
    WAKE = "wake"


class PlacementDecision(Event):
    """One scheduling decision, published before it is applied. Keyed by job or node id."""

    decision_id: Name = Field(default_factory=_new_id)
    epoch: Annotated[int, Field(ge=0)] = Field(description="dispatcher epoch that made it")
    action: DecisionAction
    job_id: Name | None = None
    node_ids: tuple[Name, ...] = ()
    gpu_indices: tuple[tuple[int, ...], ...] = ()
    gpu_share: Annotated[float, Field(ge=0, le=1)] | None = None
    reason: str = ""

    @model_validator(mode="after")
    def _target(self) -> PlacementDecision:
        needs_job = self.action in (DecisionAction.PLACE, DecisionAction.PREEMPT)
        if needs_job and self.job_id is None:
            raise ValueError(f"a '{self.action}' decision needs job_id")
        if self.action is not DecisionAction.PREEMPT and not self.node_ids:
            raise ValueError(f"a '{self.action}' decision needs node_ids")
        return self


class ControlParameter(Event):
    """A live scheduling parameter. Keyed by ``name`` on a compacted topic.

    A change made through the API is one revision: every parameter it changes is one
    message carrying the same ``revision`` and ``changeset``, who asked and why. The
    revision in force is the highest one on the topic (compaction keeps each parameter's
    latest message, and the latest revision's messages are among them)."""

    name: Name
    value: float | bool | str
    set_by: Name = Field(default="admin", description="who asked (a token's name)")
    revision: Annotated[int, Field(ge=0)] = Field(
        default=0, description="the parameter revision this value belongs to (0: none)"
    )
    changeset: Name | None = Field(default=None, description="one id per revision's request")
    role: Name | None = Field(default=None, description="the role of who asked")
    source: str | None = Field(default=None, description="the address the request came from")
    old_value: float | bool | str | None = Field(
        default=None, description="the value in force when it was asked"
    )
    reason: str | None = Field(default=None, description="why, in the words of who asked")


class ControlOutcome(StrEnum):
    APPLIED = "applied"
    REJECTED = "rejected"
    IN_FORCE = "in_force"  # a heartbeat: the revision the service works with now


class ControlStatus(Event):
    """What a service that reads the control topic did with a parameter (applied, or
    rejected with the error), and its heartbeat with the revision in force. Keyed by
    ``service``."""

    service: Name
    revision: Annotated[int, Field(ge=0)]
    outcome: ControlOutcome
    name: Name | None = Field(default=None, description="the parameter; None on a heartbeat")
    error: str | None = None
