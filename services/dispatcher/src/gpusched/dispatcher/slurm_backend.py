"""``SlurmBackend``: the Backend Protocol on a real Slurm cluster (22.05).

Reads go through slurmrestd (JWT): nodes with their GRES in use, jobs with the GPU
indices each node gave them. Changes go through the Slurm CLI where the REST API of
22.05 does not serve them: its job/submit refuses ``required_nodes`` ("Disabled key",
v0.0.37 and v0.0.38), and it has no requeue or node update. A placement is
``sbatch --hold`` onto exactly the chosen nodes with typed GPUs
(``--gpus=<type>:<n>``, type = the GPU model in lower case), then ``scontrol release``;
preemption is ``scontrol requeuehold`` (the job waits, held, until the dispatcher places
it again: ``scontrol update ReqNodeList=...`` and release); cancel is ``scancel``;
parking drains a node and waking resumes it.

Slurm picks the GPU indices inside a node, so the indices a decision named are advice;
the events carry the ones Slurm chose. A whole GPU is the smallest unit (Slurm without
MPS or shards does not share one): a fractional job gets one GPU. Lifecycle events come
from polling the jobs every ``poll_s`` and comparing states; the log lives in this
object, so a restarted dispatcher gets a new log id and rebuilds from what Slurm reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Callable
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
    PolledLog,
)

__all__ = ["SlurmBackend", "expand_hostlist", "gres_indices", "slurm_nice"]

API = "/slurm/v0.0.38"
_REQUEUEING = ("COMPLETING", "REQUEUE_HOLD", "REQUEUED", "REQUEUE_FED")
_REQUEUE_WITHIN_S = 10.0  # longest wait in ``place`` for a requeue to finish
_ENDS = {
    "COMPLETED": JobEventType.FINISHED,
    "CANCELLED": JobEventType.CANCELLED,
    "FAILED": JobEventType.FAILED,
    "TIMEOUT": JobEventType.FAILED,
    "NODE_FAIL": JobEventType.FAILED,
    "OUT_OF_MEMORY": JobEventType.FAILED,
    "BOOT_FAIL": JobEventType.FAILED,
    "DEADLINE": JobEventType.FAILED,
}


def expand_hostlist(text: str) -> list[str]:
    """'node[1-3,7],gpu5' -> ['node1', 'node2', 'node3', 'node7', 'gpu5']."""
    names: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", text):
        if plain:
            names.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                names.append(f"{prefix}{i:0{width}d}")
    return names


def gres_indices(detail: str) -> tuple[int, ...]:
    """'gpu:v100:2(IDX:0-1,3)' -> (0, 1, 3); no indices -> ()."""
    match = re.search(r"IDX:([0-9,\-]+)", detail)
    if not match:
        return ()
    out: list[int] = []
    for part in match.group(1).split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def slurm_nice(score: float) -> int:
    """gpusched's score (lower runs first) as a Slurm nice value (lower runs first). Nice,
    not Priority: Slurm refuses a Priority for a job requeued in held state."""
    return max(-(2**31 - 3), min(2**31 - 3, round(score * 1000)))


def _gres_type(node: dict[str, Any]) -> str:
    """The GPU type of a Slurm node ('gpu:v100:4' -> 'v100'; none: '')."""
    parts = str(node["gres"]).split(":")
    return parts[1] if len(parts) > 2 else ""


def _gres_count(gres: str) -> int:
    match = re.match(r"gpu(?::[^:(]+)?:(\d+)", gres)
    return int(match.group(1)) if match else 0


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        rest_url: str,
        token: str,
        env: dict[str, str],
        partition: str = "gpu",
        run_s: Callable[[str], float] = lambda _: 60.0,
        poll_s: float = 1.0,
    ) -> None:
        self.env, self.partition, self.run_s, self.poll_s = env, partition, run_s, poll_s
        self._http = httpx.AsyncClient(
            base_url=rest_url.rstrip("/"),
            headers={"X-SLURM-USER-NAME": "root", "X-SLURM-USER-TOKEN": token},
            timeout=30,
        )
        self._log = PolledLog(self._poll, poll_s)
        self._seen: dict[str, str] = {}  # our job id -> last Slurm state
        self._running: set[str] = set()  # reported running, not yet requeued or ended
        self._ids: dict[str, int] = {}  # our job id -> Slurm job id

    # -- Slurm access -------------------------------------------------------------------
    async def _get(self, path: str) -> dict[str, Any]:
        try:
            response = await self._http.get(f"{API}{path}")
        except httpx.HTTPError as exc:
            raise BackendError(f"slurmrestd unreachable: {exc}") from exc
        if response.status_code != 200:
            raise BackendError(f"slurmrestd {path}: {response.status_code} {response.text[:300]}")
        data: dict[str, Any] = response.json()
        return data

    async def _cli(self, *args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            *args,
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise BackendError(f"{' '.join(args[:2])}: {err.decode().strip()}")
        return out.decode()

    async def _slurm_jobs(self) -> list[dict[str, Any]]:
        jobs: list[dict[str, Any]] = (await self._get("/jobs"))["jobs"]
        return jobs

    # -- the Protocol ---------------------------------------------------------------------
    async def log_id(self) -> str:
        return self._log.log_id

    async def nodes(self) -> list[BackendNode]:
        out = []
        for n in (await self._get("/nodes"))["nodes"]:
            drained = "DRAIN" in n.get("state_flags", []) or "drain" in str(n["state"])
            out.append(
                BackendNode(
                    n["name"],
                    _gres_type(n).upper(),
                    _gres_count(str(n["gres"])),
                    int(n["cpus"]) * 1000,
                    int(n["real_memory"]),
                    PowerState.PARKED if drained else PowerState.ON,
                )
            )
        return out

    async def jobs(self) -> list[BackendJob]:
        out = []
        for j in await self._slurm_jobs():
            if j["job_state"] == "RUNNING":
                nodes = tuple(expand_hostlist(j["nodes"]))
                indices = tuple(gres_indices(d) for d in j.get("gres_detail", []))
                out.append(BackendJob(j["name"], nodes, indices, 1.0))
        return out

    async def place(self, job: Job, allocations: tuple[Allocation, ...], decision_id: str) -> None:
        self._log.start()
        gpus = sum(len(a.gpu_indices) for a in allocations) if job.request.num_gpu else 0
        nodes = [a.node_id for a in allocations]
        slurm_nodes = await self._check_room(job.job_id, allocations)
        gpu_type = next(iter(job.request.gpu_models), "") or _gres_type(slurm_nodes[nodes[0]])
        gres = [f"--gpus={gpu_type.lower()}:{max(gpus, 1)}"] if job.request.num_gpu else []
        held = self._ids.get(job.job_id)
        if held is not None:  # requeued earlier: send it to the new nodes and release it
            # A requeued job may only begin after a delay Slurm sets; StartTime=now lifts it.
            await self._cli(
                "scontrol", "update", f"JobId={held}", f"ReqNodeList={','.join(nodes)}",
                f"NumNodes={len(nodes)}", f"Comment={decision_id}", "StartTime=now",
            )  # fmt: skip
        else:
            out = await self._cli(
                "sbatch", "--hold", "--parsable", "-J", job.job_id, "-p", self.partition,
                f"--nodelist={','.join(nodes)}", f"--nodes={len(nodes)}", *gres,
                f"--comment={decision_id}", "-o", "/dev/null",
                "--wrap", f"sleep {self.run_s(job.job_id):g}",
            )  # fmt: skip
            held = int(out.strip().split(";")[0])
            self._ids[job.job_id] = held
        await self._cli("scontrol", "release", str(held))

    async def _check_room(
        self, job_id: str, allocations: tuple[Allocation, ...]
    ) -> dict[str, dict[str, Any]]:
        """Slurm's nodes by name, once the job is known not to run and to fit there.
        A job Slurm is still requeueing is waited for (up to ``_REQUEUE_WITHIN_S``): a
        move places a job in the cycle that preempted it, and a job still completing
        takes the node update and the release, and is held by its requeue all the same,
        for good."""
        deadline = time.monotonic() + _REQUEUE_WITHIN_S
        while True:
            mine = [j for j in await self._slurm_jobs() if j["name"] == job_id]
            for j in mine:
                if j["job_state"] in ("RUNNING", "CONFIGURING"):
                    raise AlreadyPlaced(f"job {job_id} already runs (Slurm job {j['job_id']})")
            requeueing = [str(j["job_state"]) for j in mine if j["job_state"] in _REQUEUEING]
            if not requeueing:
                break
            state = requeueing[0]
            if time.monotonic() > deadline:
                raise NotPlaceable(f"job {job_id} is still being requeued ({state})")
            await asyncio.sleep(self.poll_s / 4)
        nodes = {n["name"]: n for n in (await self._get("/nodes"))["nodes"]}
        for a in allocations:
            n = nodes.get(a.node_id)
            if n is None:
                raise NotPlaceable(f"no node {a.node_id}")
            if "DRAIN" in n.get("state_flags", []):
                raise NotPlaceable(f"node {a.node_id} is parked (drained)")
            free = _gres_count(str(n["gres"])) - len(gres_indices(str(n["gres_used"])))
            if len(a.gpu_indices) > free:
                raise NotPlaceable(
                    f"node {a.node_id} has {free} free GPUs, not {len(a.gpu_indices)}"
                )
        return nodes

    async def preempt(self, job_id: str, decision_id: str) -> None:
        slurm_id = self._ids.get(job_id)
        if slurm_id is None:
            raise NotPlaceable(f"job {job_id} does not run")
        await self._cli("scontrol", "requeuehold", str(slurm_id))

    async def cancel(self, job_id: str) -> None:
        slurm_id = self._ids.get(job_id)
        if slurm_id is not None:
            await self._cli("scancel", str(slurm_id))

    async def prioritize(self, job_id: str, score: float) -> None:
        """A held (preempted) job's Slurm nice value follows gpusched's score, so Slurm's
        own priority lists the waiting jobs in gpusched's order."""
        slurm_id = self._ids.get(job_id)
        if slurm_id is not None and self._seen.get(job_id) == "PENDING":
            nice = f"Nice={slurm_nice(score)}"
            await self._cli("scontrol", "update", f"JobId={slurm_id}", nice)

    async def park(self, node_id: str, decision_id: str) -> None:
        node = next((n for n in (await self._get("/nodes"))["nodes"] if n["name"] == node_id), None)
        if node is None:
            raise NotPlaceable(f"no node {node_id}")
        if gres_indices(str(node["gres_used"])) or node.get("alloc_cpus"):
            raise NotPlaceable(f"node {node_id} runs jobs; it cannot be parked")
        await self._cli(
            "scontrol", "update", f"NodeName={node_id}", "State=DRAIN", "Reason=gpusched-park"
        )
        self._log.append(
            NodePower, node_id=node_id, power=PowerState.PARKED, decision_id=decision_id
        )

    async def wake(self, node_id: str, decision_id: str) -> None:
        await self._cli("scontrol", "update", f"NodeName={node_id}", "State=RESUME")
        self._log.append(
            NodePower, node_id=node_id, power=PowerState.WAKING, decision_id=decision_id
        )
        self._log.append(NodePower, node_id=node_id, power=PowerState.ON)  # no power-on delay here

    def events(self, after: int) -> AsyncIterator[BackendEvent]:
        return self._log.after(after)

    async def close(self) -> None:
        await self._log.close()
        await self._http.aclose()

    # -- lifecycle from polling ----------------------------------------------------------
    async def _poll(self) -> None:
        with contextlib.suppress(BackendError):  # slurmrestd is back on the next round
            for j in await self._slurm_jobs():
                self._observe(j)

    def _observe(self, j: dict[str, Any]) -> None:
        job_id, state = str(j["name"]), str(j["job_state"])
        self._ids.setdefault(job_id, int(j["job_id"]))
        before = self._seen.get(job_id)
        if before == state:
            return
        self._seen[job_id] = state
        decision = j.get("comment") or None
        if state == "RUNNING":
            self._running.add(job_id)
            nodes = tuple(expand_hostlist(j["nodes"]))
            idx = tuple(gres_indices(d) for d in j.get("gres_detail", []))
            where = {"node_ids": nodes, "gpu_indices": idx, "decision_id": decision}
            self._log.append(JobStep, job_id=job_id, type=JobEventType.PLACED, **where)
            self._log.append(JobStep, job_id=job_id, type=JobEventType.RUNNING, **where)
        elif state == "PENDING" and job_id in self._running:
            # requeued (through REQUEUE_HOLD / COMPLETING on the way, polls may see either)
            self._log.append(
                JobStep, job_id=job_id, type=JobEventType.PREEMPTED, decision_id=decision
            )
        if state != "RUNNING" and state not in ("COMPLETING", "REQUEUE_HOLD", "REQUEUED"):
            self._running.discard(job_id)
        if state in _ENDS:  # also when first seen ended: it ended between two polls
            reason = str(j.get("state_reason") or "") or None
            self._log.append(JobStep, job_id=job_id, type=_ENDS[state], reason=reason)
