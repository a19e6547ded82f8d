"""Running the pipeline's services as real processes in tests, and querying what they wrote."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from gpusched.contracts.provision import ensure_topics
from gpusched.local.procs import free_port, free_ports, gpusched_executable

__all__ = [
    "Pipeline",
    "free_port",
    "free_ports",
    "fresh_prefix",
    "metric_samples",
    "produce",
    "write_cluster",
]

T = TypeVar("T")
GPUSCHED = gpusched_executable()


def fresh_prefix(bootstrap: str) -> str:
    """A new topic prefix with every gpusched topic (and DLQ) created under it."""
    prefix = f"t{uuid.uuid4().hex[:10]}."
    ensure_topics(bootstrap, prefix)
    return prefix


def metric_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """A service's /metrics: (sample name, sorted labels) -> value."""
    text = httpx.get(url, timeout=5).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def write_cluster(
    path: Path, nodes: int, gpus_per_node: int, model: str = "V100", name: str = "n"
) -> Path:
    lines = ["node_id,gpu_type,num_gpu,cpu_milli,memory_mib"]
    lines += [f"{name}{i:04d},{model},{gpus_per_node},96000,786432" for i in range(nodes)]
    path.write_text("\n".join(lines) + "\n")
    return path


async def _produce(bootstrap: str, messages: Iterable[tuple[str, bytes | None, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000)
    await producer.start()
    try:
        for topic, key, value in messages:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def produce(bootstrap: str, messages: Iterable[tuple[str, bytes | None, bytes]]) -> None:
    """Send raw messages (topic, key, value) and wait until the broker has them."""
    asyncio.run(_produce(bootstrap, list(messages)))


@dataclass
class Pipeline:
    """The services of one test: same broker, topic prefix, store and SQL port."""

    bootstrap: str
    prefix: str
    workdir: Path
    sql_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": self.bootstrap,
            "GPUSCHED_TOPIC_PREFIX": self.prefix,
            "GPUSCHED_STORE_DSN": f"chdb://{self.workdir / 'clickhouse'}",
            "GPUSCHED_SINK_SQL_PORT": str(self.sql_port),
            "GPUSCHED_STORE_SQL_URL": f"http://127.0.0.1:{self.sql_port}",
            "GPUSCHED_SINK_FLUSH_S": "0.5",
            "GPUSCHED_PROCESSOR_DATA_DIR": str(self.workdir / "processor"),
            "GPUSCHED_PROCESSOR_PRIORITY_INTERVAL_S": "1",
            "GPUSCHED_API_TOKENS_FILE": str(self.workdir / "tokens.json"),
        }

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start ``gpusched <name> <args>``; its output goes to <workdir>/<name>.log."""
        return self.start_as(name, name, *args, **env)

    def start_as(self, label: str, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start ``gpusched <name> <args>`` under ``label`` (several of one service), its
        output in <workdir>/<label>.log."""
        log = (self.workdir / f"{label}.log").open("ab")
        proc = subprocess.Popen(
            [str(GPUSCHED), name, *args],
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[label] = proc
        return proc

    def start_sink(self) -> None:
        """Start the sink and wait until its SQL endpoint answers."""
        self.start("sink")
        self.wait_for("the sink's SQL endpoint", lambda: self.scalar("SELECT 1") == 1, 60)

    def start_api(self, **env: str) -> str:
        """Start the REST API on a free port; its base URL once it answers."""
        port = free_port()
        self.start("api", "--port", str(port), **env)
        base = f"http://127.0.0.1:{port}"
        self.wait_for("the API", lambda: httpx.get(f"{base}/healthz").status_code == 200, 60)
        return base

    def token(self, *args: str) -> str:
        """A new API token (``gpusched token create ARGS``), as printed once."""
        out = self.run("token", "create", *args)
        (token,) = [line for line in out.splitlines() if line.startswith("gst_")]
        return token

    def run(self, name: str, *args: str, timeout: float = 120, **env: str) -> str:
        """Run ``gpusched <name> <args>`` to completion; its output (raises if it failed)."""
        code, out = self._run(name, args, timeout, env)
        assert code == 0, f"gpusched {name} failed ({code}):\n{out}"
        return out

    def run_failing(self, name: str, *args: str, timeout: float = 120, **env: str) -> str:
        """Run ``gpusched <name> <args>``, which must fail (exit 1 or 2); its output."""
        code, out = self._run(name, args, timeout, env)
        assert code in (1, 2), f"gpusched {name} exited {code}, not 1 or 2:\n{out}"
        return out

    def _run(
        self, name: str, args: tuple[str, ...], timeout: float, env: dict[str, str]
    ) -> tuple[int, str]:
        done = subprocess.run(
            [str(GPUSCHED), name, *args],
            env={**self.env, **env},
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        return done.returncode, done.stdout.decode() + done.stderr.decode()

    def kill(self, name: str) -> None:
        """SIGKILL a service (a crash: nothing is flushed)."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        for proc in list(self.procs.values()):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for name, proc in list(self.procs.items()):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            del self.procs[name]

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def sql_answer(self, query: str) -> dict[str, Any]:
        """The sink SQL endpoint's answer: columns, types, rows."""
        response = httpx.post(
            f"http://127.0.0.1:{self.sql_port}/sql", content=query.encode(), timeout=60
        )
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer

    def sql(self, query: str) -> list[list[Any]]:
        """Rows of a query through the sink's SQL endpoint."""
        rows: list[list[Any]] = self.sql_answer(query)["rows"]
        return rows

    def scalar(self, query: str) -> Any:
        return self.sql(query)[0][0]

    def wait_for(self, what: str, check: Callable[[], T], timeout: float = 120.0) -> T:
        """Poll ``check`` until its answer is true, and return that answer; fail naming
        ``what`` and the services' log tails."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                answer = check()
                if answer:
                    return answer
            except (httpx.HTTPError, AssertionError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}\n{self.tails()}")

    def tails(self) -> str:
        """The last lines of the sink's and the processor workers' logs."""
        logs = sorted(self.workdir.glob("*.log"))
        names = [f.stem for f in logs if f.stem == "sink" or f.stem.startswith("process")]
        return "\n".join(f"--- {n}\n{self.log(n)[-3000:]}" for n in names)
