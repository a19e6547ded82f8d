"""``SimBackend``: the Backend Protocol over HTTP to a ``gpusched simcluster`` process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx

from gpusched.contracts import JobEventType
from gpusched.core import Allocation, Job, PowerState
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    BackendError,
    BackendEvent,
    BackendJob,
    BackendNode,
    JobStep,
    NodePower,
    NotPlaceable,
)

__all__ = ["SimBackend"]


class SimBackend:
    name = "sim"

    def __init__(self, url: str, poll_s: float = 5.0) -> None:
        self.url = url.rstrip("/")
        self.poll_s = poll_s
        self._http = httpx.AsyncClient(base_url=self.url, timeout=poll_s + 30)

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise BackendError(f"simulated cluster at {self.url} unreachable: {exc}") from exc
        if response.status_code == 409:
            detail = str(response.json().get("detail", ""))
            raise (AlreadyPlaced if "already runs" in detail else NotPlaceable)(detail)
        if response.status_code >= 400:
            raise BackendError(f"{method} {path}: {response.status_code} {response.text}")
        return response.json() if response.content else None

    async def log_id(self) -> str:
        return str((await self._call("GET", "/info"))["log_id"])

    async def nodes(self) -> list[BackendNode]:
        return [
            BackendNode(
                n["node_id"],
                n["gpu_model"],
                n["num_gpus"],
                n["cpu_milli"],
                n["memory_mib"],
                PowerState(n["power"]),
            )
            for n in await self._call("GET", "/nodes")
        ]

    async def jobs(self) -> list[BackendJob]:
        return [
            BackendJob(
                j["job_id"],
                tuple(j["node_ids"]),
                tuple(tuple(i) for i in j["gpu_indices"]),
                float(j["share"]),
            )
            for j in await self._call("GET", "/jobs")
        ]

    async def place(self, job: Job, allocations: tuple[Allocation, ...], decision_id: str) -> None:
        body = {
            "node_ids": [a.node_id for a in allocations],
            "gpu_indices": [list(a.gpu_indices) for a in allocations],
            "share": allocations[0].share if allocations else 1.0,
            "cpu_milli": sum(a.cpu_milli for a in allocations),
            "memory_mib": sum(a.memory_mib for a in allocations),
            "decision_id": decision_id,
        }
        await self._call("POST", f"/jobs/{job.job_id}/place", json=body)

    async def preempt(self, job_id: str, decision_id: str) -> None:
        await self._call("POST", f"/jobs/{job_id}/preempt", json={"decision_id": decision_id})

    async def cancel(self, job_id: str) -> None:
        await self._call("DELETE", f"/jobs/{job_id}")

    async def prioritize(self, job_id: str, score: float) -> None:
        """The simulated cluster keeps no queue of its own: nothing to tell it."""

    async def park(self, node_id: str, decision_id: str) -> None:
        await self._call("POST", f"/nodes/{node_id}/park", json={"decision_id": decision_id})

    async def wake(self, node_id: str, decision_id: str) -> None:
        await self._call("POST", f"/nodes/{node_id}/wake", json={"decision_id": decision_id})

    async def events(self, after: int) -> AsyncIterator[BackendEvent]:
        while True:
            batch = await self._call(
                "GET", "/events", params={"after": after, "timeout_s": self.poll_s}
            )
            for e in batch:
                yield _event(e)
                after = e["seq"]

    async def close(self) -> None:
        await self._http.aclose()


def _event(e: dict[str, Any]) -> BackendEvent:
    """An entry of the simulated cluster's log (its ``ClusterEvent`` JSON)."""
    if e["kind"] == "node":
        return NodePower(e["seq"], e["ts"], e["node_id"], PowerState(e["power"]), e["decision_id"])
    return JobStep(
        e["seq"],
        e["ts"],
        e["job_id"],
        JobEventType(e["type"]),
        tuple(e["node_ids"]),
        tuple(tuple(i) for i in e["gpu_indices"]),
        e["decision_id"],
        e["reason"],
    )
