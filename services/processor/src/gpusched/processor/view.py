"""The live resource view: node records from telemetry, turned into NodeView events."""

from __future__ import annotations

from datetime import UTC, datetime

from gpusched.contracts import GpuTelemetrySample, NodeView
from gpusched.processor.records import NodeRecord

__all__ = ["LiveView"]


class LiveView:
    """Every node's latest GPU readings; which nodes changed since the last flush."""

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self.nodes: dict[str, NodeRecord] = {}
        self.dirty: set[str] = set()
        self._stale: dict[str, tuple[str, ...]] = {}

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

    def take_dirty(self) -> list[NodeRecord]:
        """The nodes changed since the last call."""
        changed = [self.nodes[n] for n in sorted(self.dirty)]
        self.dirty.clear()
        return changed

    def newly_stale(self, now: float) -> list[str]:
        """Nodes whose set of stale GPUs changed since it was last reported."""
        changed = []
        for node_id, node in self.nodes.items():
            stale = self.stale_gpus(node, now)
            if stale != self._stale.get(node_id, ()):
                self._stale[node_id] = stale
                changed.append(node_id)
        return changed

    def stale_gpus(self, node: NodeRecord, now: float) -> tuple[str, ...]:
        return tuple(sorted(u for u, g in node.gpus.items() if now - g.ts > self.stale_after_s))

    def node_view(self, node_id: str, now: float, allocated: float) -> NodeView:
        """The NodeView of one node at ``now``: stale or erroring GPUs are not allocatable."""
        node = self.nodes[node_id]
        stale = self.stale_gpus(node, now)
        broken = {u for u, g in node.gpus.items() if g.ecc_uncorrected > 0}
        fresh = [g for u, g in node.gpus.items() if u not in stale]
        return NodeView(
            ts=datetime.fromtimestamp(now, UTC),
            node_id=node_id,
            gpu_model=node.gpu_model,
            gpus_total=len(node.gpus),
            gpus_allocatable=float(len(node.gpus) - len(set(stale) | broken)),
            gpus_allocated=allocated,
            utilization_pct=sum(g.utilization_pct for g in fresh) / len(fresh) if fresh else 0.0,
            power_w=sum(g.power_w for g in fresh),
            healthy=not broken and not stale,
            stale_gpus=stale,
            last_seen=datetime.fromtimestamp(max(g.ts for g in node.gpus.values()), UTC)
            if node.gpus
            else None,
        )
