"""Ingestion while an analyst's query runs on ClickHouse's HTTP interface (the sink's /).

``sink_under_query_ratio``: the sink's rate (samples per second between its consumer
group's first and last commit, as ``sink_samples_per_s``) on 100,000 telemetry samples
while one heavy analyst query (a CPU-bound scan, under the sink's default limits) runs,
over its rate on the same number of samples with no query, both measured in this run on a
fresh topic prefix and store each. The issue's target: >= 0.8.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import httpx
from bench_pipeline import _group_rate, _produce

from gpusched.contracts import encode
from gpusched.contracts.topics import TELEMETRY
from samples import telemetry_samples
from services import broker_and_prefix, start, stop

SAMPLES = 100_000
HEAVY = "SELECT count() FROM numbers(1e12) WHERE sipHash64(number) % 7 = 0"


def _sink_rate(bootstrap: str, prefix: str, work: Path, heavy: bool) -> float:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "GPUSCHED_TOPIC_PREFIX": prefix,
        "GPUSCHED_STORE_DSN": f"chdb://{work / 'ch'}",
        "GPUSCHED_SINK_SQL_PORT": str(port),
        "GPUSCHED_API_TOKENS_FILE": str(work / "tokens.json"),
    }
    made = start(["token", "create", "--role", "viewer"], env, work / "token.log")
    made.wait(timeout=60)
    token = next(t for t in (work / "token.log").read_text().split() if t.startswith("gst_"))
    sink = start(["sink"], env, work / "sink.log")
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/ping", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        if heavy:

            def query() -> None:  # ended by the time limit, or by the sink stopping
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(base, content=HEAVY, auth=("bench", token), timeout=600)

            threading.Thread(target=query, daemon=True).start()
            time.sleep(1.0)  # the query is running
        topic = TELEMETRY.name(prefix)
        payloads = [
            (s.gpu_uuid.encode(), encode(s)) for s in telemetry_samples(SAMPLES, gpus=10_000)
        ]
        asyncio.run(_produce(bootstrap, topic, payloads))
        return asyncio.run(_group_rate(bootstrap, f"{prefix}gpusched-sink", topic, SAMPLES))
    finally:
        stop(sink)


def run() -> dict[str, float]:
    rates = {}
    for heavy in (False, True):
        with broker_and_prefix() as (bootstrap, prefix), tempfile.TemporaryDirectory() as tmp:
            rates[heavy] = _sink_rate(bootstrap, prefix, Path(tmp), heavy)
    return {
        "sink_alone_samples_per_s": rates[False],
        "sink_under_query_samples_per_s": rates[True],
        "sink_under_query_ratio": rates[True] / rates[False],
    }


if __name__ == "__main__":
    print(run())
