"""The cluster's mutable allocation state, indexed for fast fit checks, with rollback.

Policies try allocations on a ``ClusterState`` and undo them through ``checkpoint`` /
``rollback`` (like a transaction), so a preemption can be tried on the state itself
before any decision leaves the core. Iteration orders are insertion orders (never set
or hash order), so the same inputs give the same decisions.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from gpusched.core.errors import InvalidDecision
from gpusched.core.model import EPS, Allocation, NodeSpec, PowerState

__all__ = ["ClusterState", "NodeState"]


@dataclass(slots=True)
class NodeState:
    """One node now: free share of each GPU (1.0 = free), free CPU and memory, power."""

    spec: NodeSpec
    gpu_free: list[float]
    cpu_free: int
    mem_free: int
    power: PowerState = PowerState.ON
    jobs: dict[str, None] = field(default_factory=dict)
    ready_at: float = 0.0  # when a waking node is ON
    free_whole: int = 0  # GPUs wholly free; kept current with free_gpu by refresh()
    free_gpu: float = 0.0  # free GPU capacity, shares included

    def refresh(self) -> None:
        """Recompute the cached figures after ``gpu_free``, CPU or memory changed."""
        self.free_whole = sum(1 for f in self.gpu_free if f >= 1.0 - EPS)
        self.free_gpu = sum(self.gpu_free)

    @classmethod
    def from_spec(cls, spec: NodeSpec) -> NodeState:
        node = cls(spec, [1.0] * spec.num_gpus, spec.cpu_milli, spec.memory_mib)
        node.refresh()
        return node

    @property
    def node_id(self) -> str:
        return self.spec.node_id

    @property
    def idle(self) -> bool:
        return not self.jobs


class ClusterState:
    """All nodes, with buckets by (GPU model, free whole GPUs) over the nodes that are ON."""

    def __init__(self, specs: Iterable[NodeSpec]) -> None:
        self.nodes: dict[str, NodeState] = {}
        for spec in specs:
            if spec.node_id in self.nodes:
                raise InvalidDecision(f"node {spec.node_id!r} appears twice")
            self.nodes[spec.node_id] = NodeState.from_spec(spec)
        self.models: tuple[str, ...] = tuple(
            dict.fromkeys(n.spec.gpu_model for n in self.nodes.values() if n.spec.num_gpus)
        )
        self.max_gpus: dict[str, int] = {}
        for n in self.nodes.values():
            m = n.spec.gpu_model
            self.max_gpus[m] = max(self.max_gpus.get(m, 0), n.spec.num_gpus)
        self.total_gpus = sum(n.spec.num_gpus for n in self.nodes.values())
        self.model_gpus: dict[str, int] = {}  # GPUs of each model, all nodes
        for n in self.nodes.values():
            m = n.spec.gpu_model
            self.model_gpus[m] = self.model_gpus.get(m, 0) + n.spec.num_gpus
        # buckets[model][k]: ON nodes of that model with exactly k whole free GPUs.
        self._buckets: dict[str, list[dict[str, None]]] = {
            m: [{} for _ in range(self.max_gpus.get(m, 0) + 1)] for m in self._all_models()
        }
        self._partial: dict[str, dict[str, None]] = {m: {} for m in self._all_models()}
        # levels[model][free share] -> nodes with a partly used GPU at that free share
        self._levels: dict[str, dict[float, dict[str, None]]] = {m: {} for m in self._all_models()}
        self._sorted_levels: dict[str, list[float]] = {m: [] for m in self._all_models()}
        self._node_levels: dict[str, tuple[float, ...]] = {}
        self._key: dict[str, tuple[int, bool] | None] = {}
        self._journal: list[Callable[[], None]] = []
        self._journaling = False
        self._hidden: dict[str, None] = {}
        self._free_at: tuple[int, bool] = (-1, False)
        self.version = 0  # bumped on every change; lets callers cache per state
        self._not_on = sum(n.power is not PowerState.ON for n in self.nodes.values())
        for node in self.nodes.values():
            self._index(node)

    def _all_models(self) -> list[str]:
        return list(dict.fromkeys(n.spec.gpu_model for n in self.nodes.values()))

    # -- index ------------------------------------------------------------------
    def _index_levels(self, node: NodeState, usable: bool) -> None:
        nid, model = node.node_id, node.spec.gpu_model
        new = (
            tuple(sorted({round(f, 4) for f in node.gpu_free if EPS < f < 1.0 - EPS}))
            if usable
            else ()
        )
        old = self._node_levels.get(nid, ())
        if new == old:
            return
        levels, order = self._levels[model], self._sorted_levels[model]
        for level in old:
            if level not in new:
                del levels[level][nid]
                if not levels[level]:
                    del levels[level]
                    del order[bisect.bisect_left(order, level)]
        for level in new:
            if level not in old:
                if level not in levels:
                    levels[level] = {}
                    bisect.insort(order, level)
                levels[level][nid] = None
        self._node_levels[nid] = new

    def partial_levels(
        self, model: str, at_least: float
    ) -> Iterator[tuple[float, list[NodeState]]]:
        """Free shares ≥ ``at_least`` of partly used GPUs, ascending, with their nodes."""
        order = self._sorted_levels.get(model, [])
        for level in order[bisect.bisect_left(order, at_least - EPS) :]:
            yield level, [self.nodes[nid] for nid in self._levels[model][level]]

    def _index(self, node: NodeState) -> None:
        node.refresh()
        nid, model = node.node_id, node.spec.gpu_model
        old = self._key.get(nid)
        usable = node.power is PowerState.ON and nid not in self._hidden
        self._index_levels(node, usable)
        # _index_levels has just recorded the node's partly used GPUs.
        new = (node.free_whole, bool(self._node_levels.get(nid))) if usable else None
        if old == new:
            return
        if old is not None:
            del self._buckets[model][old[0]][nid]
            if old[1]:
                del self._partial[model][nid]
        if new is not None:
            self._buckets[model][new[0]][nid] = None
            if new[1]:
                self._partial[model][nid] = None
        self._key[nid] = new
        self.version += 1

    def nodes_with_whole(self, model: str, at_least: int) -> Iterator[NodeState]:
        """ON nodes of ``model`` with ≥ ``at_least`` whole free GPUs, fewest free first."""
        buckets = self._buckets.get(model, [])
        for k in range(max(at_least, 0), len(buckets)):
            for nid in buckets[k]:
                yield self.nodes[nid]

    def nodes_with_whole_desc(self, model: str, at_least: int) -> Iterator[NodeState]:
        """As ``nodes_with_whole``, most free first."""
        buckets = self._buckets.get(model, [])
        for k in range(len(buckets) - 1, max(at_least, 0) - 1, -1):
            yield from (self.nodes[nid] for nid in buckets[k])

    def nodes_with_partial(self, model: str) -> Iterator[NodeState]:
        return (self.nodes[nid] for nid in self._partial.get(model, {}))

    def max_free_whole(self, model: str) -> int:
        buckets = self._buckets.get(model, [])
        for k in range(len(buckets) - 1, 0, -1):
            if buckets[k]:
                return k
        return 0

    def has_free_gpu(self) -> bool:
        """Whether any usable node has any free GPU capacity."""
        if self._free_at[0] != self.version:
            free = any(self._partial[m] for m in self._partial) or any(
                self.max_free_whole(m) > 0 for m in self.models
            )
            self._free_at = (self.version, free)
        return self._free_at[1]

    def all_on(self) -> bool:
        """Whether every node is on (none parked or waking)."""
        return self._not_on == 0

    def on_nodes(self) -> Iterator[NodeState]:
        """Nodes that are on and not hidden."""
        return (
            n
            for n in self.nodes.values()
            if n.power is PowerState.ON and n.node_id not in self._hidden
        )

    def hide(self, node_ids: Iterable[str]) -> None:
        """Keep these nodes out of placement (a reservation) until ``unhide``."""
        for nid in node_ids:
            self._hidden[nid] = None
            self._index(self.nodes[nid])

    def unhide(self, node_ids: Iterable[str]) -> None:
        for nid in node_ids:
            self._hidden.pop(nid, None)
            self._index(self.nodes[nid])

    # -- transactions -------------------------------------------------------------
    def checkpoint(self) -> int:
        """Start (or continue) a transaction; ``rollback(mark)`` undoes what follows."""
        self._journaling = True
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        while len(self._journal) > mark:
            self._journal.pop()()

    def commit(self) -> None:
        """Keep every change since the first checkpoint and end the transaction."""
        self._journal.clear()
        self._journaling = False

    def _record(self, undo: Callable[[], None]) -> None:
        if self._journaling:
            self._journal.append(undo)

    # -- changes ------------------------------------------------------------------
    def allocate(self, job_id: str, allocations: Iterable[Allocation]) -> None:
        """Take the resources of ``allocations`` for ``job_id``; raise if they are not free."""
        done: list[Allocation] = []
        try:
            for a in allocations:
                self._take(job_id, a)
                done.append(a)
        except InvalidDecision:
            for a in reversed(done):
                self._give(job_id, a)
            raise
        self._record(lambda: self.release(job_id, done, journal=False))

    def release(self, job_id: str, allocations: Iterable[Allocation], journal: bool = True) -> None:
        """Give back what ``allocations`` took."""
        done = list(allocations)
        for a in done:
            self._give(job_id, a)
        if journal:
            self._record(lambda: self._retake(job_id, done))

    def _retake(self, job_id: str, allocations: list[Allocation]) -> None:
        for a in allocations:
            self._take(job_id, a)

    def _take(self, job_id: str, a: Allocation) -> None:
        node = self.nodes.get(a.node_id)
        if node is None:
            raise InvalidDecision(f"job {job_id}: unknown node {a.node_id!r}")
        if node.power is not PowerState.ON:
            raise InvalidDecision(f"job {job_id}: node {a.node_id} is {node.power}")
        if node.cpu_free < a.cpu_milli or node.mem_free < a.memory_mib:
            raise InvalidDecision(f"job {job_id}: node {a.node_id} lacks CPU or memory")
        for i in a.gpu_indices:
            if node.gpu_free[i] < a.share - EPS:
                raise InvalidDecision(f"job {job_id}: GPU {i} of {a.node_id} is not free")
        for i in a.gpu_indices:
            node.gpu_free[i] = max(node.gpu_free[i] - a.share, 0.0)
        node.cpu_free -= a.cpu_milli
        node.mem_free -= a.memory_mib
        node.jobs[job_id] = None
        self._index(node)
        self.version += 1

    def _give(self, job_id: str, a: Allocation) -> None:
        node = self.nodes[a.node_id]
        for i in a.gpu_indices:
            node.gpu_free[i] = min(node.gpu_free[i] + a.share, 1.0)
            if node.gpu_free[i] > 1.0 - EPS:
                node.gpu_free[i] = 1.0
        node.cpu_free += a.cpu_milli
        node.mem_free += a.memory_mib
        node.jobs.pop(job_id, None)
        self._index(node)
        self.version += 1

    def set_power(self, node_id: str, power: PowerState, ready_at: float = 0.0) -> None:
        node = self.nodes[node_id]
        if power is not PowerState.ON and node.jobs:
            raise InvalidDecision(f"node {node_id} runs jobs; it cannot be {power}")
        before, before_ready = node.power, node.ready_at
        node.power, node.ready_at = power, ready_at
        self._not_on += (power is not PowerState.ON) - (before is not PowerState.ON)
        self._index(node)

        def undo() -> None:
            self._not_on += (before is not PowerState.ON) - (node.power is not PowerState.ON)
            node.power, node.ready_at = before, before_ready
            self._index(node)

        self._record(undo)
