"""Process, port and package helpers shared by the local broker, Slurm and Kubernetes.

``Daemons`` is the part the Slurm and Kubernetes managers share: daemons started in their
own sessions with a log each, an ``up`` that stops what it started when a later step
fails, and a ``down`` that sends SIGTERM, then SIGKILL to what lingers.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gpusched.store import checkout_root

__all__ = [
    "Daemons",
    "LocalError",
    "apt_install",
    "cache_dir",
    "free_port",
    "free_ports",
    "gpusched_executable",
    "machine_cache_dir",
    "pid_alive",
    "port_open",
    "stop_pid",
    "stop_processes",
    "var_dir",
]


class LocalError(RuntimeError):
    """A local component could not be installed, started or stopped; the message says why."""


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs. A child of ours that exited is reaped; a zombie counts as gone."""
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass  # not our child: ask the kernel
    else:
        return waited == 0
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a process that binds it later."""
    return free_ports(1)


def free_ports(count: int) -> int:
    """A free port whose ``count - 1`` successors are free too (a local Kafka node listens
    on two ports, a three-node cluster on six), below the kernel's ephemeral range: there
    any process's outgoing connection could take the port before the process meant to
    listen on it binds it (CI saw "Address already in use" for a Kafka node, and a
    processor worker's health port refusing connections). Never the same port twice in
    one process, so ports asked for one after another differ though none is bound yet."""
    low, high = 20_000, _ephemeral_low() - count
    while True:
        ports = range(base := random.randrange(low, high), base + count)
        if _GIVEN.isdisjoint(ports) and all(_bindable(p) for p in ports):
            _GIVEN.update(ports)
            return base


_GIVEN: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def stop_pid(pid: int, grace_s: float) -> None:
    """SIGTERM ``pid``'s process group, then SIGKILL it if it outlives ``grace_s``."""
    if not pid_alive(pid):
        return
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if pid_alive(pid):
        os.killpg(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)


def stop_processes(pids: Iterable[int], grace_s: float) -> None:
    """SIGTERM each of ``pids`` (processes, not groups: for those that left the group
    ``stop_pid`` stops), then SIGKILL those that outlive ``grace_s``."""

    def send(sig: signal.Signals, targets: list[int]) -> None:
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    alive = [pid for pid in pids if pid_alive(pid)]
    send(signal.SIGTERM, alive)
    deadline = time.monotonic() + grace_s
    while (alive := [p for p in alive if pid_alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    send(signal.SIGKILL, alive)
    while alive := [p for p in alive if pid_alive(p)]:
        time.sleep(0.05)


def apt_install(packages: Iterable[str]) -> None:
    """Install Debian packages (idempotent; through ``sudo -n`` when not root)."""
    names = list(packages)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *names]
    if os.geteuid() != 0:
        cmd = ["sudo", "-n", *cmd]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LocalError(f"installing {' '.join(names)} failed:\n{done.stderr[-2000:]}")


def var_dir() -> Path:
    """Where local state (broker data, the embedded store) lives: ``<checkout>/var``."""
    return checkout_root() / "var"


def cache_dir() -> Path:
    """Downloads kept across runs of this checkout (the Kafka jars): ``<checkout>/.cache``."""
    return checkout_root() / ".cache"


def machine_cache_dir() -> Path:
    """Builds kept across checkouts of this machine (kube-apiserver): ~/.cache/gpusched."""
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpusched"


def gpusched_executable() -> Path:
    """The ``gpusched`` command of the running interpreter's environment."""
    return Path(sys.executable).parent / "gpusched"


class Daemons:
    """Daemons started in their own sessions, each logging to ``<name><log_suffix>``."""

    stop_order: tuple[str, ...] = ()  # names stopped first, in this order; the rest after
    log_suffix = ".log"
    up_timeout_s = 60.0  # how long ``up`` waits for each daemon by default

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.pids: dict[str, int] = {}

    def up(self, timeout_s: float | None = None) -> None:
        """Start every daemon; if one fails, stop those already started and raise."""
        try:
            self._start(timeout_s or self.up_timeout_s)
        except BaseException:
            self.down()  # a fixture whose set-up fails never reaches its tear-down
            raise

    def _start(self, timeout_s: float) -> None:
        raise NotImplementedError

    def spawn(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}{self.log_suffix}").open("ab") as log:
            proc = subprocess.Popen(
                cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.pids[name] = proc.pid

    def wait(self, check: Callable[[], bool], what: str, timeout_s: float) -> None:
        """Poll ``check`` until true; fail at once, with the logs, if a daemon exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            for name, pid in self.pids.items():
                if not pid_alive(pid):
                    raise LocalError(f"{name} exited while waiting for {what}:\n{self.log_tail()}")
            time.sleep(0.2)
        raise LocalError(f"{what} not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, chars: int = 1500) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-chars:]}"
            for p in sorted(self.log_dir.glob("*"))
            if p.is_file()
        )

    def down(self, grace_s: float = 5.0) -> None:
        """SIGTERM the daemons (``stop_order`` first), SIGKILL what lingers."""
        order = [n for n in self.stop_order if n in self.pids]
        order += [n for n in reversed(list(self.pids)) if n not in order]
        for name in order:
            stop_pid(self.pids.pop(name), grace_s)
