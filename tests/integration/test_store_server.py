"""The writable ClickHouse HTTP interface of ``gpusched store-server`` (an embedded
store served to other processes), in process on the session's chDB directory: what
clickhouse-connect and curl send a ClickHouse server works, and a reader's ``readonly``
stays its own."""

from __future__ import annotations

import gzip
import uuid

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from gpusched.sink import SinkSettings
from gpusched.sink.clickhouse_http import AnalystEngine, mount_clickhouse_http

PASSWORD = "s3cret"


@pytest.fixture
def server(chdb_dsn: str) -> TestClient:
    database = f"s_{uuid.uuid4().hex[:10]}"
    app = FastAPI()
    engine = AnalystEngine(chdb_dsn, database, SinkSettings(), writable=True)
    mount_clickhouse_http(app, engine, None, PASSWORD)
    client = TestClient(app, headers={"X-ClickHouse-Key": PASSWORD})
    created = client.post("/", content=b"CREATE TABLE t (n UInt32, s String) ENGINE = Memory")
    assert created.status_code == 200, created.text
    return client


def _rows(server: TestClient) -> str:
    return server.post("/", content=b"SELECT n, s FROM t ORDER BY n").text


def test_a_wrong_or_missing_password_is_refused(server: TestClient) -> None:
    for key in ("", "wrong"):
        answer = server.post("/", content=b"SELECT 1", headers={"X-ClickHouse-Key": key})
        assert answer.status_code != 200
        assert "AUTHENTICATION_FAILED" in answer.text


def test_an_insert_takes_its_rows_from_the_body_in_any_encoding(server: TestClient) -> None:
    plain = server.post(
        "/", params={"query": "INSERT INTO t (n, s) FORMAT JSONEachRow"},
        content=b'{"n": 1, "s": "a"}\n{"n": 2, "s": "b"}',
    )  # fmt: skip
    assert plain.status_code == 200, plain.text
    assert '"written_rows":"2"' in plain.headers["x-clickhouse-summary"]
    zipped = server.post(
        "/", params={"query": "INSERT INTO t FORMAT CSV"}, content=gzip.compress(b"3,c\n"),
        headers={"Content-Encoding": "gzip"},
    )  # fmt: skip
    assert zipped.status_code == 200, zipped.text
    leading = server.post("/", content=b"INSERT INTO t FORMAT TabSeparated\n4\td\n")
    assert leading.status_code == 200, leading.text  # the statement is the body's first line
    assert _rows(server) == "1\ta\n2\tb\n3\tc\n4\td\n"
    unknown = server.post(
        "/", params={"query": "INSERT INTO t FORMAT CSV"}, content=b"5,e\n",
        headers={"Content-Encoding": "br"},
    )  # fmt: skip
    assert "UNKNOWN_COMPRESSION_METHOD" in unknown.text


def test_a_readers_readonly_binds_its_query_and_no_later_one(server: TestClient) -> None:
    refused = server.post(
        "/", params={"readonly": "1", "max_result_rows": "10"},
        content=b"INSERT INTO t VALUES (9, 'z')",
    )  # fmt: skip
    assert refused.status_code != 200
    assert "READONLY" in refused.text
    read = server.post("/", params={"readonly": "1"}, content=b"SELECT count() FROM t")
    assert read.text == "0\n"
    written = server.post("/", content=b"INSERT INTO t VALUES (9, 'z')")
    assert written.status_code == 200, written.text  # the writer's session is not read-only
    assert _rows(server) == "9\tz\n"
    bad = server.post("/", params={"max threads": "1"}, content=b"SELECT 1")
    assert "UNKNOWN_SETTING" in bad.text
