"""One contract suite for every cluster backend (the Backend Protocol).

Each implementation gets the same tests through the ``cluster`` fixture, against a real
cluster started for the test: ``sim`` a `gpusched simcluster` process (over HTTP, as the
dispatcher uses it), ``slurm`` real munged, slurmctld, two slurmd with fake GPUs and
slurmrestd (gpusched.local.slurm), ``kubernetes`` etcd and a kube-apiserver built
from the k8s.io/kubernetes module (gpusched.local.kube) with RBAC on and two Node
objects that advertise GPUs; the backend authenticates as the dispatcher's ServiceAccount
with the role of k8s/base/rbac.yaml, nothing more. The cluster: two nodes of 4 V100; a
job runs about a second.

No container runtime can run here, so Kubernetes has no kubelet: a task of this test
plays the kubelet's one part the backend reads, moving bound pods to Running and, after
1.5 s, to Succeeded (pod status). Everything else is the real API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState, Request
from gpusched.dispatcher import (
    AlreadyPlaced,
    Backend,
    BackendEvent,
    JobStep,
    KubernetesBackend,
    NodePower,
    NotPlaceable,
    SimBackend,
    SlurmBackend,
)
from gpusched.dispatcher.kubernetes_backend import GPU, MODEL_LABEL
from gpusched.dispatcher.slurm_backend import slurm_nice
from gpusched.local.kube import LocalKube, apiserver_buildable
from gpusched.local.slurm import LocalSlurm, SlurmNode
from tests.k8s import DISPATCHER, apply_rbac
from tests.pipeline import GPUSCHED, free_port, write_cluster

pytestmark = [pytest.mark.slow]

PLACED, RUNNING, FINISHED = JobEventType.PLACED, JobEventType.RUNNING, JobEventType.FINISHED


@dataclass
class Cluster:
    backend: Backend
    nodes: tuple[str, str]
    shares_gpus: bool  # fractions of one GPU for several jobs
    # Kubernetes jobs are pods that exist before they are placed, named <ns>:<pod>
    submit: Callable[[Job], Awaitable[Job]] | None = None
    stop: Callable[[], Awaitable[None]] | None = None
    # what the cluster's own tools show of a waiting job's priority (None: no queue)
    shown_priority: Callable[[str], Awaitable[str | None]] | None = None

    async def job(self, name: str, gpus: float = 2) -> Job:
        job = Job(name, Request(gpus, frozenset({"V100"})), 0.0)
        return await self.submit(job) if self.submit else job

    def id(self, name: str) -> str:
        return f"default:{name}" if self.submit else name


def _sim(tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    csv = write_cluster(tmp_path / "c.cluster.csv", nodes=2, gpus_per_node=4, name="node")
    port = free_port()
    proc = subprocess.Popen(
        [str(GPUSCHED), "simcluster", "--cluster", str(csv), "--port", str(port),
         "--speed", "100"],
        env={"GPUSCHED_SIMCLUSTER_DEFAULT_DURATION_S": "100", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{url}/info")
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    try:
        yield lambda: Cluster(SimBackend(url, poll_s=1.0), ("node0000", "node0001"), True)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _slurm(tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    slurm = LocalSlurm(tmp_path / "slurm", [SlurmNode("node0000", 4), SlurmNode("node0001", 4)])
    slurm.up()
    try:
        token = slurm.token()

        async def shown(job_id: str) -> str | None:
            proc = await asyncio.create_subprocess_exec(
                "scontrol", "show", "job", env=slurm.env, stdout=asyncio.subprocess.PIPE
            )
            out = (await proc.communicate())[0].decode()
            for block in out.split("\n\n"):
                if f"JobName={job_id} " in block or f"JobName={job_id}\n" in block:
                    return block.split("Nice=", 1)[1].split()[0]
            return None

        yield lambda: Cluster(
            SlurmBackend(slurm.rest_url, token, slurm.env, run_s=lambda _: 1.0, poll_s=0.2),
            ("node0000", "node0001"),
            False,
            shown_priority=shown,
        )
    finally:
        slurm.down()


def _kubernetes(tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    if not apiserver_buildable():
        pytest.skip("kube-apiserver is built from the k8s.io/kubernetes module: needs Go")
    kube = LocalKube(tmp_path / "kube", rbac=True, service_accounts=(DISPATCHER,))
    kube.up()
    try:
        apply_rbac(kube)
        yield lambda: _kube_cluster(kube)
    finally:
        kube.down()


def _kube_config(kube: LocalKube, token: str) -> client.Configuration:
    cfg = client.Configuration(host=kube.url)
    cfg.verify_ssl = False
    cfg.api_key = {"BearerToken": token}
    cfg.api_key_prefix = {"BearerToken": "Bearer"}
    return cfg


def _kube_cluster(kube: LocalKube) -> Cluster:
    """The test (nodes, the kubelet's part, users' pods) acts as an admin; the backend as
    the dispatcher's ServiceAccount, with only the role of k8s/base/rbac.yaml (RBAC on)."""
    api = client.ApiClient(_kube_config(kube, kube.token))
    core = client.CoreV1Api(api)
    ready = asyncio.Event()

    async def nodes() -> None:
        for name in ("node0000", "node0001"):
            capacity = {GPU: "4", "cpu": "32", "memory": "256Gi", "pods": "110"}
            node = client.V1Node(
                metadata=client.V1ObjectMeta(name=name, labels={MODEL_LABEL: "V100"}),
                status=client.V1NodeStatus(capacity=capacity, allocatable=capacity),
            )
            await core.create_node(node)
            await core.patch_node_status(
                name, {"status": {"capacity": capacity, "allocatable": capacity}}
            )
        ready.set()

    async def kubelet() -> None:
        """Stand-in for the kubelet (none can run here): bound pods run 1.5 s, then end."""
        started: dict[str, float] = {}
        while True:
            for pod in (await core.list_pod_for_all_namespaces()).items:
                key, phase = pod.metadata.name, pod.status.phase
                if not pod.spec.node_name or pod.metadata.deletion_timestamp:
                    continue
                if phase == "Pending":
                    started[key] = time.monotonic()
                    new = "Running"
                elif phase == "Running" and time.monotonic() - started.get(key, 0) > 1.5:
                    new = "Succeeded"
                else:
                    continue
                with contextlib.suppress(ApiException):
                    await core.patch_namespaced_pod_status(
                        key, "default", {"status": {"phase": new}}
                    )
            await asyncio.sleep(0.2)

    tasks: list[asyncio.Task[None]] = []

    async def submit(job: Job) -> Job:
        if not tasks:
            tasks.append(asyncio.create_task(kubelet()))
            await nodes()
        await ready.wait()
        gpus = str(int(job.request.num_gpu))
        pod = client.V1Pod(
            metadata=client.V1ObjectMeta(name=job.job_id, namespace="default"),
            spec=client.V1PodSpec(
                scheduler_name="gpusched",
                node_selector={MODEL_LABEL: "V100"},
                containers=[
                    client.V1Container(
                        name="main",
                        image="busybox",
                        resources=client.V1ResourceRequirements(
                            requests={GPU: gpus}, limits={GPU: gpus}
                        ),
                    )
                ],
            ),
        )
        await core.create_namespaced_pod("default", pod)
        return Job(f"default:{job.job_id}", job.request, 0.0)

    async def stop() -> None:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await api.close()

    async def shown(job_id: str) -> str | None:
        pod = await core.read_namespaced_pod(job_id.partition(":")[2], "default")
        return (pod.metadata.annotations or {}).get("gpusched.io/score")

    dispatcher = _kube_config(kube, kube.account_token(DISPATCHER))
    backend = KubernetesBackend(client.ApiClient(dispatcher), poll_s=0.2)
    return Cluster(backend, ("node0000", "node0001"), False, submit, stop, shown)


@pytest.fixture(
    params=[
        "sim",
        pytest.param("slurm", marks=pytest.mark.slurm),
        # The first Kubernetes test of a machine builds kube-apiserver (~8 min, once):
        # longer than the default per-test timeout.
        pytest.param("kubernetes", marks=[pytest.mark.kubernetes, pytest.mark.timeout(1500)]),
    ]
)
def make_cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Cluster]]:
    """The real cluster behind the backend, started for the test and stopped after it."""
    start = {"sim": _sim, "slurm": _slurm, "kubernetes": _kubernetes}[request.param]
    yield from start(tmp_path)


@pytest.fixture
async def cluster(make_cluster: Callable[[], Cluster]) -> AsyncIterator[Cluster]:
    c = make_cluster()
    if c.submit is not None:
        await c.job("warm-up", 0)  # nodes registered before the first test step
    yield c
    if c.stop is not None:
        await c.stop()
    await c.backend.close()


def _on(node: str, *gpus: int, share: float = 1.0) -> tuple[Allocation, ...]:
    return (Allocation(node, gpus, share, 0, 0),)


async def _until(
    backend: Backend, after: int, done: Callable[[list[BackendEvent]], bool], within_s: float = 20
) -> list[BackendEvent]:
    """Events after ``after`` until ``done(events so far)``."""
    got: list[BackendEvent] = []

    async def collect() -> None:
        async for e in backend.events(after):
            got.append(e)
            if done(got):
                return

    await asyncio.wait_for(collect(), within_s)
    return got


def _job_steps(events: list[BackendEvent], job_id: str) -> list[JobStep]:
    """A job's lifecycle steps (a cluster that takes jobs itself also says JobArrived)."""
    return [e for e in events if isinstance(e, JobStep) and e.job_id == job_id]


def _has(job_id: str, kind: JobEventType) -> Callable[[list[BackendEvent]], bool]:
    return lambda events: any(e.type is kind for e in _job_steps(events, job_id))


def _steps(events: list[BackendEvent], job_id: str) -> list[JobEventType]:
    return [e.type for e in _job_steps(events, job_id)]


async def test_lists_the_nodes(cluster: Cluster) -> None:
    nodes = await cluster.backend.nodes()
    assert [(n.node_id, n.gpu_model, n.num_gpus, n.power) for n in nodes] == [
        (cluster.nodes[0], "V100", 4, PowerState.ON),
        (cluster.nodes[1], "V100", 4, PowerState.ON),
    ]
    assert await cluster.backend.log_id()


async def test_a_placed_job_runs_and_finishes(cluster: Cluster) -> None:
    b, (n0, _), a = cluster.backend, cluster.nodes, cluster.id("a")
    await b.place(await cluster.job("a"), _on(n0, 0, 1), "d1")
    events = await _until(b, 0, _has(a, RUNNING))
    assert [(j.job_id, j.node_ids, len(j.gpu_indices[0])) for j in await b.jobs()] == [
        (a, (n0,), 2)
    ]
    events += await _until(b, events[-1].seq, _has(a, FINISHED))
    assert _steps(events, a) == [PLACED, RUNNING, FINISHED]
    assert [e.seq for e in events] == list(range(events[0].seq, events[0].seq + len(events)))
    placed = next(e for e in _job_steps(events, a) if e.type is PLACED)
    assert placed.decision_id == "d1"
    assert placed.node_ids == (n0,)
    assert len(placed.gpu_indices[0]) == 2
    assert await b.jobs() == []


async def test_never_runs_a_job_twice_nor_beyond_free_gpus(cluster: Cluster) -> None:
    b, (n0, n1), a = cluster.backend, cluster.nodes, cluster.id("a")
    job_a = await cluster.job("a")
    await b.place(job_a, _on(n0, 0, 1), "d1")
    await _until(b, 0, _has(a, RUNNING))
    with pytest.raises(AlreadyPlaced):
        await b.place(job_a, _on(n1, 0, 1), "d2")
    with pytest.raises(NotPlaceable):  # two of n0's four are a's
        await b.place(await cluster.job("b", 3), _on(n0, 1, 2, 3), "d3")
    with pytest.raises(NotPlaceable):  # n1 has four
        await b.place(await cluster.job("c", 5), _on(n1, 0, 1, 2, 3, 4), "d4")
    if cluster.shares_gpus:
        await b.place(await cluster.job("d", 0.5), _on(n1, 2, share=0.5), "d5")
        await b.place(await cluster.job("e", 0.5), _on(n1, 2, share=0.5), "d6")  # one GPU
        await _until(b, 0, _has("e", RUNNING))
    running = sorted(j.job_id for j in await b.jobs())
    assert running == ([a, "d", "e"] if cluster.shares_gpus else [a])


async def test_preempt_and_cancel_free_the_gpus(cluster: Cluster) -> None:
    b, (_, n1) = cluster.backend, cluster.nodes
    a, bb = cluster.id("a"), cluster.id("b")
    job_a = await cluster.job("a", 4)
    await b.place(job_a, _on(n1, 0, 1, 2, 3), "d1")
    await _until(b, 0, _has(a, RUNNING))
    await b.preempt(a, "d2")
    events = await _until(b, 0, _has(a, JobEventType.PREEMPTED))
    await b.place(await cluster.job("b", 4), _on(n1, 0, 1, 2, 3), "d3")
    events += await _until(b, events[-1].seq, _has(bb, RUNNING))
    await b.cancel(bb)
    await b.cancel(cluster.id("never-placed"))  # ignored
    events += await _until(b, events[-1].seq, _has(bb, JobEventType.CANCELLED))
    assert _steps(events, a) == [PLACED, RUNNING, JobEventType.PREEMPTED]
    assert _steps(events, bb) == [PLACED, RUNNING, JobEventType.CANCELLED]
    assert await b.jobs() == []
    await b.prioritize(a, -2.5)  # a waits again: the cluster's queue shows our order
    await b.prioritize(cluster.id("never-placed"), 1.0)  # ignored
    if cluster.shown_priority is not None:
        expected = {"slurm": str(slurm_nice(-2.5)), "kubernetes": "-2.5"}[b.name]
        assert await cluster.shown_priority(a) == expected
    await b.place(job_a, _on(n1, 0, 1, 2, 3), "d4")  # a preempted job runs again
    await _until(b, events[-1].seq, _has(a, RUNNING))


async def test_a_job_moved_at_once_runs_on_its_new_node(cluster: Cluster) -> None:
    """A consolidation move as the dispatcher applies it: one cycle's Preempt and then
    Place of the same job on another node, the second sent before the cluster has
    reported the first (Slurm, still requeueing the job then, took the node update and
    the release, and kept the job held: two runs in three)."""
    b, (n0, n1), a = cluster.backend, cluster.nodes, cluster.id("a")
    job_a = await cluster.job("a", 2)
    await b.place(job_a, _on(n0, 0, 1), "d1")
    await _until(b, 0, _has(a, RUNNING))
    await b.preempt(a, "d2")
    await b.place(job_a, _on(n1, 0, 1), "d3")
    events = await _until(b, 0, lambda events: _steps(events, a).count(RUNNING) == 2)
    assert _steps(events, a)[:5] == [PLACED, RUNNING, JobEventType.PREEMPTED, PLACED, RUNNING]
    assert [(j.job_id, j.node_ids) for j in await b.jobs()] in ([(a, (n1,))], [])  # or ended


async def test_park_and_wake(cluster: Cluster) -> None:
    b, (n0, n1), a = cluster.backend, cluster.nodes, cluster.id("a")
    await b.place(await cluster.job("a"), _on(n0, 0), "d1")
    await _until(b, 0, _has(a, RUNNING))
    with pytest.raises(NotPlaceable):
        await b.park(n0, "d2")  # it runs a job
    await b.park(n1, "d3")
    assert {n.node_id: n.power for n in await b.nodes()}[n1] is PowerState.PARKED
    job_b = await cluster.job("b")
    with pytest.raises(NotPlaceable):
        await b.place(job_b, _on(n1, 0), "d4")  # parked
    await b.wake(n1, "d5")

    def power_of_n1(events: list[BackendEvent]) -> list[PowerState]:
        return [e.power for e in events if isinstance(e, NodePower) and e.node_id == n1]

    events = await _until(b, 0, lambda events: PowerState.ON in power_of_n1(events))
    power = power_of_n1(events)
    assert power == [PowerState.PARKED, PowerState.WAKING, PowerState.ON]
    assert {n.node_id: n.power for n in await b.nodes()}[n1] is PowerState.ON
    await b.place(job_b, _on(n1, 0), "d6")


async def test_the_event_log_resumes_after_any_sequence_number(cluster: Cluster) -> None:
    b, (n0, _) = cluster.backend, cluster.nodes
    for i in range(3):
        await b.place(await cluster.job(f"j{i}", 1), _on(n0, i), f"d{i}")
    first = await _until(b, 0, lambda events: len(events) >= 6)
    again = await _until(b, 4, lambda events: len(events) >= 2)
    assert again[:2] == first[4:6]
