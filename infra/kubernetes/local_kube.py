"""A real Kubernetes control plane on this machine: etcd and kube-apiserver, no kubelet.

etcd comes from Debian (``etcd-server``, installed when missing). kube-apiserver is built
from the k8s.io/kubernetes Go module (``build_apiserver``: the module's staging
packages are pinned to their published versions, since a module download leaves them
out) into ``~/.cache/gpusched/`` once per machine (~8 min on 2 cores). No container
runtime can run here, so there is no kubelet: tests create Node objects that advertise
GPUs and play the kubelet's part for pods (their status) themselves, saying so.

    python infra/kubernetes/local_kube.py up DIR
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["KUBE_VERSION", "KubeError", "LocalKube", "build_apiserver"]

KUBE_VERSION = "v1.34.4"
TOKEN = "gpusched-test-token"


class KubeError(RuntimeError):
    """The control plane could not be built or started; the message says why."""


def _cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpusched"


def build_apiserver(version: str = KUBE_VERSION) -> Path:
    """kube-apiserver of ``version``, built once per machine with the Go toolchain."""
    binary = _cache() / f"kube-apiserver-{version}"
    if binary.exists():
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise KubeError("building kube-apiserver needs the Go toolchain (`go`), not found")
    work = _cache() / f"kube-build-{version}"
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOFLAGS": "-mod=mod"}

    def go_run(*args: str) -> str:
        done = subprocess.run([go, *args], cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise KubeError(f"go {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    module = go_run("mod", "download", "-json", f"k8s.io/kubernetes@{version}")
    source = Path(__import__("json").loads(module)["Dir"])
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalKube:
    workdir: Path
    etcd_port: int = field(default_factory=_free_port)
    port: int = field(default_factory=_free_port)
    pids: dict[str, int] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    token = TOKEN

    def up(self, timeout_s: float = 90.0) -> None:
        """Start every daemon; if one fails, stop those already started and raise."""
        try:
            self._start(timeout_s)
        except BaseException:
            self.down()  # a fixture whose set-up fails never reaches its tear-down
            raise

    def _start(self, timeout_s: float = 90.0) -> None:
        if not shutil.which("etcd"):
            done = subprocess.run(
                ["apt-get", "install", "-y", "--no-install-recommends", "etcd-server"],
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise KubeError(f"installing etcd-server failed: {done.stderr[-1000:]}")
        apiserver = build_apiserver()
        w = self.workdir
        (w / "certs").mkdir(parents=True, exist_ok=True)
        key, pub = w / "sa.key", w / "sa.pub"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True,
                           capture_output=True)  # fmt: skip
            subprocess.run(["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)],
                           check=True, capture_output=True)  # fmt: skip
        (w / "tokens.csv").write_text(f'{TOKEN},admin,admin,"system:masters"\n')
        self._spawn(
            "etcd",
            ["etcd", "--data-dir", str(w / "etcd"),
             "--listen-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.etcd_port}",
             "--listen-peer-urls", f"http://127.0.0.1:{_free_port()}"],
        )  # fmt: skip
        self._spawn(
            "kube-apiserver",
            [str(apiserver), f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
             f"--secure-port={self.port}", "--bind-address=127.0.0.1",
             f"--cert-dir={w / 'certs'}", f"--token-auth-file={w / 'tokens.csv'}",
             "--authorization-mode=AlwaysAllow",
             "--service-account-issuer=https://kubernetes.default.svc",
             f"--service-account-key-file={pub}", f"--service-account-signing-key-file={key}",
             "--service-cluster-ip-range=10.96.0.0/24",
             "--disable-admission-plugins=ServiceAccount"],  # no controller makes accounts
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._ready():
                return
            for name, pid in self.pids.items():
                if not _alive(pid):
                    raise KubeError(f"{name} exited:\n{self.log_tail()}")
            time.sleep(0.5)
        raise KubeError(f"kube-apiserver not ready in {timeout_s:.0f} s:\n{self.log_tail()}")

    def _ready(self) -> bool:
        done = subprocess.run(
            ["curl", "-sk", "-H", f"Authorization: Bearer {TOKEN}", f"{self.url}/readyz"],
            capture_output=True,
            text=True,
        )
        return done.stdout.strip() == "ok"

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = (self.workdir / f"{name}.log").open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.pids[name] = proc.pid

    def log_tail(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}"
            for p in sorted(self.workdir.glob("*.log"))
        )

    def down(self) -> None:
        for name in ("kube-apiserver", "etcd"):
            pid = self.pids.pop(name, None)
            if pid and _alive(pid):
                os.killpg(pid, signal.SIGTERM)
                for _ in range(50):
                    if not _alive(pid):
                        break
                    time.sleep(0.1)
                if _alive(pid):
                    os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return waited == 0


if __name__ == "__main__":
    kube = LocalKube(Path(sys.argv[2]))
    kube.up()
    print(f"kube-apiserver at {kube.url}, token {kube.token}")
    input("Enter stops it ")
    kube.down()
