"""One contract suite for every cluster backend (the Backend Protocol).

Each implementation gets the same tests through the ``cluster`` fixture. ``sim`` runs a
real `gpusched simcluster` process and talks to it over HTTP, as the dispatcher does.
Slurm and Kubernetes backends are not written yet (see the issue note): when they are,
they join ``BACKENDS`` and must pass the same tests.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState, Request
from gpusched.dispatcher import AlreadyPlaced, Backend, BackendEvent, NotPlaceable, SimBackend
from tests.pipeline import GPUSCHED, free_port, write_cluster

BACKENDS = ["sim"]


@dataclass
class Cluster:
    backend: Backend
    run_s: float  # how long a job runs on this cluster


@pytest.fixture(params=BACKENDS)
def cluster_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The cluster behind the backend, started for the test and stopped after it."""
    assert request.param == "sim"
    csv = write_cluster(tmp_path / "c.cluster.csv", nodes=2, gpus_per_node=4)
    port = free_port()
    proc = subprocess.Popen(
        [str(GPUSCHED), "simcluster", "--cluster", str(csv), "--port", str(port),
         "--speed", "100"],
        env={"GPUSCHED_SIMCLUSTER_DEFAULT_DURATION_S": "100", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(f"{url}/info")
                break
            except httpx.HTTPError:
                subprocess.run(["sleep", "0.1"], check=True)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture
async def cluster(cluster_process: str) -> AsyncIterator[Cluster]:
    backend = SimBackend(cluster_process, poll_s=1.0)
    yield Cluster(backend, run_s=1.0)  # 100 s of cluster time at 100x
    await backend.close()


def _job(job_id: str, gpus: float = 2) -> Job:
    return Job(job_id, Request(gpus), 0.0)


def _on(node: str, *gpus: int, share: float = 1.0) -> tuple[Allocation, ...]:
    return (Allocation(node, gpus, share, 0, 0),)


async def _events(
    backend: Backend, after: int, count: int, within_s: float = 10
) -> list[BackendEvent]:
    got: list[BackendEvent] = []

    async def collect() -> None:
        async for e in backend.events(after):
            got.append(e)
            if len(got) == count:
                return

    await asyncio.wait_for(collect(), within_s)
    return got


async def test_lists_the_nodes(cluster: Cluster) -> None:
    nodes = await cluster.backend.nodes()
    assert [(n.node_id, n.gpu_model, n.num_gpus, n.power) for n in nodes] == [
        ("n0000", "V100", 4, PowerState.ON),
        ("n0001", "V100", 4, PowerState.ON),
    ]
    assert await cluster.backend.log_id()


async def test_a_placed_job_runs_and_finishes(cluster: Cluster) -> None:
    b = cluster.backend
    await b.place(_job("a"), _on("n0000", 0, 1), "d1")
    assert [(j.job_id, j.node_ids, j.gpu_indices) for j in await b.jobs()] == [
        ("a", ("n0000",), ((0, 1),))
    ]
    events = await _events(b, 0, 3)
    assert [(e.job_id, e.type, e.decision_id) for e in events] == [
        ("a", JobEventType.PLACED, "d1"),
        ("a", JobEventType.RUNNING, "d1"),
        ("a", JobEventType.FINISHED, None),
    ]
    assert [e.seq for e in events] == [1, 2, 3]
    assert events[0].node_ids == ("n0000",)
    assert events[0].gpu_indices == ((0, 1),)
    assert await b.jobs() == []


async def test_never_runs_a_job_twice_nor_on_busy_gpus(cluster: Cluster) -> None:
    b = cluster.backend
    await b.place(_job("a"), _on("n0000", 0, 1), "d1")
    with pytest.raises(AlreadyPlaced):
        await b.place(_job("a"), _on("n0001", 0, 1), "d2")
    with pytest.raises(NotPlaceable):
        await b.place(_job("b"), _on("n0000", 1, 2), "d3")  # GPU 1 is a's
    with pytest.raises(NotPlaceable):
        await b.place(_job("c"), _on("n0000", 9), "d4")  # no such GPU
    await b.place(_job("d", 0.5), _on("n0000", 2, share=0.5), "d5")
    await b.place(_job("e", 0.5), _on("n0000", 2, share=0.5), "d6")  # shares of one GPU
    assert sorted(j.job_id for j in await b.jobs()) == ["a", "d", "e"]


async def test_preempt_and_cancel_free_the_gpus(cluster: Cluster) -> None:
    b = cluster.backend
    await b.place(_job("a"), _on("n0001", 0, 1, 2, 3), "d1")
    await b.preempt("a", "d2")
    await b.place(_job("b"), _on("n0001", 0, 1, 2, 3), "d3")
    await b.cancel("b")
    await b.cancel("never-placed")  # ignored
    kinds = [(e.job_id, e.type) for e in await _events(b, 0, 6)]
    assert kinds == [
        ("a", JobEventType.PLACED),
        ("a", JobEventType.RUNNING),
        ("a", JobEventType.PREEMPTED),
        ("b", JobEventType.PLACED),
        ("b", JobEventType.RUNNING),
        ("b", JobEventType.CANCELLED),
    ]
    assert await b.jobs() == []


async def test_park_and_wake(cluster: Cluster) -> None:
    b = cluster.backend
    await b.place(_job("a"), _on("n0000", 0), "d1")
    with pytest.raises(NotPlaceable):
        await b.park("n0000", "d2")  # it runs a job
    await b.park("n0001", "d3")
    assert {n.node_id: n.power for n in await b.nodes()}["n0001"] is PowerState.PARKED
    with pytest.raises(NotPlaceable):
        await b.place(_job("b"), _on("n0001", 0), "d4")  # parked
    await b.wake("n0001", "d5")
    events = await _events(b, 2, 4)  # a's end (after 1 s) comes among them
    power = [(e.node_id, e.power) for e in events if e.node_id]
    assert power == [
        ("n0001", PowerState.PARKED),
        ("n0001", PowerState.WAKING),
        ("n0001", PowerState.ON),  # after the wake latency (180 s / 100)
    ]
    await b.place(_job("b"), _on("n0001", 0), "d6")


async def test_the_event_log_resumes_after_any_sequence_number(cluster: Cluster) -> None:
    b = cluster.backend
    for i in range(3):
        await b.place(_job(f"j{i}", 1), _on("n0000", i), f"d{i}")
    first = await _events(b, 0, 6)
    again = await _events(b, 4, 2)
    assert again == first[4:]
