"""The container image, checked without a container engine (none runs here): the
Dockerfile's build stage is replayed — its COPY lines bring files from the checkout into
an empty tree, its `uv sync` steps install from that tree alone — and the environment
that results serves from an unrelated directory: `gpusched --help`, the migrations on a
fresh embedded store, and the sink consuming from the test broker for a few seconds."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from gpusched.contracts import JobEvent, JobEventType, JobRequest, encode
from gpusched.contracts.topics import JOBS
from tests.pipeline import free_port, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _build_stage(dockerfile: Path) -> list[tuple[str, str]]:
    """(instruction, arguments) of the stage named ``build``, continuation lines joined."""
    lines = dockerfile.read_text().replace("\\\n", " ").splitlines()
    steps: list[tuple[str, str]] = []
    inside = False
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, rest = line.strip().partition(" ")
        if instruction.upper() == "FROM":
            inside = rest.split()[-1] == "build"
            continue
        if inside:
            steps.append((instruction.upper(), rest.strip()))
    return steps


def _replay(steps: list[tuple[str, str]], tree: Path, venv: Path) -> None:
    """Do what the build stage does: COPY from the checkout (the context), ENV, RUN uv."""
    env = {**os.environ}
    env.pop("VIRTUAL_ENV", None)
    workdir = tree
    for instruction, args in steps:
        if instruction == "WORKDIR":
            workdir = tree
        elif instruction == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                env[key] = value
        elif instruction == "COPY" and not args.startswith("--from"):
            *sources, dest = args.split()
            for source in sources:
                origin, target = REPO / source, workdir / dest
                if origin.is_dir():
                    ignored = shutil.ignore_patterns("__pycache__", "*.pyc", "node_modules")
                    shutil.copytree(origin, target, dirs_exist_ok=True, ignore=ignored)
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, target / origin.name)
        elif instruction == "RUN":
            command = [a for a in shlex.split(args) if not a.startswith("--mount=")]
            assert command[:2] == ["uv", "sync"], f"a RUN step the test cannot replay: {args}"
            # where the image puts the venv, here; no bytecode and hard links: only speed
            env.update(UV_PROJECT_ENVIRONMENT=str(venv), UV_COMPILE_BYTECODE="0",
                       UV_LINK_MODE="hardlink")  # fmt: skip
            uv = shutil.which("uv")
            assert uv, "uv is needed (make install puts it on PATH)"
            done = subprocess.run(
                [uv, *command[1:]], cwd=workdir, env=env, capture_output=True, text=True,
                timeout=600, check=False,
            )  # fmt: skip
            assert done.returncode == 0, f"{args}:\n{done.stdout}{done.stderr}"


def test_image_environment_serves_from_anywhere(
    kafka_bootstrap: str, topic_prefix: str, tmp_path: Path
) -> None:
    steps = _build_stage(REPO / "Dockerfile")
    assert [a for i, a in steps if i == "RUN"], "the build stage installs nothing"
    tree, venv, elsewhere = tmp_path / "src", tmp_path / "venv", tmp_path / "elsewhere"
    tree.mkdir()
    elsewhere.mkdir()
    _replay(steps, tree, venv)
    gpusched = venv / "bin" / "gpusched"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUSCHED_", "VIRTUAL_"))},
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "GPUSCHED_TOPIC_PREFIX": topic_prefix,
        "GPUSCHED_STORE_DSN": f"chdb://{tmp_path / 'store'}",
    }

    def run(*args: str) -> str:
        done = subprocess.run([str(gpusched), *args], cwd=elsewhere, env=env,
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, f"gpusched {' '.join(args)}:\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr

    assert "sink" in run("--help")
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import gpusched.store, gpusched.contracts.provision as p; "
         "print(gpusched.store.StoreSettings().migrations_dir); print(p.topic_specs()[0].name)"],
        cwd=elsewhere, env=env, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert Path(where[0]).is_relative_to(venv)  # the migrations ship in the package
    assert where[1] == "gpusched.telemetry.v1"  # and the topic declarations
    shipped = len(list(Path(where[0]).glob("*.sql")))
    assert f"{shipped} migrations applied" in run("store", "migrate")
    assert "up to date" in run("store", "migrate")

    port = free_port()
    sink = subprocess.Popen(
        [str(gpusched), "sink"], cwd=elsewhere, env={**env, "GPUSCHED_SINK_SQL_PORT": str(port)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        event = JobEvent(job_id="img-1", type=JobEventType.SUBMITTED, request=JobRequest(num_gpu=1))
        produce(kafka_bootstrap, [(JOBS.name(topic_prefix), b"img-1", encode(event))])
        deadline, stored = time.monotonic() + 90, 0
        while time.monotonic() < deadline and stored != 1:
            time.sleep(0.5)
            assert sink.poll() is None, (sink.stdout.read() if sink.stdout else b"").decode()
            try:
                answer = httpx.post(f"http://127.0.0.1:{port}/sql", timeout=5,
                                    content=b"SELECT count() FROM job_events")  # fmt: skip
                stored = answer.json()["rows"][0][0] if answer.status_code == 200 else 0
            except httpx.HTTPError:
                continue
        assert stored == 1, "the image's sink did not store the event"
    finally:
        os.killpg(sink.pid, signal.SIGTERM)
        sink.wait(timeout=30)
