"""How each event model becomes rows of its ClickHouse table."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from gpusched.contracts import (
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

__all__ = ["TABLES", "TableSpec", "table_for"]

Row = list[Any]


@dataclass(frozen=True)
class TableSpec:
    """A table, its columns, and how one event of ``model`` turns into rows."""

    name: str
    model: type[BaseModel]
    columns: tuple[str, ...]
    # how an event becomes rows; None: the columns are the event's own fields, and the
    # engine reads the event's JSON as its row (``Store.insert_events``)
    rows: Callable[[Any], Iterable[Row]] | None = None
    # a materialized view sums its rows (gpu_hourly): a consumer inserts them a block per
    # source partition, so that a batch read again in parts is skipped part by part
    summed: bool = False


def _job_rows(e: JobEvent) -> Iterable[Row]:
    r = e.request
    yield [
        e.event_id,
        e.ts,
        e.job_id,
        e.type.value,
        e.tenant,
        e.priority_class,
        r.num_gpu if r else None,
        list(r.gpu_models) if r else [],
        r.cpu_milli if r else None,
        r.memory_mib if r else None,
        list(e.node_ids),
        [list(i) for i in e.gpu_indices],
        e.decision_id,
        e.reason,
        e.actor,
    ]


def _forecast_rows(e: DemandForecast) -> Iterable[Row]:
    for p in e.points:
        yield [
            e.event_id,
            e.ts,
            e.series,
            e.metric,
            e.model,
            e.step_s,
            e.interval_width,
            p.ts,
            p.yhat,
            p.lower,
            p.upper,
            e.note,
        ]


def _text(value: float | bool | str | None) -> str | None:
    return None if value is None else str(value)


def _control_rows(e: ControlParameter) -> Iterable[Row]:
    yield [
        e.event_id,
        e.ts,
        e.name,
        str(e.value),
        e.set_by,
        e.revision,
        e.changeset,
        e.role,
        e.source,
        _text(e.old_value),
        e.reason,
    ]


_STATUS_COLUMNS = ("event_id", "ts", "service", "revision", "outcome", "name", "error")
_TELEMETRY_COLUMNS = (
    "event_id",
    "ts",
    "gpu_uuid",
    "node_id",
    "gpu_index",
    "gpu_model",
    "utilization_pct",
    "memory_used_mib",
    "memory_total_mib",
    "power_w",
    "temperature_c",
    "sm_clock_mhz",
    "ecc_uncorrected",
    "mig_mode",
    "interval_s",
    "job_id",
    "source",
)
_PLACEMENT_COLUMNS = (
    "event_id",
    "ts",
    "decision_id",
    "epoch",
    "action",
    "job_id",
    "node_ids",
    "gpu_indices",
    "gpu_share",
    "reason",
)
_PRIORITY_COLUMNS = (
    "event_id",
    "ts",
    "job_id",
    "policy",
    "score",
    "components",
    "pending_reason",
    "estimated_start",
    "epoch",
    "params_revision",
)
_VIEW_COLUMNS = (
    "event_id",
    "ts",
    "node_id",
    "gpu_model",
    "gpus_total",
    "gpus_allocatable",
    "gpus_allocated",
    "utilization_pct",
    "power_w",
    "power_state",
    "healthy",
    "stale_gpus",
    "last_seen",
)

_HOST_COLUMNS = ("event_id", "ts", "node_id", "cpu_milli", "memory_mib", "interval_s", "source")

TABLES: tuple[TableSpec, ...] = (
    TableSpec("telemetry", GpuTelemetrySample, _TELEMETRY_COLUMNS, summed=True),
    TableSpec("host_samples", HostSample, _HOST_COLUMNS),
    TableSpec(
        "job_events",
        JobEvent,
        (
            "event_id",
            "ts",
            "job_id",
            "type",
            "tenant",
            "priority_class",
            "num_gpu",
            "gpu_models",
            "cpu_milli",
            "memory_mib",
            "node_ids",
            "gpu_indices",
            "decision_id",
            "reason",
            "actor",
        ),
        _job_rows,
    ),
    TableSpec("placements", PlacementDecision, _PLACEMENT_COLUMNS),
    TableSpec("priorities", PriorityUpdate, _PRIORITY_COLUMNS),
    TableSpec(
        "forecasts",
        DemandForecast,
        (
            "event_id",
            "generated_at",
            "series",
            "metric",
            "model",
            "step_s",
            "interval_width",
            "target_ts",
            "yhat",
            "lower",
            "upper",
            "note",
        ),
        _forecast_rows,
    ),
    TableSpec("node_views", NodeView, _VIEW_COLUMNS),
    TableSpec(
        "control_params",
        ControlParameter,
        (
            "event_id",
            "ts",
            "name",
            "value",
            "set_by",
            "revision",
            "changeset",
            "role",
            "source",
            "old_value",
            "reason",
        ),
        _control_rows,
    ),
    TableSpec("control_status", ControlStatus, _STATUS_COLUMNS),
)


def table_for(model: type[BaseModel]) -> TableSpec:
    """The table that stores events of ``model``."""
    for spec in TABLES:
        if spec.model is model:
            return spec
    raise KeyError(f"no table stores {model.__name__}")
