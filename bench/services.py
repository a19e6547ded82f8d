"""What the service benchmarks share: a broker, `gpusched` processes, quantiles."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpusched.contracts.provision import ensure_topics
from gpusched.local.kafka import LocalBroker, external_bootstrap
from gpusched.local.procs import gpusched_executable

GPUSCHED = gpusched_executable()


@contextmanager
def broker_and_prefix() -> Iterator[tuple[str, str]]:
    """(bootstrap, a fresh topic prefix with every topic): KAFKA_BOOTSTRAP_SERVERS, or the
    local broker (stopped after if this started it)."""
    broker, started = None, False
    bootstrap = external_bootstrap()
    if not bootstrap:
        broker = LocalBroker()
        started = broker.up()
        bootstrap = broker.bootstrap
    prefix = f"b{uuid.uuid4().hex[:8]}."
    ensure_topics(bootstrap, prefix)
    try:
        yield bootstrap, prefix
    finally:
        if broker is not None and started:
            broker.down()


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``gpusched <args>`` in its own process group, output to ``log``."""
    return subprocess.Popen(
        [str(GPUSCHED), *args],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]
