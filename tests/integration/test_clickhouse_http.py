"""ClickHouse's HTTP interface on the embedded store, driven by analysts' real clients:
clickhouse-connect's HTTP client, the ClickHouse JDBC driver and raw HTTP (curl-style)."""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import clickhouse_connect
import httpx
import pyarrow.parquet as pq
import pytest

from gpusched.contracts import JobEvent, JobEventType, JobRequest, encode
from gpusched.contracts.topics import JOBS
from tests.pipeline import Pipeline, fresh_prefix, produce, write_cluster

pytestmark = [pytest.mark.analytics, pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def filled(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, str]]:
    """A sink with telemetry and job events in its store, and a viewer's token; one for
    the module's tests, which only read."""
    prefix = fresh_prefix(kafka_bootstrap)
    p = Pipeline(kafka_bootstrap, prefix, tmp_path_factory.mktemp("analytics"))
    try:
        yield _fill(p)
    finally:
        p.stop()


def _fill(p: Pipeline) -> tuple[Pipeline, str]:
    p.start_sink()
    submitted, request = JobEventType.SUBMITTED, JobRequest(num_gpu=2)
    events = [
        JobEvent(job_id=f"job-{i}", type=submitted, tenant="vision", request=request)
        for i in range(3)
    ]
    produce(p.bootstrap, [(JOBS.name(p.prefix), e.job_id.encode(), encode(e)) for e in events])
    cluster = write_cluster(p.workdir / "a.cluster.csv", nodes=2, gpus_per_node=4)
    p.run("collect", "--source", "simulated", "--cluster", str(cluster), "--rounds", "3",
          "--speed", "50")  # fmt: skip
    p.wait_for("24 samples", lambda: p.scalar("SELECT count() FROM telemetry") == 24)
    p.wait_for("3 job events", lambda: p.scalar("SELECT count() FROM job_events") == 3)
    return p, p.token("--role", "viewer", "--name", "analyst")


def test_clickhouse_connect(filled: tuple[Pipeline, str]) -> None:
    p, token = filled
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=p.sql_port, username="analyst", password=token
    )
    frame = client.query_df("SELECT node_id, gpu_uuid, power_w FROM telemetry ORDER BY ts")
    assert len(frame) == 24
    assert set(frame["node_id"]) == {"n0000", "n0001"}
    counted = client.query(
        "SELECT count() FROM job_events WHERE tenant = {tenant:String}",
        parameters={"tenant": "vision"},
    )
    assert counted.result_rows == [(3,)]
    raw = client.raw_query("SELECT node_id, power_w FROM telemetry FORMAT Parquet")
    table = pq.read_table(io.BytesIO(raw))
    assert table.num_rows == 24
    assert table.column_names == ["node_id", "power_w"]
    with pytest.raises(Exception, match="readonly"):
        client.command("DROP TABLE telemetry")


def test_raw_http(filled: tuple[Pipeline, str]) -> None:
    p, token = filled
    url = f"http://127.0.0.1:{p.sql_port}/"
    assert httpx.get(f"{url}ping").text == "Ok.\n"
    auth = ("analyst", token)

    tsv = "SELECT tenant, count() AS n FROM job_events GROUP BY tenant FORMAT TabSeparatedWithNames"
    named = httpx.get(url, params={"query": tsv}, auth=auth)
    assert named.status_code == 200, named.text
    assert named.text == "tenant\tn\nvision\t3\n"
    assert named.headers["X-ClickHouse-Format"] == "TabSeparatedWithNames"
    assert '"read_rows"' in named.headers["X-ClickHouse-Summary"]

    headers = {"X-ClickHouse-User": "analyst", "X-ClickHouse-Key": token}
    nodes = b"SELECT uniqExact(node_id) AS nodes FROM telemetry"
    body = httpx.post(url, params={"default_format": "JSONEachRow"}, content=nodes, headers=headers)
    assert body.json() == {"nodes": 2}

    error = httpx.post(url, content=b"SELEC 1", auth=auth)
    assert error.status_code == 400
    assert error.headers["X-ClickHouse-Exception-Code"] == "62"
    assert error.text.startswith("Code: 62. DB::Exception: Syntax error")

    write = httpx.post(url, content=b"INSERT INTO job_events (job_id) VALUES ('x')", auth=auth)
    assert write.status_code == 500  # READONLY: the status ClickHouse's server gives it
    assert "(READONLY)" in write.text
    assert p.scalar("SELECT count() FROM job_events") == 3

    lift = httpx.get(url, params={"query": "SELECT 1", "max_execution_time": "999"}, auth=auth)
    assert "(READONLY)" in lift.text  # the limits cannot be lifted, by parameter ...
    inline = httpx.get(url, params={"query": "SELECT 1 SETTINGS max_execution_time = 999"},
                       auth=auth)  # fmt: skip
    assert "(READONLY)" in inline.text  # ... or in the query

    assert httpx.get(url, params={"query": "SELECT 1"}).status_code == 401
    assert httpx.get(url, params={"query": "SELECT 1"}, auth=("a", "gst_x_y")).status_code == 403


def test_limits(pipeline: Pipeline) -> None:
    p = pipeline
    p.start(
        "sink", GPUSCHED_SINK_QUERY_MAX_EXECUTION_S="1", GPUSCHED_SINK_QUERY_MAX_RESULT_ROWS="10"
    )
    p.wait_for("the sink's SQL endpoint", lambda: p.scalar("SELECT 1") == 1, 60)
    auth = ("analyst", p.token("--role", "viewer"))
    url = f"http://127.0.0.1:{p.sql_port}/"
    started = time.monotonic()
    slow = httpx.post(
        url, content=b"SELECT count() FROM numbers(1e11) WHERE sipHash64(number) % 7 = 0",
        auth=auth, timeout=60,
    )  # fmt: skip
    assert slow.status_code == 408, slow.text  # TIMEOUT_EXCEEDED
    assert "TIMEOUT_EXCEEDED" in slow.text
    assert time.monotonic() - started < 30
    many = httpx.post(url, content=b"SELECT number FROM numbers(100)", auth=auth)
    assert "TOO_MANY_ROWS_OR_BYTES" in many.text
    # the services' own /sql door has the same limits, and its error names them
    internal = httpx.post(f"{url}sql", content=b"SELECT number FROM numbers(100)")
    assert internal.status_code == 400
    assert "TOO_MANY_ROWS_OR_BYTES" in internal.text
    assert "max_result_rows=10" in internal.text
    assert httpx.post(f"{url}sql", content=b"SELECT number FROM numbers(10)").status_code == 200


JDBC = Path(__file__).parent / "jdbc"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def jdbc_driver() -> Path:
    """The ClickHouse JDBC driver's jars, resolved once from Maven Central (jdbc/pom.xml)
    into ~/.cache/gpusched."""
    pom = (JDBC / "pom.xml").read_bytes()
    jars = Path.home() / ".cache" / "gpusched" / f"jdbc-{hashlib.sha256(pom).hexdigest()[:12]}"
    if not (jars / ".complete").exists():
        subprocess.run(
            ["mvn", "-q", "-B", "-f", str(JDBC / "pom.xml"), "dependency:copy-dependencies",
             f"-DoutputDirectory={jars}"],
            check=True, capture_output=True, timeout=600,
        )  # fmt: skip
        (jars / ".complete").touch()
    return jars


def test_jdbc(filled: tuple[Pipeline, str], jdbc_driver: Path) -> None:
    p, token = filled
    probe = subprocess.run(
        ["java", "-cp", f"{jdbc_driver}/*", str(JDBC / "JdbcProbe.java"),
         f"jdbc:clickhouse://127.0.0.1:{p.sql_port}/gpusched", "analyst", token],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stdout + probe.stderr
    facts = dict(line.split("=", 1) for line in probe.stdout.splitlines() if "=" in line)
    assert facts["product"] == "ClickHouse"
    assert {"telemetry", "job_events", "priorities"} <= set(facts["tables"].split(","))
    assert {"job_id", "tenant", "type", "ts"} <= set(facts["job_events_columns"].split(","))
    assert facts["telemetry_rows"] == "24"
    assert facts["telemetry_nodes"] == "2"
    assert facts["telemetry_power"] == "true"
    assert facts["jobs"] == "job-0:vision job-1:vision job-2:vision"


def test_grafana_dashboard_panels(filled: tuple[Pipeline, str]) -> None:
    """Every panel's SQL of infra/grafana's dashboard runs through the HTTP interface, with
    the time macro expanded as Grafana's ClickHouse data source does (a day around now)."""
    p, token = filled
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=p.sql_port, username="analyst", password=token
    )
    dashboard = json.loads((REPO / "infra" / "grafana" / "gpusched-dashboard.json").read_text())
    answers = {}
    for panel in dashboard["panels"]:
        (target,) = panel["targets"]
        sql = re.sub(
            r"\$__timeFilter\(([\w.]+)\)",
            r"\1 >= now() - INTERVAL 1 DAY AND \1 <= now() + INTERVAL 1 DAY",
            target["rawSql"],
        )
        assert "$__" not in sql, f"{panel['title']}: a macro the test does not expand"
        answers[panel["title"]] = client.query(sql).result_rows
    assert len(answers) == len(dashboard["panels"]) >= 4
    assert answers["GPU power draw (kW)"]  # the collector's samples
    assert {row[1] for row in answers["Idle GPU-hours per node"]} == {"n0000", "n0001"}
