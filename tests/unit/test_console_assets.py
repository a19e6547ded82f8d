"""The console's vendored JavaScript and CSS are the files their manifest names, byte for
byte (VENDORED.json: npm package, version, SHA-256; refreshed by `make vendor`), and the
pages load nothing from elsewhere."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

CONSOLE = Path(__file__).resolve().parents[2] / "services/api/src/gpusched/api/console"


def test_vendored_files_match_their_manifest() -> None:
    vendor = CONSOLE / "static/vendor"
    manifest = json.loads((vendor / "VENDORED.json").read_text())
    assert set(manifest) == {"htmx.min.js", "sse.js", "uPlot.iife.min.js", "uPlot.min.css"}
    for name, entry in manifest.items():
        assert hashlib.sha256((vendor / name).read_bytes()).hexdigest() == entry["sha256"], name
        assert re.fullmatch(r"\d+\.\d+\.\d+", entry["version"]), name
        assert (vendor / f"{entry['package']}.LICENSE").exists(), name


def test_templates_load_only_local_assets() -> None:
    for template in (CONSOLE / "templates").glob("*.html"):
        text = template.read_text()
        for url in re.findall(r'(?:src|href)="([^"]+)"', text):
            assert url.startswith(("/console", "data:")), (template.name, url)
