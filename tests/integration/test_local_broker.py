"""The local broker's lifecycle: idempotent start, recovery after kill -9, clean stop."""

from __future__ import annotations

import os
import random
import signal
import socket
from pathlib import Path

import pytest

from local_broker import REPO, LocalBroker, ensure_topics, external_bootstrap, load_topic_specs

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
    # A broker of its own (own port and data) so the session broker is not disturbed;
    # the jar cache is the shared one, so nothing is downloaded again.
    broker = LocalBroker(
        state_dir=tmp_path / "kafka", cache_dir=REPO / ".cache" / "kafka", port=_free_port_pair()
    )
    try:
        assert broker.up() is True
        pid = broker.running_pid()
        assert pid is not None
        created = ensure_topics(broker.bootstrap)
        assert len(created) == len(load_topic_specs())

        assert broker.up() is False  # second start: no-op
        assert broker.running_pid() == pid

        os.killpg(pid, signal.SIGKILL)
        assert broker.up() is True  # stale PID file handled, same data recovered
        assert broker.running_pid() not in (None, pid)
        assert ensure_topics(broker.bootstrap) == []  # the topics survived
    finally:
        broker.down()
    assert broker.running_pid() is None
    assert not broker.pid_file.exists()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", broker.port)) != 0
