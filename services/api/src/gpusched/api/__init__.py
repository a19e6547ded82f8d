"""gpusched.api: the REST API (job submission and status), served by `gpusched api`."""

from gpusched.api.jobs import (
    EventLogUnreachable,
    InvalidJob,
    SubmitJob,
    cluster_models,
    job_status,
    publish,
)
from gpusched.api.listing import NodeRow, QueueRow, list_nodes, list_queue
from gpusched.api.rest import rest_app
from gpusched.api.settings import ApiSettings

__all__ = [
    "ApiSettings",
    "EventLogUnreachable",
    "InvalidJob",
    "NodeRow",
    "QueueRow",
    "SubmitJob",
    "cluster_models",
    "job_status",
    "list_nodes",
    "list_queue",
    "publish",
    "rest_app",
]
