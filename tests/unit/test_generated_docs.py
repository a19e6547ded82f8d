"""Derived documents stay in step with the code."""

from __future__ import annotations

from pathlib import Path

from tools.generate_docs import readme_with_table

REPO = Path(__file__).resolve().parents[2]


def test_readme_settings_table_is_current() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme == readme_with_table(readme), "README settings table is stale: make settings-doc"
