"""The live resource view: node records from telemetry (and the host readings of nodes
without GPUs), turned into NodeView events."""

from __future__ import annotations

from datetime import UTC, datetime

from gpusched.contracts import GpuTelemetrySample, HostSample, NodeView
from gpusched.processor.records import NO_GPU, NodeRecord

__all__ = ["LiveView"]


class LiveView:
    """Every node's latest GPU readings; which nodes changed since the last flush."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.nodes: dict[str, NodeRecord] = {}
        self.dirty: set[str] = set()
        self._stale: dict[str, tuple[tuple[str, ...], bool]] = {}

    def load(self, record: NodeRecord) -> None:
        """Restore a node from the table after a restart."""
        self.nodes[record.node_id] = record

    def observe(self, sample: GpuTelemetrySample) -> None:
        node = self.nodes.get(sample.node_id)
        if node is None:
            node = self.nodes[sample.node_id] = NodeRecord(
                node_id=sample.node_id, gpu_model=sample.gpu_model
            )
        node.observe(sample)
        self.dirty.add(sample.node_id)

    def observe_host(self, sample: HostSample) -> None:
        node = self.nodes.get(sample.node_id)
        if node is None:
            node = self.nodes[sample.node_id] = NodeRecord(node_id=sample.node_id, gpu_model=NO_GPU)
        node.observe_host(sample)
        self.dirty.add(sample.node_id)

    def merge(self, part: NodeRecord) -> None:
        """Fold in a worker's part of a node (the merger's whole-cluster view)."""
        node = self.nodes.get(part.node_id)
        if node is None:  # a record of its own: the part may be a worker's, still changing
            node = self.nodes[part.node_id] = NodeRecord(
                node_id=part.node_id, gpu_model=part.gpu_model
            )
        node.merge(part)
        self.dirty.add(part.node_id)

    def take_dirty(self) -> list[NodeRecord]:
        """The nodes changed since the last call."""
        changed = [self.nodes[n] for n in sorted(self.dirty)]
        self.dirty.clear()
        return changed

    def newly_stale(self, now: float) -> list[str]:
        """Nodes whose stale GPUs (or stale host reading) changed since last reported."""
        changed = []
        for node_id, node in self.nodes.items():
            stale = (self.stale_gpus(node, now), self.host_stale(node, now))
            if stale != self._stale.get(node_id, ((), False)):
                self._stale[node_id] = stale
                changed.append(node_id)
        return changed

    def stale_gpus(self, node: NodeRecord, now: float) -> tuple[str, ...]:
        return tuple(sorted(u for u, g in node.gpus.items() if now - g.ts > self.stale_after_s))

    def host_stale(self, node: NodeRecord, now: float) -> bool:
        """A node without GPUs whose host reading is overdue."""
        return node.host_ts is not None and now - node.host_ts > self.stale_after_s

    def node_view(self, node_id: str, now: float, allocated: float) -> NodeView:
        """The NodeView of one node at ``now``: stale or erroring GPUs are not allocatable."""
        node = self.nodes[node_id]
        stale = self.stale_gpus(node, now)
        broken = {u for u, g in node.gpus.items() if g.ecc_uncorrected > 0}
        fresh = [g for u, g in node.gpus.items() if u not in stale]
        seen = [g.ts for g in node.gpus.values()] + ([node.host_ts] if node.host_ts else [])
        return NodeView(
            ts=datetime.fromtimestamp(now, UTC),
            node_id=node_id,
            gpu_model=node.gpu_model,
            gpus_total=len(node.gpus),
            gpus_allocatable=float(len(node.gpus) - len(set(stale) | broken)),
            gpus_allocated=allocated,
            utilization_pct=sum(g.utilization_pct for g in fresh) / len(fresh) if fresh else 0.0,
            power_w=sum(g.power_w for g in fresh),
            healthy=not broken and not stale and not self.host_stale(node, now),
            stale_gpus=stale,
            last_seen=datetime.fromtimestamp(max(seen), UTC) if seen else None,
        )
