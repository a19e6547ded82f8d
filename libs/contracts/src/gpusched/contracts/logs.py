"""How every service logs: to stderr, as text or as JSON lines (``GPUSCHED_LOG_FORMAT``).

One ``logging.config.dictConfig`` for the command line, uvicorn (whose own loggers then
write through it) and the processor's Faust worker, so a log collector reading JSON gets
JSON from every process of the platform.
"""

from __future__ import annotations

import logging.config
from typing import Any

from gpusched.contracts.settings import LogSettings

__all__ = ["configure_logging", "logging_config"]

_TEXT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def logging_config(level: str, settings: LogSettings | None = None) -> dict[str, Any]:
    """The logging configuration of a service logging at ``level``."""
    fmt = (settings or LogSettings()).log_format
    formatter: dict[str, Any] = {"format": _TEXT}
    if fmt == "json":
        formatter = {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "ts", "levelname": "level", "name": "logger"},
            "datefmt": "%Y-%m-%dT%H:%M:%S%z",
        }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"default": formatter},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "formatter": "default",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["default"]},
        "loggers": {
            "httpx": {"level": "WARNING"},  # one line per request otherwise
            # uvicorn's loggers write through the root's handler, not handlers of their own
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
        },
    }


def configure_logging(level: str) -> None:
    logging.config.dictConfig(logging_config(level))
