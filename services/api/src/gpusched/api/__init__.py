"""gpusched.api: the REST API (job submission and status), served by `gpusched api`."""

from gpusched.api.jobs import InvalidJob, SubmitJob, cluster_models, job_status, publish
from gpusched.api.rest import rest_app
from gpusched.api.settings import ApiSettings

__all__ = [
    "ApiSettings",
    "InvalidJob",
    "SubmitJob",
    "cluster_models",
    "job_status",
    "publish",
    "rest_app",
]
