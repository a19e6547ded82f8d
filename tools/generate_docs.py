"""Regenerates the documents derived from code: the AsyncAPI file and the settings table.

python tools/generate_docs.py asyncapi   # docs/asyncapi.json
python tools/generate_docs.py settings   # the table between markers in README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic_settings import BaseSettings

from gpusched.api import ApiSettings
from gpusched.collector import CollectorSettings
from gpusched.contracts.asyncapi import asyncapi_json
from gpusched.dispatcher import DispatcherSettings, SimClusterSettings
from gpusched.forecaster import ForecasterSettings
from gpusched.processor import ProcessorSettings
from gpusched.sink import SinkSettings
from gpusched.store import StoreSettings

REPO = Path(__file__).resolve().parents[1]
BEGIN = "<!-- settings-table:begin (make settings-doc) -->"
END = "<!-- settings-table:end -->"

SETTINGS: tuple[tuple[str, type[BaseSettings]], ...] = (
    ("store (sink, api)", StoreSettings),
    ("collector", CollectorSettings),
    ("processor", ProcessorSettings),
    ("forecaster", ForecasterSettings),
    ("dispatcher", DispatcherSettings),
    ("simcluster", SimClusterSettings),
    ("sink", SinkSettings),
    ("api", ApiSettings),
)


def settings_table() -> str:
    """A markdown table: every setting's environment name, default and meaning."""
    lines = ["| variable | used by | default | meaning |", "|---|---|---|---|"]
    seen: dict[str, list[str]] = {}
    rows: dict[str, tuple[str, str]] = {}
    for owner, cls in SETTINGS:
        prefix = cls.model_config.get("env_prefix", "")
        for name, field in cls.model_fields.items():
            env = f"{prefix}{name}".upper()
            default = "(derived)" if field.default_factory is not None else repr(field.default)
            seen.setdefault(env, []).append(owner)
            rows[env] = (default, field.description or "")
    for env, owners in seen.items():
        default, meaning = rows[env]
        lines.append(f"| `{env}` | {', '.join(owners)} | `{default}` | {meaning} |")
    return "\n".join(lines)


def readme_with_table(readme: str) -> str:
    before, _, rest = readme.partition(BEGIN)
    _, _, after = rest.partition(END)
    return f"{before}{BEGIN}\n{settings_table()}\n{END}{after}"


def main(what: str) -> int:
    if what == "asyncapi":
        (REPO / "docs" / "asyncapi.json").write_text(asyncapi_json())
    elif what == "settings":
        readme = REPO / "README.md"
        readme.write_text(readme_with_table(readme.read_text()))
    else:
        print(f"unknown document {what!r}; choose asyncapi or settings", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
