"""GPUSCHED_LOG_FORMAT: every service's log as text lines or JSON lines."""

from __future__ import annotations

import json
import logging
import logging.config

import pytest

from gpusched.contracts.logs import logging_config
from gpusched.contracts.settings import LogSettings


@pytest.fixture(autouse=True)
def _restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:], root.level = handlers, level


def test_json_lines_carry_level_logger_message_and_exception(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logging.config.dictConfig(logging_config("info", LogSettings(log_format="json")))
    log = logging.getLogger("gpusched.sink")
    log.debug("not at info")
    log.info("inserted %d rows", 42)
    try:
        raise RuntimeError("store down")
    except RuntimeError:
        log.exception("insert failed")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [(r["level"], r["logger"], r["message"]) for r in lines] == [
        ("INFO", "gpusched.sink", "inserted 42 rows"),
        ("ERROR", "gpusched.sink", "insert failed"),
    ]
    assert "RuntimeError: store down" in lines[1]["exc_info"]
    assert lines[0]["ts"].startswith("20")


def test_text_is_the_default_and_uvicorn_writes_through_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUSCHED_LOG_FORMAT", raising=False)
    logging.config.dictConfig(logging_config("info"))
    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("httpx").info("one line per request")  # quietened
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("uvicorn.error INFO Started server process")
    monkeypatch.setenv("GPUSCHED_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="'text' or 'json'"):
        LogSettings()
