"""Codec throughput: decoding and validating telemetry samples, against plain json.loads."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from gpusched.contracts import GpuTelemetrySample, decode, encode
from samples import telemetry_samples

N = 50_000


def _rate(fn: Callable[[bytes], object], payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for p in payloads:
        fn(p)
    return len(payloads) / (time.perf_counter() - start)


def run() -> dict[str, float]:
    payloads = [encode(sample) for sample in telemetry_samples(N, gpus=N)]
    baseline = _rate(json.loads, payloads)
    decoded = _rate(lambda p: decode(GpuTelemetrySample, p), payloads)
    return {
        "codec_decode_telemetry_per_s": decoded,
        "codec_json_loads_baseline_per_s": baseline,
        "codec_decode_vs_json_loads_ratio": decoded / baseline,
    }
