"""gpusched.core: the pure scheduling core — typed values in, decisions out.

No I/O, no wall clock (time is an argument), no randomness. The live dispatcher and the
trace-driven simulator drive the same ``Scheduler``.
"""

from gpusched.core.cluster import ClusterState, NodeState
from gpusched.core.errors import CoreError, InvalidDecision, InvalidParameter, UnknownName
from gpusched.core.model import (
    Allocation,
    Decision,
    Job,
    JobState,
    NodeSpec,
    ParkNode,
    PendingReason,
    Place,
    PowerState,
    Preempt,
    Request,
    WakeNode,
)
from gpusched.core.outlook import DEMAND_SERIES, DemandOutlook, StepForecast, arrivals_series
from gpusched.core.params import Params
from gpusched.core.placement import PLACEMENTS, Placement, make_placement
from gpusched.core.policies import POLICIES, Oracle, Policy, make_policy
from gpusched.core.power import EnergyMeter, PowerModel
from gpusched.core.reasons import never_fits
from gpusched.core.reservations import Reservation
from gpusched.core.runtime import RuntimePredictor
from gpusched.core.scheduler import CycleResult, Scheduler

__all__ = [
    "DEMAND_SERIES",
    "PLACEMENTS",
    "POLICIES",
    "Allocation",
    "ClusterState",
    "CoreError",
    "CycleResult",
    "Decision",
    "DemandOutlook",
    "EnergyMeter",
    "InvalidDecision",
    "InvalidParameter",
    "Job",
    "JobState",
    "NodeSpec",
    "NodeState",
    "Oracle",
    "Params",
    "ParkNode",
    "PendingReason",
    "Place",
    "Placement",
    "Policy",
    "PowerModel",
    "PowerState",
    "Preempt",
    "Request",
    "Reservation",
    "RuntimePredictor",
    "Scheduler",
    "StepForecast",
    "UnknownName",
    "WakeNode",
    "arrivals_series",
    "make_placement",
    "make_policy",
    "never_fits",
]
