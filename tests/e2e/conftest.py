"""The running platform as `make run` starts it (`gpusched up`), on the session's broker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.pipeline import Pipeline, free_port, fresh_prefix, write_cluster


@dataclass
class Platform:
    pipeline: Pipeline
    api: str
    run_dir: Path
    token: str  # an admin token of the API

    def pid(self, service: str) -> int:
        return int((self.run_dir / f"{service}.pid").read_text())

    def client(self) -> httpx.Client:
        """A client of the API presenting the admin token."""
        return httpx.Client(
            base_url=self.api, timeout=30, headers={"Authorization": f"Bearer {self.token}"}
        )


def start_up(p: Pipeline, nodes: int, **env: str) -> tuple[str, Path]:
    """`gpusched up` as `make run` starts it: ``nodes`` x 8 V100, no trace feeder,
    cluster time compressed 60x (a job not in a trace runs 120 s of cluster time, 2 s of
    wall time); (the API's URL, its run folder) once the API answers."""
    cluster = write_cluster(p.workdir / "c.cluster.csv", nodes=nodes, gpus_per_node=8)
    api_port, sim_port = free_port(), free_port()
    run_dir = p.workdir / "run"
    p.start(
        "up",
        "--cluster", str(cluster), "--trace", "none", "--speed", "60",
        "--run-dir", str(run_dir), "--api-port", str(api_port), "--sim-port", str(sim_port),
        "--collect-interval", "2",
        **{"GPUSCHED_SIMCLUSTER_DEFAULT_DURATION_S": "120", **env},
    )  # fmt: skip
    api = f"http://127.0.0.1:{api_port}"

    def api_up() -> bool:
        if "up" not in p.alive():
            raise RuntimeError(f"gpusched up exited:\n{p.log('up')[-3000:]}")
        try:
            return httpx.get(f"{api}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    p.wait_for("the API", api_up, 240)
    return api, run_dir


@pytest.fixture(scope="module")
def platform_env() -> dict[str, str]:
    """Settings of the platform's services (a test module may override this fixture)."""
    return {}


@pytest.fixture(scope="module")
def platform(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory, platform_env: dict[str, str]
) -> Iterator[Platform]:
    """The platform of `start_up` with 16 nodes, on the session's broker and a prefix of
    its own: one per test module (starting it takes ~50 s), so the tests of a module
    share it and tell their jobs apart by id."""
    prefix = fresh_prefix(kafka_bootstrap)
    p = Pipeline(kafka_bootstrap, prefix, tmp_path_factory.mktemp("platform"))
    try:
        api, run_dir = start_up(p, nodes=16, **platform_env)
        p.wait_for(
            "the live view of all 16 nodes",
            lambda: p.scalar("SELECT uniqExact(node_id) FROM node_views") == 16,
            120,
        )
        token = p.token("--role", "admin", "--name", "e2e")
        yield Platform(p, api, run_dir, token)
    finally:
        p.stop()
