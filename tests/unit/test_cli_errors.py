"""The CLI names the dependency it cannot reach and what to do, with exit code 1 (never
an object's repr). Nothing listens on the ports used here: these are the real failures."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpusched.cli.main import app
from tests.pipeline import free_port


@pytest.mark.parametrize(
    "args",
    [
        ["queue"],
        ["nodes"],
        ["status", "job-1"],
        ["sql", "SELECT 1"],
        ["forecast", "show", "gpu_demand/all"],
    ],
)
def test_an_unreachable_store_is_named(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("GPUSCHED_STORE_SQL_URL", url)
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1, result.output
    assert f"the store (the sink's SQL endpoint) at {url} is unreachable" in result.output
    assert "make run" in result.output
    assert "object at 0x" not in result.output


@pytest.mark.parametrize("args", [["params", "show"], ["cancel", "job-1"]])
def test_an_unreachable_api_is_named(args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("COLUMNS", "200")
    result = CliRunner().invoke(app, [*args, "--api", url])
    assert result.exit_code == 1, result.output
    assert f"the REST API at {url} is unreachable" in result.output
    assert "is the platform up? (make run)" in result.output
