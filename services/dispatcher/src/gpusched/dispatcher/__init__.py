"""gpusched.dispatcher: the core's scheduling cycle on a live cluster, through one Backend
Protocol (simulated cluster now; Slurm and Kubernetes to come)."""

from gpusched.dispatcher.app import Dispatcher, DispatcherStats, run_dispatcher
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    Backend,
    BackendError,
    BackendEvent,
    BackendJob,
    BackendNode,
    NotPlaceable,
)
from gpusched.dispatcher.settings import DispatcherSettings, SimClusterSettings
from gpusched.dispatcher.sim_backend import SimBackend
from gpusched.dispatcher.simcluster import SimCluster, simcluster_app, trace_durations

__all__ = [
    "AlreadyPlaced",
    "Backend",
    "BackendError",
    "BackendEvent",
    "BackendJob",
    "BackendNode",
    "Dispatcher",
    "DispatcherSettings",
    "DispatcherStats",
    "NotPlaceable",
    "SimBackend",
    "SimCluster",
    "SimClusterSettings",
    "run_dispatcher",
    "simcluster_app",
    "trace_durations",
]
