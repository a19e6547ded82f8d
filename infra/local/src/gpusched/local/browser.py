"""A headless Chromium for the browser tests: Debian's package, installed when missing
(never a browser downloaded by a test tool), driven by Playwright."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpusched.local.procs import apt_install

__all__ = ["CHROMIUM_ARGS", "chromium"]

CHROMIUM_ARGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking")


def chromium() -> Path:
    """Debian's Chromium, installed (``apt-get install chromium``, ~1 min) if missing."""
    found = shutil.which("chromium")
    if found is None:
        apt_install(["chromium"])
        found = shutil.which("chromium") or "/usr/bin/chromium"
    return Path(found)
