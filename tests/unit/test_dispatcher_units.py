"""The dispatcher's pure parts: the live outlook from forecast messages, the Slurm and
Kubernetes translations, and how recorded steps are told apart from new ones."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from gpusched.contracts import DemandForecast, ForecastPoint, JobEventType, PlacementDecision
from gpusched.dispatcher.kubernetes_backend import pod_request
from gpusched.dispatcher.outlook import LiveOutlook
from gpusched.dispatcher.slurm_backend import expand_hostlist, gres_indices, slurm_nice

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _forecast(series: str, values: list[tuple[float, float]], ts: datetime = T0) -> DemandForecast:
    points = tuple(
        ForecastPoint(ts=T0 + timedelta(minutes=10 * i), yhat=y, lower=0.0, upper=u)
        for i, (y, u) in enumerate(values)
    )
    # pydantic checks the metric against the model's Literal
    return DemandForecast.model_validate(
        {
            "ts": ts,
            "series": series,
            "metric": series.split("/")[0],
            "model": "prophet",
            "step_s": 600,
            "points": points,
        }
    )


def test_live_outlook_reads_the_latest_forecasts() -> None:
    o = LiveOutlook()
    now = T0.timestamp()
    assert o.demand_rise(now, 600) is None  # nothing yet
    o.apply(_forecast("gpu_demand/all", [(10, 12), (14, 20), (11, 15), (30, 40)]))
    assert o.demand_rise(now + 60, 900) == 4.0  # 10 -> 14 within the next 15 minutes
    assert o.demand_rise(now, 1500) == 4.0  # steps at 0, 10, 20 min: the 30 is later
    assert o.demand_rise(now, 1800) == 20.0  # the step at 30 min holds 30
    assert o.demand_rise(now + 5 * 600, 60) is None  # past the horizon
    o.apply(_forecast("gpu_demand/all", [(0, 0)] * 4, ts=T0 - timedelta(hours=1)))
    assert o.demand_rise(now, 600) == 4.0  # an older forecast does not replace a newer one
    o.apply(_forecast("arrivals/class=high", [(2, 6), (2, 12), (0, 0), (0, 0)]))
    # 5 minutes of the first step's bound and 5 of the second's
    assert o.arrivals(now + 300, 600, "high") == pytest.approx(3.0 + 6.0)
    assert o.arrivals(now, 600, "normal") is None


def test_slurm_translations() -> None:
    assert expand_hostlist("node[1-3,7],gpu05") == ["node1", "node2", "node3", "node7", "gpu05"]
    assert expand_hostlist("n[08-10]") == ["n08", "n09", "n10"]
    assert gres_indices("gpu:v100:3(IDX:0-1,3)") == (0, 1, 3)
    assert gres_indices("gpu:v100:0(IDX:N/A)") == ()
    assert slurm_nice(-2.5) == -2500
    assert slurm_nice(1e12) == 2**31 - 3  # Slurm's range


def test_kubernetes_pod_request() -> None:
    def container(requests: dict[str, str], limits: dict[str, str] | None = None) -> object:
        return SimpleNamespace(resources=SimpleNamespace(requests=requests, limits=limits))

    pod = SimpleNamespace(
        spec=SimpleNamespace(
            containers=[
                container({"nvidia.com/gpu": "2", "cpu": "500m", "memory": "4Gi"}),
                container({"cpu": "1"}, {"nvidia.com/gpu": "1"}),  # limits only: counted
            ],
            node_selector={"nvidia.com/gpu.product": "A100"},
        )
    )
    r = pod_request(pod)
    assert (r.num_gpu, r.cpu_milli, r.memory_mib) == (3.0, 1500, 4096)
    assert r.gpu_models == frozenset({"A100"})


@pytest.mark.parametrize(
    ("last", "kind", "known", "skip"),
    [
        (None, JobEventType.PLACED, True, False),
        (JobEventType.SUBMITTED, JobEventType.PLACED, True, False),
        (JobEventType.RUNNING, JobEventType.PLACED, True, True),  # re-reported after restart
        (JobEventType.RUNNING, JobEventType.RUNNING, True, True),
        (JobEventType.PREEMPTED, JobEventType.PLACED, True, False),  # placed again
        (JobEventType.FINISHED, JobEventType.FINISHED, True, True),
        (None, JobEventType.FINISHED, False, True),  # a job never heard of, long gone
    ],
)
def test_each_step_is_recorded_once(
    last: JobEventType | None, kind: JobEventType, known: bool, skip: bool
) -> None:
    from gpusched.dispatcher.dispatcher import Dispatcher

    d = SimpleNamespace(
        _recorded={} if last is None else {"j": last},
        scheduler=SimpleNamespace(jobs={"j": object()} if known else {}),
    )
    assert Dispatcher._already_recorded(d, "j", kind) is skip  # type: ignore[arg-type]


def test_a_rebuilt_dispatcher_knows_when_the_last_consolidation_move_was() -> None:
    from gpusched.core import MOVE_REASON, Preempt
    from gpusched.dispatcher.decisions import placement_decision
    from gpusched.dispatcher.rebuild import last_move

    def at(d: PlacementDecision, minute: int) -> PlacementDecision:
        return d.model_copy(update={"ts": datetime(2026, 12, 7, 12, minute, tzinfo=UTC)})

    moved = at(placement_decision(Preempt("a", f"{MOVE_REASON}empties n1"), "d1", 0), 1)
    preempted = at(placement_decision(Preempt("b", "for c (dynamic)"), "d2", 0), 2)
    assert last_move([]) == -math.inf
    assert last_move([preempted]) == -math.inf
    assert last_move([moved, preempted]) == moved.ts.timestamp()
