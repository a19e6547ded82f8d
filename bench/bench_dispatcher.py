"""The dispatcher on the simulated-cluster backend, on the real local broker.

- ``dispatcher_decisions_per_s``: 2,000 one-GPU jobs are on the jobs topic before the
  dispatcher starts, on an idle 250 x 8-GPU simulated cluster whose jobs never end; the
  rate is placements the cluster recorded per second, first to last (start-up and the
  topic replay are not counted). Each decision is published to the placements topic
  (acks=all) and applied over HTTP.
- ``backend_place_calls_per_s``: baseline of the same run, the same 2,000 placements sent
  straight to a fresh simulated cluster through ``SimBackend`` (no scheduling, no Kafka);
  ``dispatcher_vs_backend_ratio`` is the share of that rate the dispatcher keeps.
- ``submit_to_placement_p50_ms``: on an idle cluster with the dispatcher and the REST
  API up, 40 jobs one at a time: ``POST /jobs`` until the cluster records the placement.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx

from gpusched.api.jobs import SubmitJob, publish
from gpusched.core import Allocation, Job, Request
from gpusched.dispatcher import SimBackend
from services import broker_and_prefix, quantile, start, stop

NODES, JOBS, PROBES = 250, 2_000, 40


def _cluster(path: Path) -> Path:
    rows = [f"n{i:04d},V100,8,96000,786432" for i in range(NODES)]
    path.write_text("node_id,gpu_type,num_gpu,cpu_milli,memory_mib\n" + "\n".join(rows) + "\n")
    return path


def _wait_up(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def _placed(sim: str) -> list[dict[str, object]]:
    events = httpx.get(f"{sim}/events", params={"after": 0, "timeout_s": 0}, timeout=60).json()
    return [e for e in events if e["type"] == "placed"]


async def _backend_rate(sim: str) -> float:
    backend = SimBackend(sim)
    started = time.perf_counter()
    for i in range(JOBS):
        alloc = (Allocation(f"n{i // 8:04d}", (i % 8,), 1.0, 0, 0),)
        await backend.place(Job(f"direct-{i}", Request(1), 0.0), alloc, f"d{i}")
    rate = JOBS / (time.perf_counter() - started)
    await backend.close()
    return rate


def _probe(api: str, sim: str) -> list[float]:
    latencies = []
    after = len(httpx.get(f"{sim}/events", params={"after": 0, "timeout_s": 0}).json())
    with httpx.Client(timeout=30) as client:
        for i in range(PROBES):
            started = time.time()
            job_id = client.post(f"{api}/jobs", json={"gpus": 1, "job_id": f"probe-{i}"}).json()[
                "job_id"
            ]
            while True:
                events = client.get(
                    f"{sim}/events", params={"after": after, "timeout_s": 10}
                ).json()
                after += len(events)
                hit = [e for e in events if e["job_id"] == job_id and e["type"] == "placed"]
                if hit:
                    latencies.append((float(hit[0]["ts"]) - started) * 1000)
                    break
    return latencies


def run() -> dict[str, float]:
    with broker_and_prefix() as (bootstrap, prefix), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        cluster = _cluster(work / "c.cluster.csv")
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "GPUSCHED_TOPIC_PREFIX": prefix,
            "GPUSCHED_SIMCLUSTER_DEFAULT_DURATION_S": "1e9",  # nothing ends during the bench
            "GPUSCHED_STORE_DSN": f"chdb://{work / 'ch'}",
        }
        # 1. baseline: the backend alone
        sim = start(
            ["simcluster", "--cluster", str(cluster), "--port", "18291"], env, work / "s0.log"
        )
        try:
            _wait_up("http://127.0.0.1:18291/info")
            direct = asyncio.run(_backend_rate("http://127.0.0.1:18291"))
        finally:
            stop(sim)
        # 2. the dispatcher draining a backlog
        jobs = [SubmitJob(gpus=1, job_id=f"bench-{i}").event(None) for i in range(JOBS)]
        asyncio.run(publish(bootstrap, prefix, jobs))
        url = "http://127.0.0.1:18292"
        env["GPUSCHED_DISPATCHER_SIM_URL"] = url
        sim = start(
            ["simcluster", "--cluster", str(cluster), "--port", "18292"], env, work / "s1.log"
        )
        _wait_up(f"{url}/info")
        dispatcher = start(["dispatch", "--policy", "fifo"], env, work / "d.log")
        api = start(["api", "--port", "18293"], env, work / "api.log")
        try:
            deadline = time.monotonic() + 300
            while len(placed := _placed(url)) < JOBS and time.monotonic() < deadline:
                time.sleep(1.0)
            times = sorted(float(e["ts"]) for e in placed)  # type: ignore[arg-type]
            rate = (len(times) - 1) / (times[-1] - times[0])
            # 3. an idle cluster: end the backlog, then time single submissions
            for job_id in [f"bench-{i}" for i in range(JOBS)]:
                httpx.delete(f"{url}/jobs/{job_id}", timeout=30)
            _wait_up("http://127.0.0.1:18293/healthz")
            latencies = _probe("http://127.0.0.1:18293", url)
        finally:
            for proc in (api, dispatcher, sim):
                stop(proc)
    return {
        "dispatcher_decisions_per_s": rate,
        "backend_place_calls_per_s": direct,
        "dispatcher_vs_backend_ratio": rate / direct,
        "submit_to_placement_p50_ms": quantile(latencies, 0.5),
        "submit_to_placement_p99_ms": quantile(latencies, 0.99),
    }
