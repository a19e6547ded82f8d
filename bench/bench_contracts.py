"""Codec throughput: decoding and validating telemetry samples, against plain json.loads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

from gpusched.contracts import GpuTelemetrySample, decode, encode

N = 50_000


def _rate(fn: Callable[[bytes], object], payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for p in payloads:
        fn(p)
    return len(payloads) / (time.perf_counter() - start)


def run() -> dict[str, float]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    payloads = [
        encode(
            GpuTelemetrySample(
                ts=t0,
                gpu_uuid=f"GPU-{i:06d}",
                node_id=f"n{i // 8}",
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
        )
        for i in range(N)
    ]
    baseline = _rate(json.loads, payloads)
    decoded = _rate(lambda p: decode(GpuTelemetrySample, p), payloads)
    return {
        "codec_decode_telemetry_per_s": decoded,
        "codec_json_loads_baseline_per_s": baseline,
        "codec_decode_vs_json_loads_ratio": decoded / baseline,
    }
