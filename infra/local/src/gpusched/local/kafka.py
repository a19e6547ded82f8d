"""A real single-node Apache Kafka broker (KRaft) on 127.0.0.1, for development and tests.

    python -m gpusched.local.kafka up      # resolve jars, format, start, wait, create topics
    python -m gpusched.local.kafka down    # stop by PID (SIGTERM, then SIGKILL)
    python -m gpusched.local.kafka status

The broker's jars come from Maven Central through ``mvn`` (pom.xml, shipped beside this
module) into the git-ignored ``.cache/kafka/libs`` once; later starts download nothing.
State (data, PID, log, config) lives in ``var/kafka``. ``up`` on a running broker only
ensures the topics; a PID file whose process is gone (``kill -9``) is removed and the
broker restarted on the same data. Where ``KAFKA_BOOTSTRAP_SERVERS`` is set, that broker
is used and none started.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

from gpusched.contracts import ContractError
from gpusched.contracts.provision import ensure_topics
from gpusched.local.procs import LocalError, cache_dir, pid_alive, port_open, stop_pid, var_dir

__all__ = ["BrokerError", "LocalBroker", "external_bootstrap"]

KAFKA_VERSION_MARKER = "4.1.1"  # keep in step with <kafka.version> in pom.xml


class BrokerError(LocalError):
    """The local broker could not be prepared, started or stopped; the message says why."""


def external_bootstrap() -> str | None:
    """The broker named by KAFKA_BOOTSTRAP_SERVERS, when the environment names one."""
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None


class LocalBroker:
    """One KRaft broker+controller, its files under ``state_dir``, listening on ``port``."""

    def __init__(
        self,
        state_dir: Path | None = None,
        cache: Path | None = None,
        port: int | None = None,
        heap: str | None = None,
    ) -> None:
        # Defaults come from the environment at construction, so a CLI run can be pointed
        # at another port and folder (GPUSCHED_LOCAL_KAFKA_PORT, _DIR, _HEAP).
        env = os.environ
        state_dir = state_dir or Path(env.get("GPUSCHED_LOCAL_KAFKA_DIR", var_dir() / "kafka"))
        port = port or int(env.get("GPUSCHED_LOCAL_KAFKA_PORT", "19092"))
        heap = heap or env.get("GPUSCHED_LOCAL_KAFKA_HEAP", "512m")
        self.state_dir = state_dir
        self.libs = (cache or cache_dir() / "kafka") / "libs"
        self.port = port
        self.controller_port = port + 1
        self.heap = heap
        self.pid_file = state_dir / "broker.pid"
        self.log_file = state_dir / "broker.log"
        self.config = state_dir / "server.properties"
        self.data_dir = state_dir / "data"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    # -- jars -----------------------------------------------------------------
    def resolve_jars(self) -> None:
        """Copy the broker's jars from Maven Central into the cache, once."""
        marker = self.libs / f".complete-{KAFKA_VERSION_MARKER}"
        if marker.exists():
            return
        if subprocess.run(["which", "mvn"], capture_output=True).returncode != 0:
            raise BrokerError("mvn (Apache Maven) is needed once to fetch the Kafka jars")
        self.libs.mkdir(parents=True, exist_ok=True)
        print(f"resolving Kafka {KAFKA_VERSION_MARKER} jars into {self.libs} ...", flush=True)
        with resources.as_file(resources.files("gpusched.local") / "pom.xml") as pom:
            proc = subprocess.run(
                ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                 "-DincludeScope=runtime", f"-DoutputDirectory={self.libs}"],
                capture_output=True,
                text=True,
            )  # fmt: skip
        if proc.returncode != 0:
            raise BrokerError(f"mvn could not resolve the Kafka jars:\n{proc.stdout}{proc.stderr}")
        marker.touch()

    # -- lifecycle ------------------------------------------------------------
    def running_pid(self) -> int | None:
        """The broker's PID if it runs; a stale PID file is removed."""
        if not self.pid_file.exists():
            return None
        pid = int(self.pid_file.read_text().strip() or 0)
        if pid and pid_alive(pid):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        return [
            "java",
            f"-Xmx{heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _write_config(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                    f"CONTROLLER://127.0.0.1:{self.controller_port}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                    "controller.listener.names=CONTROLLER",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "inter.broker.listener.name=PLAINTEXT",
                    f"log.dirs={self.data_dir}",
                    "num.partitions=3",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=6",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=false",
                    "message.max.bytes=2097152",
                    "log.cleaner.dedupe.buffer.size=16777216",
                    "",
                ]
            )
        )
        (self.state_dir / "log4j2.properties").write_text(
            "status = warn\n"
            "appender.out.type = Console\nappender.out.name = out\n"
            "appender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
            "rootLogger.level = info\nrootLogger.appenderRef.out.ref = out\n"
            "logger.kafka.name = kafka\nlogger.kafka.level = warn\n"
            "logger.server.name = kafka.server.KafkaRaftServer\nlogger.server.level = info\n"
            "logger.org.name = org.apache.kafka\nlogger.org.level = warn\n"
            "logger.state.name = state.change.logger\nlogger.state.level = warn\n"
        )

    def _format(self) -> None:
        if (self.data_dir / "meta.properties").exists():
            return
        cluster_id = (
            subprocess.run(
                self._java("kafka.tools.StorageTool", "random-uuid"),
                capture_output=True,
                text=True,
                check=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        proc = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config)
            ),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise BrokerError(f"formatting storage failed:\n{proc.stdout}{proc.stderr}")

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_file.exists():
            return "(no broker log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def up(self, timeout_s: float = 90.0) -> bool:
        """Start the broker unless it runs; wait until it answers metadata. True if started."""
        if self.running_pid() is not None:
            self._wait_ready(timeout_s)
            return False
        # A broker just killed (kill -9) may hold its port for a moment while it dies.
        deadline = time.monotonic() + 10
        while port_open(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if port_open(self.port):
            raise BrokerError(
                f"port {self.port} is taken by a process that is not this broker "
                f"(no live PID in {self.pid_file}); stop it or set GPUSCHED_LOCAL_KAFKA_PORT"
            )
        self.resolve_jars()
        self._write_config()
        self._format()
        with self.log_file.open("ab") as log:
            proc = subprocess.Popen(
                self._java("kafka.Kafka", str(self.config), heap=self.heap),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        self._wait_ready(timeout_s, proc)
        return True

    def _wait_ready(self, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        async def answers() -> bool:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000)
            try:
                await admin.start()
                await admin.describe_cluster()
                return True
            except Exception:
                return False
            finally:
                await admin.close()

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                raise BrokerError(
                    f"the broker exited with code {proc.returncode}; log tail:\n{self.log_tail()}"
                )
            if port_open(self.port) and asyncio.run(answers()):
                return
            time.sleep(0.3)
        raise BrokerError(
            f"the broker did not answer within {timeout_s}s; log tail:\n{self.log_tail()}"
        )

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop the broker by PID: SIGTERM, then SIGKILL. True if one was running."""
        pid = self.running_pid()
        if pid is None:
            return False
        stop_pid(pid, timeout_s)
        self.pid_file.unlink(missing_ok=True)
        return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status", "topics"])
    parser.add_argument("--prefix", default="", help="topic prefix for 'up' and 'topics'")
    args = parser.parse_args(argv)
    external = external_bootstrap()
    broker = LocalBroker()
    try:
        if external:
            if args.command in ("up", "topics"):
                created = ensure_topics(external, args.prefix)
                print(f"using KAFKA_BOOTSTRAP_SERVERS={external}; created {len(created)} topics")
            else:
                print(f"using KAFKA_BOOTSTRAP_SERVERS={external}; no local broker is managed")
            return 0
        if args.command == "up":
            started = broker.up()
            created = ensure_topics(broker.bootstrap, args.prefix)
            state = "started" if started else "already running"
            print(f"kafka {state} at {broker.bootstrap}; created {len(created)} topics")
        elif args.command == "down":
            print("kafka stopped" if broker.down() else "kafka was not running")
        elif args.command == "topics":
            created = ensure_topics(broker.bootstrap, args.prefix)
            print(f"created {len(created)} topics")
        else:
            pid = broker.running_pid()
            print(
                f"kafka running, pid {pid}, at {broker.bootstrap}" if pid else "kafka not running"
            )
            return 0 if pid else 3
    except (LocalError, ContractError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
