"""``Dependency``: one line in the log when a dependency goes away and one when it is back.

A service that retries a broker or a store on every request would otherwise log an error
per retry; with this it logs the transition only, and its health endpoint can report the
state (``as_dict``). ``watch_kafka`` asks the broker for its metadata every few seconds
and reports to a ``Dependency``; ``HealthServer`` answers ``GET /healthz`` with the state
of a service's dependencies from a thread of its own (so it answers while the service's
loop is busy), 200 when all are up and 503 when one is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpusched.contracts.settings import KafkaSettings, client_options

__all__ = ["Dependency", "HealthServer", "kafka_dependency", "service_health", "watch_kafka"]

# aiokafka's loggers log every failed retry while a broker is away (hundreds of lines a
# minute per client), and clickhouse-connect's (through urllib3) every failed call while a
# store server is; the ``Dependency`` they serve says it once instead (watched by
# ``watch_kafka`` for the broker), and these are held back from the moment one exists
_RETRY_LOGGERS = (
    "aiokafka",
    "aiokafka.conn",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.producer.sender",
    "clickhouse_connect.driver._backend.http_sync",
    "urllib3.connectionpool",
)
_RETRY_NOISE = (
    "Connect call failed",
    "Unable to update metadata",
    "NodeNotReadyError",
    "KafkaConnectionError",
    "Marking the coordinator dead",
    "is either not started or not valid",
    "Unexpected Http Driver Exception",
    "after connection broken by",
)


class _RetryNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(noise in message for noise in _RETRY_NOISE)


_FILTER = _RetryNoise()


class Dependency:
    """The state of one dependency (``name`` at ``address``) as its callers saw it last."""

    def __init__(self, name: str, address: str, log: logging.Logger) -> None:
        self.name, self.address, self.log = name, address, log
        for logger in _RETRY_LOGGERS:  # this says it once; theirs are held back
            logging.getLogger(logger).addFilter(_FILTER)  # a filter is added only once
        self.up = True
        self.error: str | None = None
        self.since = time.time()

    def failed(self, error: str) -> None:
        """A call to it failed; logged only when it was up until now."""
        self.error = error
        if self.up:
            self.up, self.since = False, time.time()
            self.log.warning("%s at %s is unreachable: %s", self.name, self.address, error)

    def answered(self) -> None:
        """A call to it succeeded; logged only when it was down until now."""
        if not self.up:
            self.log.warning(
                "%s at %s is back after %.0f s", self.name, self.address, time.time() - self.since
            )
            self.up, self.since, self.error = True, time.time(), None

    def as_dict(self) -> dict[str, object]:
        state: dict[str, object] = {"state": "up" if self.up else "down", "address": self.address}
        if self.error and not self.up:
            state["error"] = self.error
        return state


def kafka_dependency(kafka: KafkaSettings, log: logging.Logger) -> Dependency:
    """The event log as a dependency of a service."""
    return Dependency("the event log (Kafka)", kafka.kafka_bootstrap_servers, log)


async def watch_kafka(kafka: KafkaSettings, dependency: Dependency, every_s: float = 2.0) -> None:
    """Ask the broker for its metadata every ``every_s`` and report to ``dependency``;
    aiokafka's own per-retry connection errors are held back from this process's log, so
    that it says once that the broker went and once that it is back. Runs until
    cancelled."""
    client = AIOKafkaClient(**client_options(kafka), request_timeout_ms=int(every_s * 1000))
    started = False
    try:
        while True:
            try:
                async with asyncio.timeout(every_s):
                    if not started:
                        await client.bootstrap()
                        started = True
                    await client.fetch_all_metadata()
                dependency.answered()
            except (TimeoutError, KafkaError, OSError) as exc:
                dependency.failed(str(exc) or f"no answer within {every_s:g} s")
            await asyncio.sleep(every_s)
    finally:
        await client.close()


class HealthServer:
    """``GET /healthz`` on ``host:port``: ``service`` and each dependency's state; and
    ``GET /metrics``: the process's Prometheus metrics."""

    def __init__(
        self, service: str, dependencies: Sequence[Dependency], port: int, host: str = "127.0.0.1"
    ) -> None:
        self.service, self.dependencies = service, dependencies
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/metrics":  # Prometheus' text format (gpusched.contracts.metrics)
                    self._send(200, generate_latest(), CONTENT_TYPE_LATEST)
                    return
                if path != "/healthz":
                    self.send_error(404, "only /healthz and /metrics are served here")
                    return
                up, report = server.report()
                self._send(200 if up else 503, json.dumps(report).encode(), "application/json")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass  # probes every few seconds would flood the service's log

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def report(self) -> tuple[bool, dict[str, Any]]:
        up = all(d.up for d in self.dependencies)
        return up, {
            "service": self.service,
            "status": "ok" if up else "degraded",
            "dependencies": {d.name: d.as_dict() for d in self.dependencies},
        }

    def __enter__(self) -> HealthServer:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@asynccontextmanager
async def service_health(
    kafka: KafkaSettings, service: str, log: logging.Logger, *others: Dependency
) -> AsyncIterator[Dependency]:
    """While inside: the broker watched (the event log ``Dependency`` is yielded) and, when
    ``kafka.health_port`` is set, ``GET /healthz`` served with it and ``others``."""
    event_log = kafka_dependency(kafka, log)
    watcher = asyncio.create_task(watch_kafka(kafka, event_log))
    with contextlib.ExitStack() as stack:
        if kafka.health_port:
            stack.enter_context(HealthServer(service, [event_log, *others], kafka.health_port))
        try:
            yield event_log
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
