"""The local broker's lifecycle through its command line (what `make kafka-up` runs):
idempotent start, recovery after kill -9, clean stop."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpusched.local.kafka import external_bootstrap
from gpusched.local.procs import pid_alive, port_open

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.skipif(
        external_bootstrap() is not None,
        reason="KAFKA_BOOTSTRAP_SERVERS is set: the local broker is not managed",
    ),
]


def _free_port_pair() -> int:
    """A port P below the ephemeral range with P and P+1 both free (broker, controller)."""
    for port in range(random.randrange(20000, 29000, 2), 30000, 2):
        free = True
        for p in (port, port + 1):
            with socket.socket() as s:
                free = free and s.connect_ex(("127.0.0.1", p)) != 0
        if free:
            return port
    raise RuntimeError("no free port pair in 20000-30000")


def test_up_is_idempotent_survives_kill_9_and_down_leaves_nothing(tmp_path: Path) -> None:
    # A broker of its own (own port and folder) so the session broker is not disturbed;
    # the jar cache is the shared one, so nothing is downloaded again.
    port = _free_port_pair()
    env = {
        **os.environ,
        "GPUSCHED_LOCAL_KAFKA_PORT": str(port),
        "GPUSCHED_LOCAL_KAFKA_DIR": str(tmp_path / "kafka"),
    }
    pid_file = tmp_path / "kafka" / "broker.pid"

    def cli(command: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gpusched.local.kafka", command],
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    try:
        assert "kafka started" in cli("up")
        pid = int(pid_file.read_text())
        assert "already running" in cli("up")  # second start: no-op
        assert int(pid_file.read_text()) == pid

        os.kill(pid, signal.SIGKILL)
        out = cli("up")  # stale PID file handled, same data recovered
        assert "kafka started" in out
        assert "created 0 topics" in out  # the topics survived
        new_pid = int(pid_file.read_text())
        assert new_pid != pid
    finally:
        stopped = cli("down")
    assert "kafka stopped" in stopped
    assert not pid_file.exists()
    deadline = time.monotonic() + 10
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not port_open(port)
    # Gone, or a zombie waiting for a parent that does not reap (PID 1 in some sandboxes).
    assert not pid_alive(new_pid)
