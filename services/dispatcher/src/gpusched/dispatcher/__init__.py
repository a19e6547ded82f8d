"""gpusched.dispatcher: the core's scheduling cycle on a live cluster, through one Backend
Protocol (a simulated cluster, Slurm, Kubernetes)."""

from gpusched.dispatcher.app import Dispatcher, DispatcherStats, run_dispatcher
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    Backend,
    BackendError,
    BackendEvent,
    BackendJob,
    BackendNode,
    NotPlaceable,
    PolledLog,
)
from gpusched.dispatcher.kubernetes_backend import KubernetesBackend
from gpusched.dispatcher.settings import DispatcherSettings, SimClusterSettings
from gpusched.dispatcher.sim_backend import SimBackend
from gpusched.dispatcher.simcluster import SimCluster, simcluster_app, trace_durations
from gpusched.dispatcher.slurm_backend import SlurmBackend

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
    "KubernetesBackend",
    "NotPlaceable",
    "PolledLog",
    "SimBackend",
    "SimCluster",
    "SimClusterSettings",
    "SlurmBackend",
    "run_dispatcher",
    "simcluster_app",
    "trace_durations",
]
