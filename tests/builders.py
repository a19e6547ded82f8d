"""Builders of valid contract events for tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import BaseModel

from gpusched.contracts import (
    ControlOutcome,
    ControlParameter,
    ControlStatus,
    DecisionAction,
    DemandForecast,
    ForecastPoint,
    GpuTelemetrySample,
    HostSample,
    JobEvent,
    JobEventType,
    JobRequest,
    NodeView,
    PlacementDecision,
    PriorityUpdate,
)

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def every_event(t0: datetime = T0) -> list[BaseModel]:
    """One valid event of every contract model."""
    return [
        GpuTelemetrySample(
            ts=t0,
            gpu_uuid="GPU-0001",
            node_id="n1",
            gpu_index=0,
            gpu_model="V100",
            utilization_pct=87.5,
            memory_used_mib=12000,
            memory_total_mib=16384,
            power_w=250.0,
            temperature_c=66,
            sm_clock_mhz=1530,
            interval_s=1.0,
            job_id="j1",
            source="simulated",
        ),
        HostSample(ts=t0, node_id="cpu1", cpu_milli=96000, memory_mib=786432, interval_s=1.0),
        JobEvent(
            ts=t0,
            job_id="j1",
            type=JobEventType.SUBMITTED,
            tenant="vc1",
            priority_class="high",
            request=JobRequest(num_gpu=8, gpu_models=("V100",), cpu_milli=32000, memory_mib=65536),
        ),
        JobEvent(
            ts=t0 + timedelta(seconds=5),
            job_id="j1",
            type=JobEventType.PLACED,
            node_ids=("n1",),
            gpu_indices=((0, 1, 2, 3, 4, 5, 6, 7),),
            decision_id="d1",
        ),
        PriorityUpdate(
            ts=t0,
            job_id="j2",
            policy="dynamic",
            score=0.75,
            components={"aging": 0.5, "fair_share": 0.25},
            pending_reason="waiting for 8 x V100 on one node",
            epoch=3,
        ),
        NodeView(
            ts=t0,
            node_id="n1",
            gpu_model="V100",
            gpus_total=8,
            gpus_allocatable=8,
            gpus_allocated=8,
            utilization_pct=87.5,
            power_w=2100,
            last_seen=t0,
        ),
        DemandForecast(
            ts=t0,
            series="gpu_demand/model=V100",
            metric="gpu_demand",
            model="prophet",
            step_s=600,
            points=(
                ForecastPoint(ts=t0 + timedelta(minutes=10), yhat=100, lower=80, upper=120),
                ForecastPoint(ts=t0 + timedelta(minutes=20), yhat=110, lower=85, upper=140),
            ),
        ),
        PlacementDecision(
            ts=t0,
            decision_id="d1",
            epoch=3,
            action=DecisionAction.PLACE,
            job_id="j1",
            node_ids=("n1",),
            gpu_indices=((0, 1, 2, 3, 4, 5, 6, 7),),
            reason="fits",
        ),
        ControlParameter(
            ts=t0,
            name="dynamic.aging_weight",
            value=0.3,
            revision=1,
            set_by="ops",
            role="operator",
            old_value=0.5,
            reason="age faster",
        ),
        ControlStatus(
            ts=t0 + timedelta(seconds=1),
            service="processor",
            revision=1,
            outcome=ControlOutcome.APPLIED,
            name="dynamic.aging_weight",
        ),
    ]
