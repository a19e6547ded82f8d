"""``make_backend``: the backend the settings name, connected."""

from __future__ import annotations

import os

from kubernetes_asyncio import client, config

from gpusched.dispatcher.backend import Backend
from gpusched.dispatcher.kubernetes_backend import KubernetesBackend
from gpusched.dispatcher.settings import DispatcherSettings
from gpusched.dispatcher.sim_backend import SimBackend
from gpusched.dispatcher.slurm_backend import SlurmBackend

__all__ = ["make_backend"]


async def make_backend(settings: DispatcherSettings) -> Backend:
    if settings.dispatcher_backend == "slurm":
        token = settings.dispatcher_slurm_token or os.environ.get("SLURM_JWT", "")
        job_s = settings.dispatcher_slurm_job_s
        return SlurmBackend(
            settings.dispatcher_slurm_url,
            token,
            dict(os.environ),
            settings.dispatcher_slurm_partition,
            run_s=lambda _: job_s,
        )
    if settings.dispatcher_backend == "kubernetes":
        if settings.dispatcher_kube_url:
            cfg = client.Configuration(host=settings.dispatcher_kube_url)
            cfg.verify_ssl = settings.dispatcher_kube_verify_tls
            if settings.dispatcher_kube_token:
                cfg.api_key = {"BearerToken": settings.dispatcher_kube_token}
                cfg.api_key_prefix = {"BearerToken": "Bearer"}
            api = client.ApiClient(cfg)
        else:
            cfg = client.Configuration()
            if "KUBERNETES_SERVICE_HOST" in os.environ:  # in a pod: its ServiceAccount
                config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call,unused-ignore]
            else:
                await config.load_kube_config(client_configuration=cfg)
            api = client.ApiClient(cfg)
        return KubernetesBackend(api, settings.dispatcher_kube_scheduler_name)
    return SimBackend(settings.dispatcher_sim_url)
