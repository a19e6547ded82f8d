"""gpusched.simcluster: a live simulated GPU cluster behind an HTTP API, run as its own
process (`gpusched simcluster`); the dispatcher's ``sim`` backend talks to it."""

from gpusched.simcluster.cluster import (
    ClusterEvent,
    PlaceBody,
    SimCluster,
    simcluster_app,
    trace_durations,
)
from gpusched.simcluster.settings import SimClusterSettings

__all__ = [
    "ClusterEvent",
    "PlaceBody",
    "SimCluster",
    "SimClusterSettings",
    "simcluster_app",
    "trace_durations",
]
