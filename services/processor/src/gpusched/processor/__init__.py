"""gpusched.processor: the Faust app keeping the live view and recomputing priorities."""

from gpusched.processor.app import Processor, run_worker
from gpusched.processor.priorities import PriorityResult, compute_priorities
from gpusched.processor.records import GpuReading, JobRecord, NodeRecord, fold_job
from gpusched.processor.settings import ProcessorSettings
from gpusched.processor.view import LiveView

__all__ = [
    "GpuReading",
    "JobRecord",
    "LiveView",
    "NodeRecord",
    "PriorityResult",
    "Processor",
    "ProcessorSettings",
    "compute_priorities",
    "fold_job",
    "run_worker",
]
