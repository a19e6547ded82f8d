"""Store insert rate of telemetry rows into chDB, against a bare MergeTree insert."""

from __future__ import annotations

import tempfile
import time

from gpusched.store import Store, StoreSettings
from samples import telemetry_samples

N = 100_000


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(StoreSettings(dsn=f"chdb://{tmp}", database="bench"))
        events = telemetry_samples(N, gpus=1000)
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
