"""Shared fixtures: a real Kafka broker per session, a topic prefix per test, a
ClickHouse (chDB) database per test, and a headless Chromium (Debian's) per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from gpusched.local.browser import CHROMIUM_ARGS, chromium
from gpusched.local.kafka import BrokerError, LocalBroker, external_bootstrap
from gpusched.store import Store, StoreSettings
from tests.pipeline import fresh_prefix

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A real broker: KAFKA_BOOTSTRAP_SERVERS if set, else the local one (stopped after,
    if this session started it)."""
    external = external_bootstrap()
    if external:
        yield external
        return
    broker = LocalBroker()
    try:
        started = broker.up()
    except BrokerError as exc:
        pytest.fail(f"the local Kafka broker could not start: {exc}", pytrace=False)
    try:
        yield broker.bootstrap
    finally:
        if started:
            broker.down()


@pytest.fixture
def topic_prefix(kafka_bootstrap: str) -> str:
    """A fresh prefix with every gpusched topic (and DLQ) created under it."""
    return fresh_prefix(kafka_bootstrap)


@pytest.fixture(scope="session")
def chdb_dsn(tmp_path_factory: pytest.TempPathFactory) -> str:
    # chDB opens one data directory per process, so the whole session shares one.
    return f"chdb://{tmp_path_factory.mktemp('chdb')}"


@pytest.fixture
def store(chdb_dsn: str) -> Store:
    """A migrated store on a database of its own."""
    return Store.open(StoreSettings(dsn=chdb_dsn, database=f"t_{uuid.uuid4().hex[:10]}"))


@pytest.fixture
def browser() -> Iterator[Browser]:
    """Chromium through Playwright's sync API, which runs an event loop in this thread:
    request it after the fixtures that call asyncio.run (the topics of a test prefix)."""
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=str(chromium()), args=list(CHROMIUM_ARGS))
        try:
            yield chrome
        finally:
            chrome.close()
