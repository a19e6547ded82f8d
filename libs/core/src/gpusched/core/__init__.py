"""gpusched.core: the pure scheduling core — typed values in, decisions out.

No I/O, no wall clock (time is an argument), no randomness. The live dispatcher and the
trace-driven simulator drive the same ``Scheduler``.
"""

from gpusched.core.cluster import ClusterState, NodeState
from gpusched.core.errors import (
    CoreError,
    InvalidDecision,
    InvalidParameter,
    NeedsOracle,
    UnknownName,
)
from gpusched.core.model import (
    Allocation,
    Decision,
    Job,
    JobState,
    NodeSpec,
    ParkNode,
    PendingCategory,
    PendingReason,
    Place,
    PowerState,
    Preempt,
    Request,
    WakeNode,
    held_on,
)
from gpusched.core.outlook import DEMAND_SERIES, DemandOutlook, StepForecast, arrivals_series
from gpusched.core.params import Params
from gpusched.core.placement import PLACEMENTS, Placement, make_placement, placement_name
from gpusched.core.policies import POLICIES, Oracle, Policy, live_policy, make_policy
from gpusched.core.power import EnergyMeter, PowerModel
from gpusched.core.reasons import never_fits
from gpusched.core.reservations import Reservation
from gpusched.core.runtime import RuntimePredictor
from gpusched.core.scheduler import MOVE_REASON, CycleResult, RecordedJob, Scheduler

__all__ = [
    "DEMAND_SERIES",
    "MOVE_REASON",
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
    "NeedsOracle",
    "NodeSpec",
    "NodeState",
    "Oracle",
    "Params",
    "ParkNode",
    "PendingCategory",
    "PendingReason",
    "Place",
    "Placement",
    "Policy",
    "PowerModel",
    "PowerState",
    "Preempt",
    "RecordedJob",
    "Request",
    "Reservation",
    "RuntimePredictor",
    "Scheduler",
    "StepForecast",
    "UnknownName",
    "WakeNode",
    "arrivals_series",
    "held_on",
    "live_policy",
    "make_placement",
    "make_policy",
    "never_fits",
    "placement_name",
]
