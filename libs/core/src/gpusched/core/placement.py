"""Placement strategies by name: ``spread``, ``bestfit``, ``fgd``.

All three share the rules: a gang of N whole GPUs that fits one node of its model goes on
one node; a larger gang takes whole free nodes plus at most one partial node (the fewest
nodes possible); a share (< 1) goes on one GPU; allowed GPU models are honoured; CPU and
memory are split across a gang's nodes in proportion to its GPUs. They differ in which
feasible node (and GPU) they choose:

- ``spread``: the node with the most free GPUs (load balancing, as Kubernetes' default).
- ``bestfit``: the node (and GPU) left with the least free capacity (consolidation).
- ``fgd``: the node and GPU whose GPU fragmentation grows the least, measured against the
  distribution of requests seen so far (Weng et al., "Beware of Fragmentation", ATC'23).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from gpusched.core.cluster import ClusterState, NodeState
from gpusched.core.errors import UnknownName
from gpusched.core.model import EPS, Allocation, Request

__all__ = ["PLACEMENTS", "Placement", "make_placement"]

Candidate = tuple[NodeState, int | None]  # node, and for a share the GPU index


class Placement(Protocol):
    name: str

    def observe(self, request: Request) -> None:
        """Learn the workload (fgd uses the distribution of requests)."""

    def place(self, state: ClusterState, request: Request) -> tuple[Allocation, ...] | None:
        """Where ``request`` would go now, or None when it fits nowhere."""


def _models(state: ClusterState, request: Request) -> list[str]:
    if not request.gpu_models:
        return list(state.models)
    return [m for m in state.models if m in request.gpu_models]


def _fits_host(node: NodeState, cpu: int, mem: int) -> bool:
    return node.cpu_free >= cpu and node.mem_free >= mem


def _whole_indices(node: NodeState, n: int) -> tuple[int, ...]:
    return tuple([i for i, f in enumerate(node.gpu_free) if f >= 1.0 - EPS][:n])


class _Strategy:
    """Feasibility shared by every strategy; subclasses rank candidates (lower is better)."""

    name = ""

    def observe(self, request: Request) -> None:
        return None

    def rank(self, node: NodeState, request: Request, gpu: int | None) -> float:
        raise NotImplementedError

    # Whole-GPU candidates arrive bucketed by free whole GPUs, in this order; a strategy
    # whose rank follows that order may stop after the first bucket with a feasible node.
    ascending = True
    bucket_ordered = False
    _CPU_ONLY_CANDIDATES = 8
    # Within one bucket nodes differ only in tie-breaks (host CPU left, partial GPUs):
    # ranking the first few keeps a cycle cheap on clusters of thousands of nodes.
    _BUCKET_SAMPLE = 4

    # -- candidates ---------------------------------------------------------------
    def _groups(self, state: ClusterState, request: Request) -> Iterator[Iterator[Candidate]]:
        """Candidates, one group per GPU model (all ON nodes for a CPU-only request)."""
        cpu, mem = request.cpu_milli, request.memory_mib
        if request.num_gpu == 0:
            # CPU-only: the first nodes that fit are as good as any for GPU placement;
            # looking at a bounded number keeps a cycle cheap on thousands of nodes.
            fitting = (n for n in state.on_nodes() if _fits_host(n, cpu, mem))
            yield (
                (n, None) for _, n in zip(range(self._CPU_ONLY_CANDIDATES), fitting, strict=False)
            )
            return
        for model in _models(state, request):
            if request.is_fraction:
                yield self._share_candidates(state, model, request)
            else:
                nodes = (
                    state.nodes_with_whole(model, request.whole_gpus)
                    if self.ascending
                    else state.nodes_with_whole_desc(model, request.whole_gpus)
                )
                yield ((n, None) for n in nodes if _fits_host(n, cpu, mem))

    def _share_candidates(
        self, state: ClusterState, model: str, request: Request
    ) -> Iterator[Candidate]:
        cpu, mem, share = request.cpu_milli, request.memory_mib, request.num_gpu
        if self.bucket_ordered and self.ascending:
            # Best fit: the smallest free share that fits, straight from the level index.
            for level, nodes in state.partial_levels(model, share):
                hits = [n for n in nodes if _fits_host(n, cpu, mem)]
                for node in hits:
                    yield (
                        node,
                        next(
                            i for i, f in enumerate(node.gpu_free) if abs(round(f, 4) - level) < EPS
                        ),
                    )
                if hits:
                    return
        seen: dict[str, None] = {}
        found = False
        partial = () if self.bucket_ordered and self.ascending else state.nodes_with_partial(model)
        for node in partial:
            seen[node.node_id] = None
            if _fits_host(node, cpu, mem):
                for cand in self._gpus_for_share(node, share):
                    found = True
                    yield cand
        if found and self.bucket_ordered:
            return  # a partly used GPU that fits beats any whole free one for these ranks
        bucket: int | None = None
        taken = 0
        for node in state.nodes_with_whole(model, 1):
            if node.node_id in seen or not _fits_host(node, cpu, mem):
                continue
            if self.bucket_ordered:
                whole = node.free_whole
                if (bucket is not None and whole != bucket) or taken >= self._BUCKET_SAMPLE:
                    return
                bucket, taken = whole, taken + 1
            yield from self._gpus_for_share(node, share)

    @staticmethod
    def _gpus_for_share(node: NodeState, share: float) -> Iterator[Candidate]:
        # One candidate per distinct free level: GPUs with the same free share are alike.
        levels: dict[float, int] = {}
        for i, f in enumerate(node.gpu_free):
            if f >= share - EPS and f not in levels:
                levels[f] = i
        for i in levels.values():
            yield node, i

    def _choose(self, state: ClusterState, request: Request) -> Candidate | None:
        best: Candidate | None = None
        best_rank = math.inf
        stop_at_bucket = self.bucket_ordered and request.whole_gpus > 0
        for group in self._groups(state, request):
            bucket: int | None = None
            taken = 0
            for cand in group:
                if stop_at_bucket:
                    whole = cand[0].free_whole
                    if (bucket is not None and whole != bucket) or taken >= self._BUCKET_SAMPLE:
                        break
                    bucket, taken = whole, taken + 1
                r = self.rank(cand[0], request, cand[1])
                if r < best_rank - 1e-12:
                    best, best_rank = cand, r
        return best

    def place(self, state: ClusterState, request: Request) -> tuple[Allocation, ...] | None:
        n = request.whole_gpus
        if n and all(n > state.max_gpus.get(m, 0) for m in _models(state, request)):
            return self._place_spanning(state, request)
        chosen = self._choose(state, request)
        if chosen is None:
            return None
        node, gpu = chosen
        if request.num_gpu == 0:
            indices: tuple[int, ...] = ()
            share = 0.0
        elif request.is_fraction:
            assert gpu is not None
            indices, share = (gpu,), request.num_gpu
        else:
            indices, share = _whole_indices(node, n), 1.0
        return (Allocation(node.node_id, indices, share, request.cpu_milli, request.memory_mib),)

    def _place_spanning(
        self, state: ClusterState, request: Request
    ) -> tuple[Allocation, ...] | None:
        """A gang larger than any node: whole free nodes first, the remainder best-fit."""
        for model in _models(state, request):
            size = state.max_gpus.get(model, 0)
            if size == 0:
                continue
            full, rest = divmod(request.whole_gpus, size)
            parts = full + (1 if rest else 0)
            cpu, mem = request.cpu_milli // parts, request.memory_mib // parts
            free_nodes = [n for n in state.nodes_with_whole(model, size) if _fits_host(n, cpu, mem)]
            if len(free_nodes) < full:
                continue
            picked = free_nodes[:full]
            chosen: list[tuple[NodeState, int]] = [(n, size) for n in picked]
            if rest:
                used = {n.node_id for n in picked}
                extra = next(
                    (
                        n
                        for n in state.nodes_with_whole(model, rest)
                        if n.node_id not in used and _fits_host(n, cpu, mem)
                    ),
                    None,
                )
                if extra is None:
                    continue
                chosen.append((extra, rest))
            return tuple(
                Allocation(node.node_id, _whole_indices(node, k), 1.0, cpu, mem)
                for node, k in chosen
            )
        return None


class Spread(_Strategy):
    name = "spread"
    ascending = False
    bucket_ordered = True

    def rank(self, node: NodeState, request: Request, gpu: int | None) -> float:
        # Most free GPU capacity first; for a share, the emptiest GPU.
        own = node.gpu_free[gpu] if gpu is not None else 0.0
        return -(node.free_gpu + own)


class BestFit(_Strategy):
    name = "bestfit"
    bucket_ordered = True

    def rank(self, node: NodeState, request: Request, gpu: int | None) -> float:
        # Least capacity left: the fullest GPU that fits, then the fullest node.
        own = node.gpu_free[gpu] if gpu is not None else 0.0
        host = (node.cpu_free / max(node.spec.cpu_milli, 1)) * 1e-3
        return own * 100 + node.free_gpu + host


class FragmentationGradient(_Strategy):
    """FGD: choose the candidate that adds the least expected GPU fragmentation."""

    name = "fgd"
    _TYPES = 24  # the most common request types stand for the workload

    def __init__(self) -> None:
        self._seen: Counter[Request] = Counter()
        self._workload: list[tuple[Request, float]] = []
        self._since_refresh = 0
        self._frag_cache: dict[tuple[object, ...], float] = {}

    def observe(self, request: Request) -> None:
        self._seen[request] += 1
        self._since_refresh += 1
        if not self._workload or self._since_refresh >= max(50, len(self._workload)):
            self._refresh()

    def _refresh(self) -> None:
        top = self._seen.most_common(self._TYPES)
        total = sum(c for _, c in top) or 1
        self._workload = [(r, c / total) for r, c in top]
        self._frag_cache.clear()
        self._since_refresh = 0

    def _fragmentation(self, model: str, gpu_free: tuple[float, ...], cpu: int, mem: int) -> float:
        key = (model, gpu_free, cpu, mem)
        cached = self._frag_cache.get(key)
        if cached is not None:
            return cached
        free_total = sum(gpu_free)
        frag = 0.0
        for req, p in self._workload:
            if req.num_gpu == 0:
                continue
            fits_host = cpu >= req.cpu_milli and mem >= req.memory_mib and req.allows(model)
            if req.is_fraction:
                usable = fits_host and any(f >= req.num_gpu - EPS for f in gpu_free)
                lost = sum(f for f in gpu_free if f < req.num_gpu - EPS) if usable else free_total
            else:
                whole = sum(1 for f in gpu_free if f >= 1.0 - EPS)
                usable = fits_host and whole >= req.whole_gpus
                lost = (free_total - whole) if usable else free_total
            frag += p * lost
        self._frag_cache[key] = frag
        return frag

    def rank(self, node: NodeState, request: Request, gpu: int | None) -> float:
        if not self._workload:
            self.observe(request)
        model = node.spec.gpu_model
        before_free = tuple(sorted(round(f, 4) for f in node.gpu_free))
        after = list(node.gpu_free)
        if gpu is not None:
            after[gpu] = max(after[gpu] - request.num_gpu, 0.0)
        elif request.whole_gpus:
            for i in _whole_indices(node, request.whole_gpus):
                after[i] = 0.0
        after_free = tuple(sorted(round(f, 4) for f in after))
        cpu_after = node.cpu_free - request.cpu_milli
        mem_after = node.mem_free - request.memory_mib
        delta = self._fragmentation(model, after_free, cpu_after, mem_after) - (
            self._fragmentation(model, before_free, node.cpu_free, node.mem_free)
        )
        # Ties (common) go to the fuller node, as best-fit would, then to the smaller node:
        # large hosts are kept for the rare pods that only they can hold.
        size = node.spec.cpu_milli / 1e6 + node.spec.memory_mib / 1e7
        return delta * 1000 + sum(after) + size


PLACEMENTS: dict[str, type[_Strategy]] = {
    "spread": Spread,
    "bestfit": BestFit,
    "fgd": FragmentationGradient,
}


def make_placement(name: str) -> Placement:
    """A fresh placement strategy by name."""
    try:
        return PLACEMENTS[name]()
    except KeyError:
        raise UnknownName("placement", name, list(PLACEMENTS)) from None


def placement_name(name: str) -> str:
    """``name``, if it names a placement strategy (``UnknownName`` with the accepted ones)."""
    make_placement(name)
    return name
