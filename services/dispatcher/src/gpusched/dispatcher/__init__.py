"""gpusched.dispatcher: the core's scheduling cycle on a live cluster, through one Backend
Protocol (a simulated cluster, Slurm, Kubernetes)."""

from gpusched.dispatcher.app import run_dispatcher
from gpusched.dispatcher.backend import (
    AlreadyPlaced,
    Backend,
    BackendError,
    BackendEvent,
    BackendJob,
    BackendNode,
    JobArrived,
    JobStep,
    NodePower,
    NotPlaceable,
    PolledLog,
)
from gpusched.dispatcher.dispatcher import Dispatcher, DispatcherStats
from gpusched.dispatcher.kubernetes_backend import KubernetesBackend
from gpusched.dispatcher.settings import DispatcherSettings
from gpusched.dispatcher.sim_backend import SimBackend
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
    "JobArrived",
    "JobStep",
    "KubernetesBackend",
    "NodePower",
    "NotPlaceable",
    "PolledLog",
    "SimBackend",
    "SlurmBackend",
    "run_dispatcher",
]
