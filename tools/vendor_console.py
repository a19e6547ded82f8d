"""Fetch the console's JavaScript and CSS from the npm registry (``npm pack``) into
``services/api/src/gpusched/api/console/static/vendor`` and write ``VENDORED.json`` with
each file's package, version, path in the package and SHA-256. Run by hand when a
version changes (``make vendor``); the files are committed, nothing is fetched at build
or run time, and a test checks them against the manifest.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "services/api/src/gpusched/api/console/static/vendor"

# (npm package, version, file in the package, license file in the package)
FILES = (
    ("htmx.org", "2.0.11", "dist/htmx.min.js", "LICENSE"),
    ("htmx-ext-sse", "2.2.4", "sse.js", "LICENSE"),
    ("uplot", "1.6.32", "dist/uPlot.iife.min.js", "LICENSE"),
    ("uplot", "1.6.32", "dist/uPlot.min.css", "LICENSE"),
)


def main() -> int:
    manifest = {}
    with tempfile.TemporaryDirectory() as tmp:
        for package, version, path, license_file in FILES:
            spec = f"{package}@{version}"
            out = subprocess.run(
                ["npm", "pack", spec, "--silent"], cwd=tmp, capture_output=True, text=True
            )
            if out.returncode != 0:
                print(f"npm pack {spec} failed:\n{out.stderr}", file=sys.stderr)
                return 1
            with tarfile.open(Path(tmp) / out.stdout.strip().splitlines()[-1]) as tar:
                data = tar.extractfile(f"package/{path}").read()  # type: ignore[union-attr]
                text = tar.extractfile(f"package/{license_file}").read()  # type: ignore[union-attr]
            name = Path(path).name
            (VENDOR / name).write_bytes(data)
            (VENDOR / f"{package}.LICENSE").write_bytes(text)
            manifest[name] = {
                "package": package,
                "version": version,
                "path": path,
                "sha256": hashlib.sha256(data).hexdigest(),
            }
    (VENDOR / "VENDORED.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"vendored {len(manifest)} files into {VENDOR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
