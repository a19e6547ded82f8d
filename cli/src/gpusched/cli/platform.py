"""``gpusched up``: the whole platform on one machine, as processes, until Ctrl-C.

It starts the local Kafka broker (unless KAFKA_BOOTSTRAP_SERVERS names one) and the
topics, then the sink, the processor, the forecaster, a simulated cluster, the
dispatcher, a simulated collector, the REST API and a trace feeder, each as
``gpusched <service>`` with its output in ``<run dir>/<service>.log`` and its pid in
``<run dir>/<service>.pid``. A service that dies is started again (a supervisor's
job), so killing the dispatcher mid-run is survivable, as a crash should be. Ctrl-C
(or SIGTERM) stops everything it started, in reverse order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import httpx
import typer
from rich.console import Console

from gpusched.api import ApiSettings
from gpusched.contracts import KafkaSettings
from gpusched.contracts.provision import ensure_topics
from gpusched.contracts.tokens import Role, TokenFile
from gpusched.local.kafka import BrokerError, LocalBroker
from gpusched.local.procs import free_port, gpusched_executable, var_dir
from gpusched.sim import traces_dir
from gpusched.store import StoreSettings

__all__ = ["up"]

console = Console(stderr=True)
GPUSCHED = gpusched_executable()


@dataclass
class Service:
    name: str
    args: list[str]
    ready: str | None = None  # URL that answers once the service is up
    env: dict[str, str] = field(default_factory=dict)  # over the platform's (its principal)
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0


_BROKER_RESTARTS = 10  # then the launcher gives up on the broker and says so
_BROKER_BACKOFF_S = (2.0, 60.0)  # first wait before a retry, and the longest


@dataclass
class Supervisor:
    run_dir: Path
    env: dict[str, str]
    services: list[Service] = field(default_factory=list)
    broker: LocalBroker | None = None  # the broker it started (None: someone else's)
    broker_restarts: int = 0
    _broker_retry_at: float = 0.0

    def start(self, service: Service, wait_s: float = 60.0) -> None:
        log = (self.run_dir / f"{service.name}.log").open("ab")
        service.proc = subprocess.Popen(
            [str(GPUSCHED), *service.args],
            env={**self.env, **service.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        (self.run_dir / f"{service.name}.pid").write_text(f"{service.proc.pid}\n")
        if service not in self.services:
            self.services.append(service)
        if service.ready:
            self._wait(service, wait_s)

    def _wait(self, service: Service, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            assert service.proc is not None
            if service.proc.poll() is not None:
                raise typer.Exit(self._failed(service))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(service.ready or "", timeout=2).status_code < 500:
                    return
            time.sleep(0.3)
        raise typer.Exit(self._failed(service))

    def _failed(self, service: Service) -> int:
        tail = (self.run_dir / f"{service.name}.log").read_text(errors="replace")[-2000:]
        console.print(f"[red]{service.name} did not start[/]; its log ends:\n{tail}")
        return 1

    def watch(self, stop: list[bool], one_shot: tuple[str, ...]) -> None:
        """Restart what dies (the broker it started, and services except one-shot ones)
        until ``stop[0]``."""
        while not stop[0]:
            self._keep_broker()
            for s in self.services:
                if s.proc is not None and s.proc.poll() is not None and s.name not in one_shot:
                    s.restarts += 1
                    console.print(
                        f"[yellow]{s.name} exited ({s.proc.returncode}); restart {s.restarts}[/]"
                    )
                    self.start(s, wait_s=120)
            time.sleep(0.5)

    def _keep_broker(self) -> None:
        """A broker (or a node of a local cluster) that died is started again on its data
        directory, with a growing back-off, at most ``_BROKER_RESTARTS`` times; the services
        reconnect by themselves."""
        broker = self.broker
        if broker is None or not broker.stopped_nodes():
            return
        if time.monotonic() < self._broker_retry_at:
            return
        if self.broker_restarts >= _BROKER_RESTARTS:
            console.print(
                f"[red]the Kafka broker at {broker.bootstrap} died {self.broker_restarts + 1} "
                f"times; not restarting it again (its log: {broker.log_file})[/]"
            )
            self.broker = None
            return
        self.broker_restarts += 1
        console.print(
            f"[yellow]the Kafka broker at {broker.bootstrap} is gone; restart "
            f"{self.broker_restarts} of {_BROKER_RESTARTS}[/]"
        )
        try:
            broker.up()
        except BrokerError as exc:
            first, longest = _BROKER_BACKOFF_S
            wait_s = min(first * 2 ** (self.broker_restarts - 1), longest)
            self._broker_retry_at = time.monotonic() + wait_s
            console.print(f"[red]the broker did not start ({exc}); next try in {wait_s:g} s[/]")
            return
        console.print(f"[green]the Kafka broker at {broker.bootstrap} is back[/]")

    def stop_all(self) -> None:
        for s in reversed(self.services):
            if s.proc is not None and s.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGTERM)
        for s in reversed(self.services):
            if s.proc is None:
                continue
            try:
                s.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(s.proc.pid, signal.SIGKILL)
                s.proc.wait(timeout=10)
            (self.run_dir / f"{s.name}.pid").unlink(missing_ok=True)


def up(
    cluster: Annotated[
        Path | None, typer.Option(help="*.cluster.csv of the simulated cluster")
    ] = None,
    trace: Annotated[
        str, typer.Option(help="*.jobs.csv fed as live load ('none': no feeder)")
    ] = "",
    speed: Annotated[
        float, typer.Option(help="time compression of the trace and the cluster")
    ] = 600.0,
    run_dir: Annotated[Path | None, typer.Option(help="logs and pids (default var/run)")] = None,
    api_port: Annotated[int, typer.Option(help="REST API port")] = 18080,
    sim_port: Annotated[int, typer.Option(help="simulated cluster port")] = 18200,
    collect_interval: Annotated[
        float, typer.Option(help="seconds between telemetry rounds")
    ] = 10.0,
) -> None:
    """Start the platform (broker, sink, processor, forecaster, simulated cluster,
    dispatcher, collector, API, trace feeder) and keep it up until Ctrl-C."""
    traces = traces_dir()
    cluster = cluster or traces / "openb.cluster.csv"
    feed_trace = (
        None if trace == "none" else Path(trace) if trace else traces / "openb_default.jobs.csv"
    )
    run_dir = run_dir or var_dir() / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    broker = local = None
    prefix = env.get("GPUSCHED_TOPIC_PREFIX", "")
    api_env: dict[str, str] = {}
    if not env.get("KAFKA_BOOTSTRAP_SERVERS"):
        local = LocalBroker()
        console.print("starting the local Kafka broker ...")
        started = local.up()
        broker = local if started else None  # already running: leave it running
        # with authentication (GPUSCHED_LOCAL_KAFKA_AUTH=scram) each service connects as
        # its principal: the API as gpusched-api, the others as gpusched-services
        env.update(local.client_env("gpusched-services"))
        api_env = local.client_env("gpusched-api")
        local.provision(prefix)
    else:
        ensure_topics(KafkaSettings(), prefix)  # someone else's broker, our credentials
    store = StoreSettings()
    sql_url = env.setdefault("GPUSCHED_STORE_SQL_URL", store.sql_url)
    env["GPUSCHED_DISPATCHER_SIM_URL"] = f"http://127.0.0.1:{sim_port}"
    api = f"http://127.0.0.1:{api_port}"
    sup = Supervisor(run_dir, env, broker=broker)
    services = [
        Service("sink", ["sink"], f"{sql_url}/sql?query=SELECT%201"),
        Service("process", ["process"]),
        Service("forecast", ["forecast", "serve"]),
        Service(
            "simcluster",
            [
                "simcluster",
                "--cluster",
                str(cluster),
                "--speed",
                str(speed),
                "--port",
                str(sim_port),
            ]
            + (["--trace", str(feed_trace)] if feed_trace else []),
            f"http://127.0.0.1:{sim_port}/info",
        ),
        Service("dispatch", ["dispatch"]),
        Service(
            "collect",
            [
                "collect",
                "--source",
                "simulated",
                "--cluster",
                str(cluster),
                "--interval",
                str(collect_interval),
            ],
        ),
        Service("api", ["api", "--port", str(api_port)], f"{api}/healthz", api_env),
    ]
    if feed_trace:
        services.append(Service("feed", ["feed", "--jobs", str(feed_trace), "--speed", str(speed)]))
    # every long-running service but the API (it has /readyz) serves GET /healthz: the
    # state of its dependencies
    health = {}
    for service in services:
        if service.name not in ("api", "simcluster", "feed"):
            port = free_port()
            service.env["GPUSCHED_HEALTH_PORT"] = str(port)
            health[service.name] = f"http://127.0.0.1:{port}/healthz"
    (run_dir / "health.json").write_text(json.dumps(health, indent=2) + "\n")
    # An admin token for this session, revoked when it stops; the children that call the
    # API (the CLI commands a user types in this shell) read GPUSCHED_TOKEN.
    tokens = TokenFile(ApiSettings().api_tokens_file)
    session, token = tokens.create(Role.ADMIN, name=f"session-{os.getpid()}-{int(time.time())}")
    env["GPUSCHED_TOKEN"] = token
    stop = [False]

    def on_signal(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        for service in services:
            console.print(f"starting {service.name} ...")
            sup.start(service)
        console.print(
            f"\n[bold green]gpusched is up[/] (logs and pids in {run_dir})\n"
            f"  console       {api}/console   (sign in with the admin token below)\n"
            f"  REST API      {api}/docs   (OpenAPI: {api}/openapi.json)\n"
            f"  admin token   {token}\n"
            f"                (this session only: export GPUSCHED_TOKEN=<it> for gpusched "
            f"cancel; curl -H 'Authorization: Bearer <it>'; more: gpusched token create)\n"
            f"  submit        gpusched submit --gpus 2 --tenant me   then   gpusched status <id>\n"
            f'  SQL           gpusched sql "SELECT type, count() FROM job_events GROUP BY type"\n'
            f"  cluster       http://127.0.0.1:{sim_port}/nodes\n"
            f"  health        {api}/readyz; the others' /healthz in {run_dir / 'health.json'}\n"
            + (
                f"  Kafka         SASL/SCRAM and ACLs; principals and passwords in "
                f"{local.credentials_file}\n"
                if local is not None and local.auth
                else ""
            )
            + "Ctrl-C stops everything it started.\n"
        )
        sup.watch(stop, one_shot=("feed",))
    finally:
        console.print("stopping ...")
        sup.stop_all()
        tokens.revoke(session.id)
        if broker is not None:
            broker.down()
