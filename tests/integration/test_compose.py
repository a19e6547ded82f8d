"""docker-compose.yml and its 3-broker override, checked without an engine: the compose
specification's JSON schema (check-jsonschema) and the loader docker compose itself uses
(compose-go, with its consistency checks), then drift guards against the code, for the
compose files and the rendered k8s overlays: every command is a real `gpusched` command,
every GPUSCHED_* variable a real setting, every service `gpusched up` starts is there, no
image floats on :latest or has no tag."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from gpusched.cli.main import app
from tests.k8s import kustomize
from tools.generate_docs import setting_names

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHECKER = Path(__file__).parent / "compose"
BASE = REPO / "docker-compose.yml"
KAFKA3 = REPO / "docker-compose.kafka3.yml"
ENV = {**os.environ, "CLICKHOUSE_PASSWORD": "not-a-secret"}


@pytest.fixture(scope="module")
def composecheck() -> Path:
    """compose-go's loader as a small Go program, built once into ~/.cache/gpusched."""
    sources = b"".join((CHECKER / f).read_bytes() for f in ("main.go", "go.mod", "go.sum"))
    digest = hashlib.sha256(sources).hexdigest()[:12]
    binary = Path.home() / ".cache" / "gpusched" / f"composecheck-{digest}"
    if not binary.exists():
        go = shutil.which("go")
        assert go, "Go is needed to build the compose loader (Debian: golang)"
        built = subprocess.run(
            [go, "build", "-o", str(binary), "."], cwd=CHECKER, capture_output=True, text=True,
            env={**os.environ, "GOFLAGS": "-mod=mod"}, timeout=600, check=False,
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
    return binary


def _load(checker: Path, *files: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(checker), *map(str, files)], capture_output=True, text=True, env=ENV, check=False
    )
    assert done.returncode == 0, done.stderr
    project: dict[str, Any] = json.loads(done.stdout)
    return project


def _gpusched_commands(service: dict[str, Any]) -> list[list[str]]:
    """The gpusched command lines a service runs (its command, or each `gpusched ...` of
    an `sh -c` line)."""
    entrypoint, command = service.get("entrypoint") or [], service.get("command") or []
    if entrypoint[:2] == ["sh", "-c"]:
        script = " ".join(command)
        parts = [part.split() for part in script.split("&&")]
        return [words[1:] for words in parts if words[:1] == ["gpusched"]]
    return [list(command)]


def _check_command(args: list[str]) -> str | None:
    """Why ``gpusched ARGS`` would not parse, or None."""
    cmd: Any = typer.main.get_command(app)
    rest, path = list(args), list[str]()
    while hasattr(cmd, "commands"):
        if not rest:
            return f"gpusched {' '.join(path)}: a subcommand is missing"
        name = rest.pop(0)
        if name not in cmd.commands:
            return f"no command 'gpusched {' '.join([*path, name])}'"
        cmd, path = cmd.commands[name], [*path, name]
    try:
        cmd.make_context(" ".join(path), rest)
    except Exception as exc:  # click's usage errors (typer vendors its own click)
        return f"gpusched {' '.join(args)}: {getattr(exc, 'format_message', exc.__str__)()}"
    return None


def test_schema() -> None:
    for files in ([BASE, KAFKA3],):
        done = subprocess.run(
            [str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema",
             "vendor.compose-spec", *map(str, files)],
            capture_output=True, text=True, env=ENV, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


def test_loader_rejects_an_undefined_dependency(composecheck: Path, tmp_path: Path) -> None:
    broken = tmp_path / "compose.yml"
    broken.write_text("services:\n  a:\n    image: x:1\n    depends_on: [nope]\n")
    done = subprocess.run([str(composecheck), str(broken)], capture_output=True, text=True)
    assert done.returncode == 1
    assert "nope" in done.stderr


def test_compose_matches_the_code(composecheck: Path) -> None:
    project = _load(composecheck, BASE)
    services = project["services"]
    known = setting_names()
    ours = {name: s for name, s in services.items() if s["image"].startswith("gpusched:")}
    for name, service in services.items():
        assert ":" in service["image"], f"{name}: no tag"
        assert not service["image"].endswith(":latest"), name
    ran = set()
    for name, service in ours.items():
        unknown = sorted(k for k in service.get("environment", {}) if k.startswith("GPUSCHED_")
                         and k not in known)  # fmt: skip
        assert not unknown, f"{name}: not settings: {unknown}"
        for args in _gpusched_commands(service):
            assert (why := _check_command(args)) is None, f"{name}: {why}"
            ran.add(" ".join(a for a in args[:2] if not a.startswith("-")))
    # every service `gpusched up` (make run) starts: Service("name", ["cmd", "sub"...
    platform = (REPO / "cli" / "src" / "gpusched" / "cli" / "platform.py").read_text()
    pattern = r'Service\(\s*"\w+",\s*\[\s*"(\w+)"(?:,\s*"(\w+)")?'
    started = {" ".join(c for c in m if c) for m in re.findall(pattern, platform)}
    assert len(started) >= 7
    missing = started - ran - {"feed"}  # feed: make run's demo trace feeder, not a service
    assert not missing, f"not in docker-compose.yml: {missing}"
    nvml = services["collector-nvml"]
    assert nvml["profiles"] == ["gpu"]
    (device,) = nvml["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["utility"]
    assert device["driver"] == "nvidia"
    pom = REPO / "infra" / "local" / "src" / "gpusched" / "local" / "pom.xml"
    kafka_version = re.search(r"<kafka.version>([\d.]+)<", pom.read_text())
    assert kafka_version
    assert services["kafka"]["image"] == f"apache/kafka:{kafka_version[1]}"


def test_three_broker_override(composecheck: Path) -> None:
    project = _load(composecheck, BASE, KAFKA3)
    services = project["services"]
    assert {"kafka", "kafka-2", "kafka-3"} <= set(services)
    brokers = "kafka:9092,kafka-2:9092,kafka-3:9092"
    for name, service in services.items():
        if service["image"].startswith("gpusched:"):
            assert service["environment"]["KAFKA_BOOTSTRAP_SERVERS"] == brokers, name
    (init,) = _gpusched_commands(services["init"])[:1]
    assert init == ["topics", "ensure", "--replication-factor", "3", "--min-insync", "2"]
    assert _check_command(init) is None


def test_k8s_manifests_match_the_code() -> None:
    """The same drift guards on every rendered k8s overlay: commands, settings, tags."""
    known = setting_names()
    for overlay in sorted((REPO / "k8s" / "overlays").iterdir()):
        docs = [d for d in yaml.safe_load_all(kustomize(overlay)) if d]
        config = next(d for d in docs if d["kind"] == "ConfigMap" and
                      d["metadata"]["name"] == "gpusched-config")  # fmt: skip
        names = set(config["data"])
        for doc in docs:
            spec = doc.get("spec", {}).get("template", {}).get("spec", {})
            for container in spec.get("containers", []):
                image = container["image"]
                where = f"{overlay.name}: {doc['kind']}/{doc['metadata']['name']}"
                assert ":" in image, f"{where}: {image} has no tag"
                assert not image.endswith(":latest"), where
                if not image.startswith("gpusched:"):
                    continue
                names |= {e["name"] for e in container.get("env", [])}
                service = {"entrypoint": container.get("command"), "command": container["args"]}
                for args in _gpusched_commands(service):
                    assert (why := _check_command(args)) is None, f"{where}: {why}"
        unknown = sorted(n for n in names if n.startswith("GPUSCHED_") and n not in known)
        assert not unknown, f"{overlay.name}: not settings: {unknown}"
