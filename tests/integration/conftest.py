"""Fixtures of the integration layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pipeline import Pipeline


@pytest.fixture
def pipeline(kafka_bootstrap: str, topic_prefix: str, tmp_path: Path) -> Iterator[Pipeline]:
    p = Pipeline(kafka_bootstrap, topic_prefix, tmp_path)
    try:
        yield p
    finally:
        p.stop()
