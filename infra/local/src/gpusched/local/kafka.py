"""A real Apache Kafka cluster (KRaft) on 127.0.0.1 of one or three nodes, for development
and tests.

    python -m gpusched.local.kafka up      # resolve jars, format, start, wait, create topics
    python -m gpusched.local.kafka down    # stop by PID (SIGTERM, then SIGKILL)
    python -m gpusched.local.kafka status
    python -m gpusched.local.kafka up --brokers 3   # three nodes, topics RF 3, min ISR 2

Each node is one process, broker and controller at once. Node ``i`` (from 1) listens for
clients on ``port + 2 (i - 1)`` and for its controller quorum on the port after; with
three nodes the quorum has three voters, internal topics and the deployment's topics get
three replicas and ``min.insync.replicas=2``, so the cluster loses nothing acknowledged
(``acks=all``) and goes on serving while any one node is down. ``GPUSCHED_LOCAL_KAFKA_BROKERS``
(or ``--brokers``) must be chosen before the state folder is first formatted; the nodes of
a three-node cluster keep their state in ``<state>/node-<i>``, and later commands on that
folder (``down``, ``status``) find them without being told.

The broker's jars come from Maven Central through ``mvn`` (pom.xml, shipped beside this
module) into the git-ignored ``.cache/kafka/libs`` once; later starts download nothing.
State (data, PID, log, config) lives in ``var/kafka``. ``up`` on a running broker only
ensures the topics; a PID file whose process is gone (``kill -9``) is removed and the
broker restarted on the same data. Where ``KAFKA_BOOTSTRAP_SERVERS`` is set, that broker
is used and none started.

With ``--auth`` (or ``GPUSCHED_LOCAL_KAFKA_AUTH=scram``) the client listener asks for
SASL/SCRAM-SHA-256 and an ACL authorizer decides what each principal may do (nothing
unless granted). Four principals are created when the data directory is formatted, with
random passwords kept in ``<state>/credentials.json`` (mode 0600): ``admin`` (super user),
``gpusched-services`` (the platform's services: every topic and group of the deployment),
``gpusched-api`` (writes the jobs and control topics, reads control and control status)
and ``gpusched-reader`` (integrators: read every topic, groups named ``<prefix>reader*``).
``GPUSCHED_LOCAL_KAFKA_AUTH`` must be chosen before the data directory is first
formatted. The controller listener (broker to controller, inside the one process) is
authenticated with SASL/PLAIN as ``admin``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from hashlib import sha256
from importlib import resources
from pathlib import Path

from gpusched.contracts import CONTROL, CONTROL_STATUS, JOBS, ContractError, KafkaSettings
from gpusched.contracts.provision import ensure_topics
from gpusched.local.procs import LocalError, cache_dir, pid_alive, port_open, stop_pid, var_dir

__all__ = ["BrokerError", "LocalBroker", "external_bootstrap"]

KAFKA_VERSION_MARKER = "4.1.1"  # keep in step with <kafka.version> in pom.xml
PRINCIPALS = ("admin", "gpusched-services", "gpusched-api", "gpusched-reader")
_SCRAM = "SCRAM-SHA-256"


class BrokerError(LocalError):
    """The local broker could not be prepared, started or stopped; the message says why."""


def external_bootstrap() -> str | None:
    """The broker named by KAFKA_BOOTSTRAP_SERVERS, when the environment names one."""
    return os.environ.get("KAFKA_BOOTSTRAP_SERVERS") or None


class _Node:
    """One KRaft process (broker and controller) of the local cluster: its id, ports, files."""

    def __init__(self, state_dir: Path, node_id: int, port: int) -> None:
        self.node_id, self.state_dir = node_id, state_dir
        self.port, self.controller_port = port, port + 1
        self.pid_file = state_dir / "broker.pid"
        self.log_file = state_dir / "broker.log"
        self.config = state_dir / "server.properties"
        self.data_dir = state_dir / "data"

    def running_pid(self) -> int | None:
        """The node's PID if it runs; a stale PID file is removed."""
        if not self.pid_file.exists():
            return None
        pid = int(self.pid_file.read_text().strip() or 0)
        if pid and pid_alive(pid):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_file.exists():
            return "(no broker log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])


class LocalBroker:
    """A KRaft cluster of ``brokers`` nodes (1 or 3), its files under ``state_dir``, the
    first node listening on ``port``."""

    def __init__(
        self,
        state_dir: Path | None = None,
        cache: Path | None = None,
        port: int | None = None,
        heap: str | None = None,
        auth: bool | None = None,
        brokers: int | None = None,
    ) -> None:
        # Defaults come from the environment at construction, so a CLI run can be pointed
        # at another port and folder (GPUSCHED_LOCAL_KAFKA_PORT, _DIR, _HEAP, _BROKERS).
        env = os.environ
        state_dir = state_dir or Path(env.get("GPUSCHED_LOCAL_KAFKA_DIR", var_dir() / "kafka"))
        port = port or int(env.get("GPUSCHED_LOCAL_KAFKA_PORT", "19092"))
        heap = heap or env.get("GPUSCHED_LOCAL_KAFKA_HEAP", "512m")
        # an existing three-node state folder is a three-node cluster unless told otherwise
        made = "3" if (state_dir / "node-1").is_dir() else "1"
        brokers = brokers or int(env.get("GPUSCHED_LOCAL_KAFKA_BROKERS", made))
        if brokers not in (1, 3):
            raise BrokerError(f"a local cluster has 1 or 3 nodes, not {brokers}")
        if auth is None:
            auth = env.get("GPUSCHED_LOCAL_KAFKA_AUTH", "none") == "scram"
        self.auth = auth
        self.state_dir = state_dir
        self.libs = (cache or cache_dir() / "kafka") / "libs"
        self.heap = heap
        self.nodes = (
            [_Node(state_dir, 1, port)]
            if brokers == 1
            else [_Node(state_dir / f"node-{i}", i, port + 2 * (i - 1)) for i in range(1, 4)]
        )
        self.credentials_file = state_dir / "credentials.json"

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def pid_file(self) -> Path:
        """The first node's PID file."""
        return self.nodes[0].pid_file

    @property
    def log_file(self) -> Path:
        """The first node's log."""
        return self.nodes[0].log_file

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def replication(self) -> tuple[int, int]:
        """(replication factor, min.insync.replicas) of the topics on this cluster."""
        return (1, 1) if len(self.nodes) == 1 else (3, 2)

    # -- jars -----------------------------------------------------------------
    def resolve_jars(self) -> None:
        """Copy the broker's jars from Maven Central into the cache, once."""
        pom_xml = (resources.files("gpusched.local") / "pom.xml").read_bytes()
        marker = self.libs / f".complete-{KAFKA_VERSION_MARKER}-{sha256(pom_xml).hexdigest()[:12]}"
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
        """The first running node's PID; None when no node runs (stale PID files are
        removed)."""
        pids = [pid for n in self.nodes if (pid := n.running_pid()) is not None]
        return pids[0] if pids else None

    def stopped_nodes(self) -> list[_Node]:
        """The nodes that do not run."""
        return [n for n in self.nodes if n.running_pid() is None]

    def _java(
        self, main: str, *args: str, heap: str = "256m", node: _Node | None = None
    ) -> list[str]:
        logs = (node or self.nodes[0]).state_dir / "log4j2.properties"
        return [
            "java",
            f"-Xmx{heap}",
            "-Xms64m",
            "-XX:+UseSerialGC",
            f"-Dlog4j2.configurationFile={logs}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _write_config(self, node: _Node) -> None:
        node.state_dir.mkdir(parents=True, exist_ok=True)
        client = "SASL_PLAINTEXT" if self.auth else "PLAINTEXT"
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        rf, isr = self.replication
        lines = [
            "process.roles=broker,controller",
            f"node.id={node.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners={client}://127.0.0.1:{node.port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners={client}://127.0.0.1:{node.port}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map={client}:{client},CONTROLLER:{client}",
            f"inter.broker.listener.name={client}",
            f"log.dirs={node.data_dir}",
            "num.partitions=3",
            f"default.replication.factor={rf}",
            f"min.insync.replicas={isr}",
            f"offsets.topic.replication.factor={rf}",
            "offsets.topic.num.partitions=6",
            f"transaction.state.log.replication.factor={rf}",
            f"transaction.state.log.min.isr={isr}",
            f"share.coordinator.state.topic.replication.factor={rf}",
            f"share.coordinator.state.topic.min.isr={isr}",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            "message.max.bytes=2097152",
            "log.cleaner.dedupe.buffer.size=16777216",
        ]
        if self.auth:
            admin = self.credentials()["admin"]
            scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
            plain = "org.apache.kafka.common.security.plain.PlainLoginModule"
            lines += [
                f"sasl.enabled.mechanisms={_SCRAM}",
                f"sasl.mechanism.inter.broker.protocol={_SCRAM}",
                f"listener.name.sasl_plaintext.{_SCRAM.lower()}.sasl.jaas.config={scram} "
                f'required username="admin" password="{admin}";',
                "sasl.mechanism.controller.protocol=PLAIN",
                "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
                f"listener.name.controller.plain.sasl.jaas.config={plain} required "
                f'username="admin" password="{admin}" user_admin="{admin}";',
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users=User:admin",
                "allow.everyone.if.no.acl.found=false",
            ]
        node.config.write_text("\n".join([*lines, ""]))
        (node.state_dir / "log4j2.properties").write_text(
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

    def credentials(self) -> dict[str, str]:
        """principal -> password of a broker with authentication (made on first use)."""
        if not self.credentials_file.exists():
            if any((n.data_dir / "meta.properties").exists() for n in self.nodes):
                raise BrokerError(
                    f"the broker data in {self.state_dir} was formatted without "
                    "authentication; use another GPUSCHED_LOCAL_KAFKA_DIR or `make clean`"
                )
            self.state_dir.mkdir(parents=True, exist_ok=True)
            self.credentials_file.touch(mode=0o600)
            made = {name: secrets.token_urlsafe(24) for name in PRINCIPALS}
            self.credentials_file.write_text(json.dumps(made, indent=2) + "\n")
        known: dict[str, str] = json.loads(self.credentials_file.read_text())
        return known

    def client_env(self, principal: str) -> dict[str, str]:
        """The environment that points a gpusched client at this broker as ``principal``."""
        env = {"KAFKA_BOOTSTRAP_SERVERS": self.bootstrap}
        if self.auth:
            env.update(
                GPUSCHED_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
                GPUSCHED_KAFKA_SASL_MECHANISM=_SCRAM,
                GPUSCHED_KAFKA_SASL_USERNAME=principal,
                GPUSCHED_KAFKA_SASL_PASSWORD=self.credentials()[principal],
            )
        return env

    def settings(self, principal: str = "admin") -> KafkaSettings:
        """Client settings for this broker, as ``principal`` where it asks for one."""
        env = self.client_env(principal)
        return KafkaSettings.model_validate(
            {
                "KAFKA_BOOTSTRAP_SERVERS": env["KAFKA_BOOTSTRAP_SERVERS"],
                "kafka_security_protocol": env.get("GPUSCHED_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT"),
                "kafka_sasl_username": env.get("GPUSCHED_KAFKA_SASL_USERNAME"),
                "kafka_sasl_password": env.get("GPUSCHED_KAFKA_SASL_PASSWORD"),
            }
        )

    def provision(self, prefix: str = "") -> list[str]:
        """Create the deployment's topics under ``prefix`` where missing, replicated as
        this cluster allows (``replication``), and grant their ACLs; the topics created."""
        rf, isr = self.replication
        created = ensure_topics(self.settings(), prefix, replication_factor=rf, min_insync=isr)
        self.grant(prefix)
        return created

    def grant(self, prefix: str = "") -> None:
        """The ACLs of the deployment whose topics start with ``prefix`` (with auth)."""
        if not self.auth:
            return
        admin = self.state_dir / "admin.properties"
        admin.touch(mode=0o600)
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule"
        admin.write_text(
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={_SCRAM}\n"
            f'sasl.jaas.config={scram} required username="admin" '
            f'password="{self.credentials()["admin"]}";\n'
        )
        for acl in _acls(prefix):
            proc = subprocess.run(
                self._java(
                    "org.apache.kafka.tools.AclCommand",
                    "--bootstrap-server",
                    self.bootstrap,
                    "--command-config",
                    str(admin),
                    "--add",
                    *acl,
                ),
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise BrokerError(f"adding ACL {acl} failed:\n{proc.stdout}{proc.stderr}")

    def _format(self) -> None:
        """Format every node's storage not yet formatted, with one cluster id."""
        todo = [n for n in self.nodes if not (n.data_dir / "meta.properties").exists()]
        if not todo:
            return
        if len(todo) < len(self.nodes):
            raise BrokerError(
                f"some nodes of the cluster in {self.state_dir} are formatted and some not; "
                "use another GPUSCHED_LOCAL_KAFKA_DIR or `make clean`"
            )
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
        users = []
        if self.auth:
            for name, password in self.credentials().items():
                users += ["--add-scram", f"{_SCRAM}=[name={name},password={password}]"]
        for node in todo:
            self._write_config(node)
            proc = subprocess.run(
                self._java(
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(node.config),
                    *users,
                    node=node,
                ),
                capture_output=True,
                text=True,
            )
            if proc.returncode != 0:
                raise BrokerError(f"formatting storage failed:\n{proc.stdout}{proc.stderr}")

    def log_tail(self, lines: int = 40) -> str:
        """The end of every node's log."""
        if len(self.nodes) == 1:
            return self.nodes[0].log_tail(lines)
        return "\n".join(f"-- node {n.node_id}:\n{n.log_tail(lines)}" for n in self.nodes)

    def up(self, timeout_s: float = 90.0) -> bool:
        """Start every node that does not run; wait until all of them answer metadata. True
        if any was started."""
        down = self.stopped_nodes()
        for node in down:
            # A node just killed (kill -9) may hold its port for a moment while it dies.
            deadline = time.monotonic() + 10
            while port_open(node.port) and time.monotonic() < deadline:
                time.sleep(0.2)
            if port_open(node.port):
                raise BrokerError(
                    f"port {node.port} is taken by a process that is not this broker "
                    f"(no live PID in {node.pid_file}); stop it or set GPUSCHED_LOCAL_KAFKA_PORT"
                )
        started: list[tuple[_Node, subprocess.Popen[bytes]]] = []
        if down:
            self.resolve_jars()
            self._format()
        for node in down:
            self._write_config(node)
            with node.log_file.open("ab") as log:
                proc = subprocess.Popen(
                    self._java("kafka.Kafka", str(node.config), heap=self.heap, node=node),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            node.pid_file.write_text(f"{proc.pid}\n")
            started.append((node, proc))
        self._wait_ready(timeout_s, started)
        return bool(down)

    def _wait_ready(
        self, timeout_s: float, started: list[tuple[_Node, subprocess.Popen[bytes]]]
    ) -> None:
        """Wait until the cluster answers metadata with every node registered."""
        from aiokafka.admin import AIOKafkaAdminClient

        async def answers() -> bool:
            admin = AIOKafkaAdminClient(**self.settings().client_options(), request_timeout_ms=3000)
            try:
                await admin.start()
                cluster = await admin.describe_cluster()
                return len(cluster["brokers"]) == len(self.nodes)
            except Exception:
                return False
            finally:
                await admin.close()

        quiet = logging.getLogger("aiokafka")  # "Unable connect" while nodes start
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for node, proc in started:
                    if proc.poll() is not None:
                        node.pid_file.unlink(missing_ok=True)
                        raise BrokerError(
                            f"the broker exited with code {proc.returncode}; log tail:\n"
                            f"{self.log_tail()}"
                        )
                if any(port_open(n.port) for n in self.nodes) and asyncio.run(answers()):
                    return
                time.sleep(0.3)
        finally:
            quiet.setLevel(level)
        raise BrokerError(
            f"the broker did not answer within {timeout_s}s; log tail:\n{self.log_tail()}"
        )

    def down(self, timeout_s: float = 30.0) -> bool:
        """Stop every node by PID: SIGTERM, then SIGKILL. True if one was running."""
        running = [(n, pid) for n in self.nodes if (pid := n.running_pid()) is not None]
        for _, pid in running:  # all at once, or the last of a quorum waits for the others
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for node, pid in running:
            stop_pid(pid, max(deadline - time.monotonic(), 0.1))
            node.pid_file.unlink(missing_ok=True)
        return bool(running)


def _acls(prefix: str) -> list[list[str]]:
    """AclCommand arguments: what each principal of the deployment under ``prefix`` may do."""
    topics = (
        ["--topic", prefix, "--resource-pattern-type", "prefixed"] if prefix else ["--topic", "*"]
    )
    groups = (
        ["--group", prefix, "--resource-pattern-type", "prefixed"] if prefix else ["--group", "*"]
    )

    def principal(name: str, *operations: str) -> list[str]:
        return [
            "--allow-principal",
            f"User:{name}",
            *(a for op in operations for a in ("--operation", op)),
        ]

    def named(*bases: str) -> list[str]:
        return [a for base in bases for a in ("--topic", f"{prefix}{base}")]

    return [
        [*principal("gpusched-services", "All"), *topics],
        [*principal("gpusched-services", "All"), *groups],
        [
            *principal(
                "gpusched-services", "Create", "Describe", "DescribeConfigs", "IdempotentWrite"
            ),
            "--cluster",
        ],
        [*principal("gpusched-api", "Write", "Describe"), *named(JOBS.base, CONTROL.base)],
        [*principal("gpusched-api", "Read", "Describe"), *named(CONTROL.base, CONTROL_STATUS.base)],
        [*principal("gpusched-api", "Describe"), *topics],  # the console's lag and DLQ sizes
        [*principal("gpusched-api", "Describe"), *groups],
        [*principal("gpusched-reader", "Read", "Describe"), *topics],
        [
            *principal("gpusched-reader", "Read"),
            "--group",
            f"{prefix}reader",
            "--resource-pattern-type",
            "prefixed",
        ],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status", "topics"])
    parser.add_argument("--prefix", default="", help="topic prefix for 'up' and 'topics'")
    parser.add_argument(
        "--auth",
        action="store_true",
        help="SASL/SCRAM and ACLs (also GPUSCHED_LOCAL_KAFKA_AUTH=scram); credentials in "
        "<state>/credentials.json",
    )
    parser.add_argument(
        "--brokers",
        type=int,
        choices=[1, 3],
        help="nodes of the cluster (also GPUSCHED_LOCAL_KAFKA_BROKERS; default 1); with 3 the "
        "topics get 3 replicas and min.insync.replicas=2",
    )
    args = parser.parse_args(argv)
    external = external_bootstrap()
    try:
        broker = LocalBroker(auth=True if args.auth else None, brokers=args.brokers)
    except LocalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
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
            created = broker.provision(args.prefix)
            state = "started" if started else "already running"
            print(f"kafka {state} at {broker.bootstrap}; created {len(created)} topics")
        elif args.command == "down":
            print("kafka stopped" if broker.down() else "kafka was not running")
        elif args.command == "topics":
            created = broker.provision(args.prefix)
            print(f"created {len(created)} topics")
        else:
            pids = [f"{pid}" if (pid := n.running_pid()) else "stopped" for n in broker.nodes]
            pid = broker.running_pid()
            print(
                f"kafka running, pid {', '.join(pids)}, at {broker.bootstrap}"
                if pid
                else "kafka not running"
            )
            return 0 if pid else 3
    except (LocalError, ContractError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
