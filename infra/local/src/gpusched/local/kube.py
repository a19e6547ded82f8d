"""A real Kubernetes control plane on this machine: etcd and kube-apiserver, no kubelet.

etcd comes from Debian (``etcd-server``, installed when missing). kube-apiserver is built
from the k8s.io/kubernetes Go module (``build_apiserver``: the module's staging
packages are pinned to their published versions, since a module download leaves them
out) into ``~/.cache/gpusched/`` once per machine (~8 min on 2 cores). No container
runtime can run here, so there is no kubelet: tests create Node objects that advertise
GPUs and play the kubelet's part for pods (their status) themselves, saying so.

    python -m gpusched.local.kube DIR
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpusched.local.procs import Daemons, LocalError, apt_install, free_port, machine_cache_dir

__all__ = ["KUBE_VERSION", "KubeError", "LocalKube", "apiserver_buildable", "build_apiserver"]

KUBE_VERSION = "v1.34.4"
TOKEN = "gpusched-test-token"


class KubeError(LocalError):
    """The control plane could not be built or started; the message says why."""


def _go() -> Path | None:
    go = Path(shutil.which("go") or "/usr/local/go/bin/go")
    return go if go.exists() else None


def _binary(version: str) -> Path:
    return machine_cache_dir() / f"kube-apiserver-{version}"


def apiserver_buildable(version: str = KUBE_VERSION) -> bool:
    """Whether kube-apiserver is built already or the Go toolchain can build it."""
    return _binary(version).exists() or _go() is not None


def build_apiserver(version: str = KUBE_VERSION) -> Path:
    """kube-apiserver of ``version``, built once per machine with the Go toolchain."""
    binary = _binary(version)
    if binary.exists():
        return binary
    go = _go()
    if go is None:
        raise KubeError("building kube-apiserver needs the Go toolchain (`go`), not found")
    work = machine_cache_dir() / f"kube-build-{version}"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}

    def go_run(*args: str) -> str:
        done = subprocess.run([str(go), *args], cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise KubeError(f"go {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    module = go_run("mod", "download", "-json", f"k8s.io/kubernetes@{version}")
    source = Path(json.loads(module)["Dir"])
    staging = sorted(
        {
            line.split()[0]
            for line in (source / "go.mod").read_text().splitlines()
            if "=> ./staging/" in line
        }
    )
    minor = "v0." + version.removeprefix("v1.")
    lines = ["module gpusched.local/kubeapiserver", "", "go 1.24", "",
             f"require k8s.io/kubernetes {version}", ""]  # fmt: skip
    lines += [f"replace {m} => {m} {minor}" for m in staging]
    (work / "go.mod").write_text("\n".join(lines) + "\n")
    (work / "main.go").write_text(
        'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver/app"\n\nfunc main() {}\n'
    )
    go_run("mod", "tidy")
    go_run("build", "-o", str(binary), "k8s.io/kubernetes/cmd/kube-apiserver")
    return binary


class LocalKube(Daemons):
    """etcd and kube-apiserver under ``workdir``, with static tokens: ``token`` is an
    admin's (group system:masters). Every request is allowed unless ``rbac``: then RBAC
    decides, and ``service_accounts`` ("namespace/name") each get a token of their own
    (``account_token``) that authenticates as that ServiceAccount."""

    token = TOKEN
    up_timeout_s = 90.0  # kube-apiserver takes longer than Slurm's daemons

    def __init__(
        self, workdir: Path, rbac: bool = False, service_accounts: tuple[str, ...] = ()
    ) -> None:
        super().__init__(workdir / "log")
        self.workdir = workdir
        self.rbac = rbac
        self.accounts = {a: f"sa-{i}-{os.urandom(8).hex()}" for i, a in enumerate(service_accounts)}
        self.etcd_port = free_port()
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _start(self, timeout_s: float) -> None:
        if not shutil.which("etcd"):
            apt_install(["etcd-server"])
        apiserver = build_apiserver()
        w = self.workdir
        (w / "certs").mkdir(parents=True, exist_ok=True)
        key, pub = w / "sa.key", w / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                           capture_output=True)  # fmt: skip
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
                           check=True, capture_output=True)  # fmt: skip
        lines = [f'{TOKEN},admin,admin,"system:masters"']
        for account, token in self.accounts.items():
            namespace, name = account.split("/")
            groups = f"system:serviceaccounts,system:serviceaccounts:{namespace}"
            lines.append(f'{token},system:serviceaccount:{namespace}:{name},{token},"{groups}"')
        (w / "tokens.csv").write_text("\n".join(lines) + "\n")
        self.spawn(
            "etcd",
            ["etcd", "--data-dir", str(w / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{free_port()}"],
        )  # fmt: skip
        self.spawn(
            "kube-apiserver",
            [str(apiserver), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
             f"--secure-port={self.port}", "--bind-address=127.0.0.1",
             f"--cert-dir={w / 'certs'}", f"--token-auth-file={w / 'tokens.csv'}",
             f"--authorization-mode={'RBAC' if self.rbac else 'AlwaysAllow'}",
             "--service-account-issuer=https://kubernetes.default.svc",
             f"--service-account-key-file={pub}", f"--service-account-signing-key-file={key}",
             "--service-cluster-ip-range=10.96.0.0/24",
             "--disable-admission-plugins=ServiceAccount"],  # no controller makes accounts
        )  # fmt: skip
        self.wait(self._ready, "kube-apiserver", timeout_s)

    def account_token(self, account: str) -> str:
        """The bearer token of the ServiceAccount ``account`` ("namespace/name")."""
        return self.accounts[account]

    def _ready(self) -> bool:
        done = subprocess.run(
            ["curl", "-sk", "-H", f"Authorization: Bearer {TOKEN}", f"{self.url}/readyz"],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() == "ok"


if __name__ == "__main__":
    kube = LocalKube(Path(sys.argv[1]))
    kube.up()
    print(f"kube-apiserver at {kube.url}, token {kube.token}")
    input("Enter stops it ")
    kube.down()
