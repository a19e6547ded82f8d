"""The metrics dashboard names only metrics the services expose."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpusched.contracts.metrics import METRICS

REPO = Path(__file__).resolve().parents[2]


def test_every_query_of_the_metrics_dashboard_names_a_metric_that_exists() -> None:
    dashboard = json.loads((REPO / "infra" / "grafana" / "gpusched-metrics.json").read_text())
    named = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bgpusched_\w+", target["expr"])
    }
    assert len(named) >= 8
    assert named <= METRICS, f"not exposed by any service: {sorted(named - METRICS)}"
