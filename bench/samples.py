"""Synthetic telemetry for the benchmarks: ``count`` samples from a fleet of ``gpus``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpusched.contracts import GpuTelemetrySample

# Recent: the telemetry table keeps 30 days (TTL), and ClickHouse drops rows already past
# their TTL as it inserts them, so older samples would bench an insert that writes nothing.
T0 = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)


def telemetry_samples(count: int, gpus: int) -> list[GpuTelemetrySample]:
    """One sample per GPU per second, GPUs eight to a node, for ``count`` samples."""
    return [
        GpuTelemetrySample(
            ts=T0 + timedelta(seconds=i // gpus),
            gpu_uuid=f"GPU-{i % gpus:06d}",
            node_id=f"n{(i % gpus) // 8}",
            gpu_index=i % 8,
            gpu_model="V100",
            utilization_pct=i % 100,
            memory_used_mib=1000,
            memory_total_mib=16384,
            power_w=200,
            temperature_c=60,
            sm_clock_mhz=1500,
            interval_s=1.0,
        )
        for i in range(count)
    ]
