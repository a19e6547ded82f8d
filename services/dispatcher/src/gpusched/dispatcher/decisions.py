"""A core decision as the placements topic records it."""

from __future__ import annotations

from gpusched.contracts import DecisionAction, PlacementDecision
from gpusched.core import Decision, ParkNode, Place, Preempt

__all__ = ["placement_decision"]


def placement_decision(d: Decision, decision_id: str, epoch: int) -> PlacementDecision:
    reason = str(getattr(d, "reason", ""))
    if isinstance(d, Place):
        return PlacementDecision(
            decision_id=decision_id,
            epoch=epoch,
            reason=reason,
            action=DecisionAction.PLACE,
            job_id=d.job_id,
            node_ids=tuple(a.node_id for a in d.allocations),
            gpu_indices=tuple(a.gpu_indices for a in d.allocations),
            gpu_share=d.allocations[0].share if d.allocations else None,
        )
    if isinstance(d, Preempt):
        return PlacementDecision(
            decision_id=decision_id,
            epoch=epoch,
            reason=reason,
            action=DecisionAction.PREEMPT,
            job_id=d.job_id,
        )
    action = DecisionAction.PARK if isinstance(d, ParkNode) else DecisionAction.WAKE
    return PlacementDecision(
        decision_id=decision_id, epoch=epoch, reason=reason, action=action, node_ids=(d.node_id,)
    )
