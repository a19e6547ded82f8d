"""The console's overview page with the openb cluster (1,523 nodes, 6,212 GPUs).

- ``console_overview_ms``: median time of ``GET /console`` (signed in), which reads every
  node's live view and the running jobs from the store and renders the heat map of every
  GPU, over 20 requests after one warm-up.
- ``console_overview_vs_nodes_json_ratio``: against ``GET /nodes`` (the same store reads,
  answered as JSON) measured in the same run: what rendering costs on top.

The node views are put on the view topic and stored by a real sink (embedded store).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer

from gpusched.contracts import NodeView, encode
from gpusched.contracts.tokens import Role, TokenFile
from gpusched.contracts.topics import VIEW
from gpusched.local.procs import free_port
from gpusched.sim import load_cluster, traces_dir
from services import broker_and_prefix, start, stop

REQUESTS = 20


async def _views(bootstrap: str, topic: str, views: list[NodeView]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        for view in views:
            await producer.send(topic, encode(view), key=view.node_id.encode())
        await producer.flush()
    finally:
        await producer.stop()


def _median_ms(client: httpx.Client, path: str) -> float:
    client.get(path).raise_for_status()  # warm-up
    took = []
    for _ in range(REQUESTS):
        started = time.perf_counter()
        client.get(path).raise_for_status()
        took.append((time.perf_counter() - started) * 1000)
    return statistics.median(took)


def _wait(check: object, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"bench console: timed out waiting for {what}")


def run() -> dict[str, float]:
    nodes = load_cluster(traces_dir() / "openb.cluster.csv")
    rng = random.Random(0)
    views = [
        NodeView(
            node_id=n.node_id,
            gpu_model=n.gpu_model or "none",
            gpus_total=n.num_gpus,
            gpus_allocatable=float(n.num_gpus),
            gpus_allocated=float(rng.randint(0, n.num_gpus)),
            utilization_pct=50.0,
            power_w=300.0,
        )
        for n in nodes
    ]
    with broker_and_prefix() as (bootstrap, prefix), tempfile.TemporaryDirectory() as tmp:
        work, sql_port, api_port = Path(tmp), free_port(), free_port()
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "GPUSCHED_TOPIC_PREFIX": prefix,
            "GPUSCHED_STORE_DSN": f"chdb://{work / 'ch'}",
            "GPUSCHED_SINK_SQL_PORT": str(sql_port),
            "GPUSCHED_STORE_SQL_URL": f"http://127.0.0.1:{sql_port}",
            "GPUSCHED_API_TOKENS_FILE": str(work / "tokens.json"),
        }
        asyncio.run(_views(bootstrap, VIEW.name(prefix), views))
        _, token = TokenFile(work / "tokens.json").create(Role.VIEWER, [], "bench")
        sink = start(["sink"], env, work / "sink.log")
        api = start(["api", "--port", str(api_port)], env, work / "api.log")
        base = f"http://127.0.0.1:{api_port}"
        try:
            sql = f"http://127.0.0.1:{sql_port}/sql"
            stored = "SELECT uniqExact(node_id) FROM node_views"
            _wait(
                lambda: httpx.post(sql, content=stored).json()["rows"][0][0] == len(views),
                "the node views in the store",
            )
            _wait(lambda: httpx.get(f"{base}/healthz").is_success, "the API")
            with httpx.Client(base_url=base, timeout=60) as client:
                signed = client.post("/console/login", data={"token": token})
                assert signed.status_code == 303, signed.text  # to the overview
                page = client.get("/console")
                assert page.text.count("<i class=") >= sum(n.num_gpus for n in nodes)
                overview = _median_ms(client, "/console")
                client.headers["Authorization"] = f"Bearer {token}"
                nodes_json = _median_ms(client, "/nodes")
        finally:
            stop(api)
            stop(sink)
    return {
        "console_overview_ms": overview,
        "nodes_json_ms": nodes_json,
        "console_overview_vs_nodes_json_ratio": overview / nodes_json,
    }
