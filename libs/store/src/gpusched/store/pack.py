"""The analyst query pack: ``queries/*.sql``, shipped in the package (so the console and
an image find them), described in docs/analytics.md."""

from __future__ import annotations

from importlib import resources

__all__ = ["query_pack"]


def query_pack() -> dict[str, str]:
    """name (the file's stem) -> SQL of every query of the pack."""
    folder = resources.files("gpusched.store") / "queries"
    return {
        entry.name.removesuffix(".sql"): entry.read_text()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".sql")
    }
