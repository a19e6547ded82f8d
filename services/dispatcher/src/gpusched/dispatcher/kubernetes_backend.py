"""``KubernetesBackend``: gpusched as a custom Kubernetes scheduler (``schedulerName: gpusched``).

Jobs are pods that name this scheduler and request ``nvidia.com/gpu``: each new pending
pod is reported as a submission (job id ``<namespace>:<name>``; tenant from the label
``gpusched.io/tenant``, else the namespace; class from ``gpusched.io/priority-class``,
else the pod's priorityClassName, else "normal"; GPU model from the node selector
``nvidia.com/gpu.product``). A placement binds the pod to its node through the Binding
API (one node per pod; the chosen GPU indices go in the annotation ``gpusched.io/gpus``,
the device plugin picks the devices). Preemption evicts the pod (Eviction API, so
disruption budgets hold) and creates it again unbound under the same name, so it waits
for the next placement; cancel deletes it; parking cordons the node, waking uncordons it.
Nodes advertise GPUs as ``status.allocatable["nvidia.com/gpu"]`` and their model as the
label ``nvidia.com/gpu.product``. Lifecycle events come from polling this scheduler's
pods (bound → placed, Running → running, Succeeded → finished, Failed → failed, gone →
cancelled).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState, Request
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    BackendError,
    BackendEvent,
    BackendJob,
    BackendNode,
    JobArrived,
    JobStep,
    NodePower,
    NotPlaceable,
    PolledLog,
)

__all__ = ["GPU", "KubernetesBackend", "pod_request"]

GPU = "nvidia.com/gpu"
MODEL_LABEL = "nvidia.com/gpu.product"


def _quantity(text: str | None) -> float:
    """Kubernetes quantities: '2', '500m', '4Gi', '1000Mi' -> a number (bytes for sizes)."""
    if not text:
        return 0.0
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
             "Ti": 2**40}  # fmt: skip
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    return float(text)


def pod_request(pod: Any) -> Request:
    """What a pod asks for, summed over its containers."""
    gpus = cpu = mem = 0.0
    for c in pod.spec.containers:
        req = (c.resources.requests if c.resources and c.resources.requests else None) or {}
        lim = (c.resources.limits if c.resources and c.resources.limits else None) or {}
        gpus += _quantity(req.get(GPU) or lim.get(GPU))
        cpu += _quantity(req.get("cpu"))
        mem += _quantity(req.get("memory"))
    selector = pod.spec.node_selector or {}
    models = frozenset({selector[MODEL_LABEL]}) if MODEL_LABEL in selector else frozenset()
    return Request(gpus, models, int(cpu * 1000), int(mem / 2**20))


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self, api: client.ApiClient, scheduler_name: str = "gpusched", poll_s: float = 1.0
    ) -> None:
        self.api, self.scheduler_name, self.poll_s = api, scheduler_name, poll_s
        self.core = client.CoreV1Api(api)
        self._log = PolledLog(self._poll, poll_s)
        self._seen: dict[str, str] = {}  # job id -> last state we reported
        self._requeueing: set[str] = set()

    # -- pods -----------------------------------------------------------------------------
    @staticmethod
    def job_id(pod: Any) -> str:
        return f"{pod.metadata.namespace}:{pod.metadata.name}"

    async def _pods(self) -> list[Any]:
        pods = await self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.schedulerName={self.scheduler_name}"
        )
        return [p for p in pods.items if p.metadata.deletion_timestamp is None]

    async def _pod(self, job_id: str) -> Any | None:
        namespace, _, name = job_id.partition(":")
        try:
            return await self.core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise BackendError(f"reading pod {job_id}: {exc.reason}") from exc

    # -- the Protocol ---------------------------------------------------------------------
    async def log_id(self) -> str:
        return self._log.log_id

    async def nodes(self) -> list[BackendNode]:
        out = []
        for n in (await self.core.list_node()).items:
            alloc = n.status.allocatable or {}
            out.append(
                BackendNode(
                    n.metadata.name,
                    (n.metadata.labels or {}).get(MODEL_LABEL, ""),
                    int(_quantity(alloc.get(GPU))),
                    int(_quantity(alloc.get("cpu")) * 1000),
                    int(_quantity(alloc.get("memory")) / 2**20),
                    PowerState.PARKED if n.spec.unschedulable else PowerState.ON,
                )
            )
        return out

    async def jobs(self) -> list[BackendJob]:
        return [
            BackendJob(self.job_id(p), (p.spec.node_name,), (_indices(p),), 1.0)
            for p in await self._pods()
            if p.spec.node_name and p.status.phase in ("Pending", "Running")
        ]

    async def place(self, job: Job, allocations: tuple[Allocation, ...], decision_id: str) -> None:
        self._log.start()
        if len(allocations) != 1:
            raise NotPlaceable(f"job {job.job_id}: a pod runs on one node, not {len(allocations)}")
        alloc = allocations[0]
        pod = await self._pod(job.job_id)
        if pod is None:
            raise NotPlaceable(f"no pod {job.job_id}")
        if pod.spec.node_name:
            raise AlreadyPlaced(f"pod {job.job_id} is bound to {pod.spec.node_name}")
        await self._check_room(alloc, pod_request(pod).num_gpu)
        namespace, name = pod.metadata.namespace, pod.metadata.name
        gpus = ",".join(str(i) for i in alloc.gpu_indices)
        annotations = {"gpusched.io/gpus": gpus, "gpusched.io/decision": decision_id}
        await self.core.patch_namespaced_pod(
            name, namespace, {"metadata": {"annotations": annotations}}
        )
        binding = client.V1Binding(
            metadata=client.V1ObjectMeta(name=name),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=alloc.node_id),
        )
        try:
            # The answer is a Status, which the generated client cannot read as a Binding.
            await self.core.create_namespaced_pod_binding(
                name, namespace, binding, _preload_content=False
            )
        except ApiException as exc:
            if exc.status == 409:
                raise AlreadyPlaced(f"pod {job.job_id}: {exc.reason}") from exc
            raise BackendError(f"binding {job.job_id}: {exc.status} {exc.reason}") from exc

    async def _check_room(self, alloc: Allocation, gpus: float) -> None:
        try:
            node = await self.core.read_node(alloc.node_id)
        except ApiException as exc:
            raise NotPlaceable(f"no node {alloc.node_id}") from exc
        if node.spec.unschedulable:
            raise NotPlaceable(f"node {alloc.node_id} is cordoned (parked)")
        total = _quantity((node.status.allocatable or {}).get(GPU))
        used = sum(
            pod_request(p).num_gpu
            for p in await self._pods()
            if p.spec.node_name == alloc.node_id and p.status.phase in ("Pending", "Running")
        )
        if gpus > total - used:
            raise NotPlaceable(f"node {alloc.node_id} has {total - used:g} free GPUs, not {gpus:g}")

    async def preempt(self, job_id: str, decision_id: str) -> None:
        pod = await self._pod(job_id)
        if pod is None or not pod.spec.node_name:
            raise NotPlaceable(f"pod {job_id} does not run")
        namespace, name = pod.metadata.namespace, pod.metadata.name
        eviction = client.V1Eviction(
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(grace_period_seconds=0),
        )
        self._requeueing.add(job_id)
        try:
            await self.core.create_namespaced_pod_eviction(
                name, namespace, eviction, _preload_content=False
            )
        except ApiException as exc:
            self._requeueing.discard(job_id)
            raise NotPlaceable(f"evicting {job_id}: {exc.status} {exc.reason}") from exc
        await self._recreate(pod)
        self._log.append(
            JobStep, job_id=job_id, type=JobEventType.PREEMPTED, decision_id=decision_id
        )
        self._seen[job_id] = "pending"

    async def _recreate(self, pod: Any) -> None:
        """The same pod again, unbound, once the evicted one is gone."""
        namespace, name = pod.metadata.namespace, pod.metadata.name
        for _ in range(100):
            if await self._pod(f"{namespace}:{name}") is None:
                break
            await asyncio.sleep(0.1)
        spec = pod.spec
        spec.node_name = None
        fresh = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                namespace=namespace,
                labels=pod.metadata.labels,
                annotations={
                    k: v
                    for k, v in (pod.metadata.annotations or {}).items()
                    if not k.startswith("gpusched.io/")
                },
            ),
            spec=spec,
        )
        await self.core.create_namespaced_pod(namespace, fresh)
        self._requeueing.discard(f"{namespace}:{name}")

    async def cancel(self, job_id: str) -> None:
        namespace, _, name = job_id.partition(":")
        with contextlib.suppress(ApiException):
            await self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)

    async def prioritize(self, job_id: str, score: float) -> None:
        """Pending pods carry gpusched's score in the annotation ``gpusched.io/score``."""
        pod = await self._pod(job_id)
        if pod is not None and not pod.spec.node_name:
            await self.core.patch_namespaced_pod(
                pod.metadata.name,
                pod.metadata.namespace,
                {"metadata": {"annotations": {"gpusched.io/score": f"{score:.6g}"}}},
            )

    async def park(self, node_id: str, decision_id: str) -> None:
        active = [p for p in await self._pods() if p.status.phase in ("Pending", "Running")]
        if any(p.spec.node_name == node_id for p in active):
            raise NotPlaceable(f"node {node_id} runs pods; it cannot be parked")
        await self.core.patch_node(node_id, {"spec": {"unschedulable": True}})
        self._log.append(
            NodePower, node_id=node_id, power=PowerState.PARKED, decision_id=decision_id
        )

    async def wake(self, node_id: str, decision_id: str) -> None:
        await self.core.patch_node(node_id, {"spec": {"unschedulable": False}})
        self._log.append(
            NodePower, node_id=node_id, power=PowerState.WAKING, decision_id=decision_id
        )
        self._log.append(NodePower, node_id=node_id, power=PowerState.ON)

    def events(self, after: int) -> AsyncIterator[BackendEvent]:
        return self._log.after(after)

    async def close(self) -> None:
        await self._log.close()
        await self.api.close()

    # -- lifecycle from polling ------------------------------------------------------------
    async def _poll(self) -> None:
        with contextlib.suppress(ApiException, OSError):  # the API server is back next round
            await self.observe(await self._pods())

    async def observe(self, pods: list[Any]) -> None:
        """Compare the pods with what was reported; report the differences."""
        present = set()
        for pod in pods:
            job_id = self.job_id(pod)
            present.add(job_id)
            before = self._seen.get(job_id)
            state = _state(pod)
            if state == before:
                continue
            self._seen[job_id] = state
            if before is None:
                labels = pod.metadata.labels or {}
                self._log.append(
                    JobArrived,
                    job_id=job_id,
                    request=pod_request(pod),
                    tenant=labels.get("gpusched.io/tenant", pod.metadata.namespace),
                    priority_class=labels.get("gpusched.io/priority-class")
                    or pod.spec.priority_class_name
                    or "normal",
                )
            decision = (pod.metadata.annotations or {}).get("gpusched.io/decision")
            where = {"node_ids": (pod.spec.node_name,), "gpu_indices": (_indices(pod),)}
            if state in ("bound", "running") and before in (None, "pending"):
                self._log.append(
                    JobStep, job_id=job_id, type=JobEventType.PLACED, decision_id=decision, **where
                )
            if state == "running":
                self._log.append(
                    JobStep, job_id=job_id, type=JobEventType.RUNNING, decision_id=decision, **where
                )
            elif state in ("succeeded", "failed"):
                kind = JobEventType.FINISHED if state == "succeeded" else JobEventType.FAILED
                self._log.append(JobStep, job_id=job_id, type=kind)
        for job_id, state in list(self._seen.items()):
            gone = job_id not in present and job_id not in self._requeueing
            if gone and state not in ("succeeded", "failed", "gone"):
                self._seen[job_id] = "gone"
                self._log.append(
                    JobStep, job_id=job_id, type=JobEventType.CANCELLED, reason="pod deleted"
                )


def _state(pod: Any) -> str:
    phase = pod.status.phase if pod.status else "Pending"
    if phase == "Succeeded":
        return "succeeded"
    if phase == "Failed":
        return "failed"
    if phase == "Running":
        return "running"
    return "bound" if pod.spec.node_name else "pending"


def _indices(pod: Any) -> tuple[int, ...]:
    text = (pod.metadata.annotations or {}).get("gpusched.io/gpus", "")
    return tuple(int(i) for i in text.split(",") if i.strip())
