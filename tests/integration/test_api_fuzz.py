"""The REST API fuzzed from its own OpenAPI document (schemathesis, property-based):
no request it documents makes it fail (5xx), and every refusal says what was wrong."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import Case

from tests.pipeline import Pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_no_5xx_and_every_4xx_names_the_problem(pipeline: Pipeline) -> None:
    p = pipeline
    p.start_sink()
    base = p.start_api()
    token = p.token("--role", "admin", "--name", "fuzz")
    auth = {"Authorization": f"Bearer {token}"}

    # unknown fields in a submission are refused, naming the field
    typo = httpx.post(f"{base}/jobs", json={"gpus": 1, "gpu_modle": "V100"}, headers=auth)
    assert typo.status_code == 422
    assert typo.json()["detail"][0]["loc"][-1] == "gpu_modle"

    schema = schemathesis.openapi.from_url(f"{base}/openapi.json")
    seen: set[str] = set()

    @given(case=schema.as_strategy())
    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    def fuzz(case: Case) -> None:
        response = case.call(base_url=base, headers=auth)
        where = f"{case.method} {case.formatted_path} {case.query} {case.body!r}"
        seen.add(f"{case.method} {case.path}")
        assert response.status_code < 500, f"{where}: {response.status_code} {response.text}"
        if response.status_code >= 400:
            detail = response.json().get("detail")
            assert detail, f"{where}: {response.status_code} without a detail"

    fuzz()
    assert {"POST /jobs", "GET /jobs", "DELETE /jobs/{job_id}"} <= seen
