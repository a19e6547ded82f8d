"""``Dependency``: one line in the log when a dependency goes away and one when it is back.

A service that retries a broker or a store on every request would otherwise log an error
per retry; with this it logs the transition only, and its health endpoint can report the
state (``as_dict``).
"""

from __future__ import annotations

import logging
import time

__all__ = ["Dependency"]


class Dependency:
    """The state of one dependency (``name`` at ``address``) as its callers saw it last."""

    def __init__(self, name: str, address: str, log: logging.Logger) -> None:
        self.name, self.address, self.log = name, address, log
        self.up = True
        self.error: str | None = None
        self.since = time.time()

    def failed(self, error: str) -> None:
        """A call to it failed; logged only when it was up until now."""
        self.error = error
        if self.up:
            self.up, self.since = False, time.time()
            self.log.warning("%s at %s is unreachable: %s", self.name, self.address, error)

    def answered(self) -> None:
        """A call to it succeeded; logged only when it was down until now."""
        if not self.up:
            self.log.warning(
                "%s at %s is back after %.0f s", self.name, self.address, time.time() - self.since
            )
            self.up, self.since, self.error = True, time.time(), None

    def as_dict(self) -> dict[str, object]:
        state: dict[str, object] = {"state": "up" if self.up else "down", "address": self.address}
        if self.error and not self.up:
            state["error"] = self.error
        return state
