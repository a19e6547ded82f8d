"""The tree's shape: service modules stay small enough to read, and no code of ours edits
``sys.path`` (every package is installed into the workspace)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_SERVICE_MODULE_LINES = 400


def _sources(*roots: str) -> list[Path]:
    return sorted(p for root in roots for p in (REPO / root).rglob("*.py"))


def test_no_service_module_exceeds_400_lines() -> None:
    long = {
        str(p.relative_to(REPO)): n
        for p in _sources("services", "cli")
        if (n := len(p.read_text().splitlines())) > MAX_SERVICE_MODULE_LINES
    }
    assert not long, f"split these modules (> {MAX_SERVICE_MODULE_LINES} lines): {long}"


def test_no_sys_path_edits() -> None:
    edits = [
        str(p.relative_to(REPO))
        for p in _sources("libs", "services", "cli", "infra", "tests", "bench", "tools")
        if "sys.path." in p.read_text() and p != Path(__file__).resolve()
    ]
    assert not edits, f"import from the installed package instead: {edits}"
