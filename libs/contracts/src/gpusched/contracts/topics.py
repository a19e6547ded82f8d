"""The gpusched topics: names, the event each carries and its key (a public contract)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from gpusched.contracts.errors import UnknownTopic
from gpusched.contracts.events import (
    ControlParameter,
    ControlStatus,
    DemandForecast,
    GpuTelemetrySample,
    HostSample,
    JobEvent,
    NodeView,
    PlacementDecision,
    PriorityUpdate,
)

__all__ = ["DLQ_SUFFIX", "TOPICS", "Topic", "topic_for"]

DLQ_SUFFIX = ".dlq"


@dataclass(frozen=True)
class Topic:
    """One topic of the contract. ``name(prefix)`` gives its name under a test prefix."""

    base: str
    model: type[BaseModel]
    key_field: str
    description: str

    def name(self, prefix: str = "") -> str:
        return f"{prefix}{self.base}"

    def dlq(self, prefix: str = "") -> str:
        return f"{prefix}{self.base}{DLQ_SUFFIX}"


TELEMETRY = Topic("gpusched.telemetry.v1", GpuTelemetrySample, "gpu_uuid", "GPU telemetry samples")
HOSTS = Topic(
    "gpusched.hosts.v1",
    HostSample,
    "node_id",
    "readings of nodes without GPUs (there, and how big)",
)
JOBS = Topic("gpusched.jobs.v1", JobEvent, "job_id", "job submissions and lifecycle events")
VIEW = Topic("gpusched.view.v1", NodeView, "node_id", "live per-node resource view (compacted)")
PRIORITIES = Topic("gpusched.priorities.v1", PriorityUpdate, "job_id", "recomputed job priorities")
PLACEMENTS = Topic(
    "gpusched.placements.v1", PlacementDecision, "decision_id", "scheduling decisions"
)
FORECASTS = Topic(
    "gpusched.forecasts.v1", DemandForecast, "series", "demand forecasts with intervals"
)
CONTROL = Topic(
    "gpusched.control.v1", ControlParameter, "name", "live scheduling parameters (compacted)"
)
CONTROL_STATUS = Topic(
    "gpusched.control.status.v1",
    ControlStatus,
    "service",
    "what each service did with each parameter revision, and its heartbeat",
)

TOPICS: tuple[Topic, ...] = (
    TELEMETRY,
    HOSTS,
    JOBS,
    VIEW,
    PRIORITIES,
    PLACEMENTS,
    FORECASTS,
    CONTROL,
    CONTROL_STATUS,
)


def topic_for(name: str, prefix: str = "") -> Topic:
    """The topic whose (prefixed) name is ``name``; a DLQ name resolves to its input topic."""
    bare = name.removeprefix(prefix).removesuffix(DLQ_SUFFIX)
    for topic in TOPICS:
        if topic.base == bare:
            return topic
    known = ", ".join(t.base for t in TOPICS)
    raise UnknownTopic(f"unknown topic {name!r} (prefix {prefix!r}); known: {known}")
