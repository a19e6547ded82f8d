"""gpusched.sim: trace readers, the discrete-event simulator, metrics and reports."""

from gpusched.sim.engine import JobOutcome, RunResult, Simulation
from gpusched.sim.errors import SimError, TraceError
from gpusched.sim.metrics import jain, percentile, summarize
from gpusched.sim.replay import EXPERIMENTS, replay
from gpusched.sim.traces import TraceJob, load_cluster, load_jobs, traces_dir

__all__ = [
    "EXPERIMENTS",
    "JobOutcome",
    "RunResult",
    "SimError",
    "Simulation",
    "TraceError",
    "TraceJob",
    "jain",
    "load_cluster",
    "load_jobs",
    "percentile",
    "replay",
    "summarize",
    "traces_dir",
]
