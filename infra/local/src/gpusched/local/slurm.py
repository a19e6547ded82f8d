"""A real Slurm 22.05 cluster on this machine: munged, slurmctld, one slurmd per node
(fake GPUs: GRES device files that are symlinks to /dev/null) and slurmrestd with JWT.

Debian's packages (`slurm-wlm slurmrestd munge slurm-wlm-jwt-plugin`) are installed by
``ensure_packages`` when missing. Everything lives under one work directory (its own
munge key and socket, config, state, logs); ``down`` stops the daemons it started and
the job steps they left.
Used by the Slurm backend's tests; notes in ../shared/notes/local-components.md.

    python -m gpusched.local.slurm DIR     # prints the environment to use it
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from gpusched.local.procs import (
    Daemons,
    LocalError,
    apt_install,
    free_port,
    port_open,
    stop_processes,
)

__all__ = ["LocalSlurm", "SlurmError", "SlurmNode", "ensure_packages"]

PACKAGES = ("slurm-wlm", "slurmrestd", "munge", "slurm-wlm-jwt-plugin")


class SlurmError(LocalError):
    """Slurm could not be installed or started; the message says which part and why."""


@dataclass(frozen=True)
class SlurmNode:
    name: str
    gpus: int
    gpu_type: str = "v100"
    cpus: int = 32
    memory_mib: int = 256_000


def ensure_packages() -> None:
    """Install Debian's Slurm packages if a daemon is missing (idempotent; needs root)."""
    if not all(shutil.which(b) for b in ("slurmctld", "slurmd", "slurmrestd", "munged")):
        apt_install(PACKAGES)


class LocalSlurm(Daemons):
    """munged, slurmctld, a slurmd per node and slurmrestd, all under ``workdir``."""

    stop_order = ("slurmrestd",)  # then the slurmds, slurmctld, munged (reverse start order)
    log_suffix = ".out"  # the daemons' own logs (*.log) sit in the same folder

    def __init__(self, workdir: Path, nodes: list[SlurmNode]) -> None:
        super().__init__(workdir / "log")
        self.workdir = workdir
        self.nodes = nodes
        self.ctld_port = free_port()
        self.rest_port = free_port()
        # one port per slurmd, each found free (ctld_port + k could belong to anyone)
        self.node_ports = {n.name: free_port() for n in nodes}

    @property
    def conf(self) -> Path:
        return self.workdir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """What a Slurm CLI call needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def _write(self) -> None:
        w = self.workdir
        for d in ("state", "spool", "log", "dev", "run"):
            (w / d).mkdir(parents=True, exist_ok=True)
        key = w / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
            key.chmod(0o600)
        jwt = w / "jwt.key"
        if not jwt.exists():
            jwt.write_bytes(secrets.token_bytes(32))
            jwt.chmod(0o600)
        lines = [
            "ClusterName=gpusched",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={w / 'state'}",
            f"SlurmdSpoolDir={w / 'spool'}/%n",
            f"SlurmctldPidFile={w / 'run'}/slurmctld.pid",
            f"SlurmdPidFile={w / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={w / 'log'}/slurmctld.log",
            f"SlurmdLogFile={w / 'log'}/slurmd-%n.log",
            f"AuthInfo=socket={w / 'run'}/munge.socket",
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={jwt}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SlurmdParameters=config_overrides",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=1,bf_interval=1",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=600",
            "KillWait=2",
        ]
        gres = ["AutoDetect=off"]
        for n in self.nodes:
            lines.append(
                f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.node_ports[n.name]} CPUs={n.cpus} RealMemory={n.memory_mib} "
                f"Gres=gpu:{n.gpu_type}:{n.gpus} State=UNKNOWN"
            )
            dev = w / "dev" / n.name
            dev.mkdir(parents=True, exist_ok=True)
            for g in range(n.gpus):
                link = dev / f"nvidia{g}"
                if not link.is_symlink():
                    link.symlink_to("/dev/null")  # a device file: regular files are refused
            gres.append(
                f"NodeName={n.name} Name=gpu Type={n.gpu_type} File={dev}/nvidia[0-{n.gpus - 1}]"
            )
        lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (w / "gres.conf").write_text("\n".join(gres) + "\n")

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(
            ["scontrol", *args], env=self.env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise SlurmError(f"scontrol {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def token(self, lifespan_s: int = 86400) -> str:
        out = self.scontrol("token", "username=root", f"lifespan={lifespan_s}")
        return out.strip().split("=", 1)[1]

    def _start(self, timeout_s: float) -> None:
        ensure_packages()
        self._write()
        w = self.workdir
        self.spawn(
            "munged",
            ["munged", "-F", "--key-file", str(w / "munge.key"),
             "--socket", str(w / "run" / "munge.socket"),
             "--pid-file", str(w / "run" / "munged.pid"),
             "--log-file", str(w / "log" / "munged.log"),
             "--seed-file", str(w / "run" / "munged.seed"), "--force"],
        )  # fmt: skip
        self.wait(lambda: (w / "run" / "munge.socket").exists(), "munged", timeout_s)
        self.spawn("slurmctld", ["slurmctld", "-D", "-c", "-f", str(self.conf)], self.env)
        self.wait(lambda: self._ok("ping"), "slurmctld", timeout_s)
        for n in self.nodes:
            self.spawn(
                f"slurmd-{n.name}", ["slurmd", "-D", "-N", n.name, "-f", str(self.conf)], self.env
            )
        self.wait(self._nodes_idle, "slurmd (all nodes idle)", timeout_s)
        rest_env = {**self.env, "SLURM_JWT": "daemon", "SLURMRESTD_SECURITY": "disable_user_check"}
        self.spawn(
            "slurmrestd",
            ["slurmrestd", "-f", str(self.conf), "-a", "rest_auth/jwt",
             "-s", "openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38",
             f"127.0.0.1:{self.rest_port}"],
            rest_env,
        )  # fmt: skip
        self.wait(lambda: port_open(self.rest_port), "slurmrestd", timeout_s)

    def down(self, grace_s: float = 5.0) -> None:
        """Stop the daemons, then the job steps left running: a slurmstepd puts itself
        in a session of its own, so stopping its slurmd does not reach it."""
        super().down(grace_s)
        stop_processes(self.steps(), grace_s)

    def steps(self) -> list[int]:
        """The pids of this cluster's slurmstepd processes (by their ``SLURM_CONF``)."""
        marker = f"SLURM_CONF={self.conf}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                if (proc / "comm").read_text().strip() != "slurmstepd":
                    continue
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                continue  # it ended, or is not ours to read
        return found

    def _ok(self, *args: str) -> bool:
        try:
            out = self.scontrol(*args)
        except SlurmError:
            return False
        return "UP" in out or bool(out)

    def _nodes_idle(self) -> bool:
        done = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True
        )
        states = [line.split()[1] for line in done.stdout.splitlines() if line.strip()]
        return len(states) == len(self.nodes) and all(s.startswith("idle") for s in states)


if __name__ == "__main__":
    slurm = LocalSlurm(Path(sys.argv[1]), [SlurmNode(f"node{i}", 4) for i in range(1, 4)])
    slurm.up()
    print(f"export SLURM_CONF={slurm.conf}  # slurmrestd at {slurm.rest_url}")
    input("Slurm is up; Enter stops it ")
    slurm.down()
