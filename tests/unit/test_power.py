"""The power model covers every GPU model and integrates energy exactly."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from gpusched.core import EnergyMeter, NodeSpec, PowerModel, PowerState
from gpusched.core.cluster import ClusterState
from gpusched.core.model import Allocation
from gpusched.sim import traces_dir

REPO = Path(__file__).resolve().parents[2]
TRACES = traces_dir(REPO.parent / "shared" / "traces")


def test_every_gpu_model_of_the_traces_and_recent_ones_is_in_the_model() -> None:
    model = PowerModel()
    seen = {"A100", "H100", "H200"}
    for path in TRACES.glob("*.cluster.csv"):
        with path.open() as f:
            seen |= {row["gpu_type"] for row in csv.DictReader(f) if row["gpu_type"]}
    assert seen <= set(model.gpus), seen - set(model.gpus)
    for gpu in model.gpus.values():
        assert 0 < gpu.idle_w < gpu.busy_w


def test_node_power_by_state() -> None:
    model = PowerModel()
    state = ClusterState([NodeSpec("n", "V100", 8, 64000, 512000)])
    node = state.nodes["n"]
    v100, host = model.gpu("V100"), model.host(8)
    assert model.node(node).total_w == host.host_idle_w + 8 * v100.idle_w
    state.allocate("j", [Allocation("n", (0, 1), 1.0, 0, 0)])
    split = model.node(node)
    assert split.floor_w == host.host_busy_w + 2 * v100.busy_w
    assert split.total_w == split.floor_w + 6 * v100.idle_w
    state.release("j", [Allocation("n", (0, 1), 1.0, 0, 0)])
    state.set_power("n", PowerState.PARKED)
    assert model.node(node).total_w == host.parked_w


def test_energy_meter_integrates_piecewise_constant_power_over_the_window() -> None:
    meter = EnergyMeter(start=10.0, end=40.0)
    meter.advance(0.0)
    meter.set_power(100.0, 60.0)  # 0..20: only 10..20 counts
    meter.advance(20.0)
    meter.set_power(50.0, 50.0)  # 20..50: only 20..40 counts
    meter.advance(50.0)
    assert meter.total_j == pytest.approx(100 * 10 + 50 * 20)
    assert meter.floor_j == pytest.approx(60 * 10 + 50 * 20)
    assert meter.idle_j == pytest.approx(40 * 10)


def test_all_on_follows_every_power_change_and_its_rollback() -> None:
    specs = [NodeSpec(f"n{i}", "V100", 8, 64000, 512000) for i in range(3)]
    state = ClusterState(specs)
    assert state.all_on()
    state.set_power("n0", PowerState.PARKED)
    state.set_power("n1", PowerState.WAKING, ready_at=10.0)
    assert not state.all_on()
    mark = state.checkpoint()
    state.set_power("n0", PowerState.ON)
    state.set_power("n1", PowerState.ON)
    assert state.all_on()
    state.rollback(mark)
    state.commit()
    assert not state.all_on()
    state.set_power("n0", PowerState.ON)
    assert not state.all_on()  # n1 is still waking
    state.set_power("n1", PowerState.ON)
    assert state.all_on()
