"""Store insert rate of telemetry rows into chDB, against a bare MergeTree insert."""

from __future__ import annotations

import tempfile
import time
from datetime import UTC, datetime, timedelta

from gpusched.contracts import GpuTelemetrySample
from gpusched.store import Store, StoreSettings

N = 100_000


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(StoreSettings(dsn=f"chdb://{tmp}", database="bench"))
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        events = [
            GpuTelemetrySample(
                ts=t0 + timedelta(seconds=i // 1000),
                gpu_uuid=f"GPU-{i % 1000:06d}",
                node_id=f"n{(i % 1000) // 8}",
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
            for i in range(N)
        ]
        start = time.perf_counter()
        store.insert_events(events)
        events_s = time.perf_counter() - start

        # Baseline: the same number of rows of plain numbers into a bare MergeTree.
        store.client.command(
            "CREATE TABLE base (a UInt64, b Float32) ENGINE = MergeTree ORDER BY a"
        )
        rows = [[i, float(i)] for i in range(N)]
        start = time.perf_counter()
        store.client.insert("base", rows, column_names=["a", "b"])
        base_s = time.perf_counter() - start
    return {
        "store_insert_telemetry_rows_per_s": N / events_s,
        "store_insert_baseline_rows_per_s": N / base_s,
        "store_insert_vs_baseline_ratio": base_s / events_s,
    }
