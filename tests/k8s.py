"""The dispatcher's ServiceAccount and role from k8s/base, on a local API server."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from gpusched.local.kube import LocalKube

REPO = Path(__file__).resolve().parents[1]
DISPATCHER = "gpusched/gpusched-dispatcher"  # namespace/name of k8s/base/rbac.yaml's account
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"}


def kubectl(kube: LocalKube, token: str | None = None) -> list[str]:
    """kubectl pointed at ``kube`` with ``token`` (the admin's by default)."""
    return ["kubectl", f"--server={kube.url}", f"--token={token or kube.token}",
            "--insecure-skip-tls-verify=true"]  # fmt: skip


def kustomize(folder: Path) -> str:
    """The manifests of a kustomization (``kubectl kustomize``), as YAML."""
    return subprocess.run(
        ["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=True,
        timeout=60,
    ).stdout  # fmt: skip


def apply_rbac(kube: LocalKube) -> None:
    """Create k8s/base's namespace, the dispatcher's ServiceAccount, its ClusterRole and
    the binding, as rendered by kustomize (as an admin)."""
    rendered = kustomize(REPO / "k8s" / "base")
    wanted = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    subprocess.run(
        [*kubectl(kube), "apply", "--server-side", "-f", "-"],
        input=yaml.safe_dump_all(wanted), capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
