"""The overview heat map's state of each GPU, from a node's live view."""

from __future__ import annotations

from gpusched.api.console import GPU_STATES, gpu_cells
from gpusched.api.listing import NodeRow


def _node(free: float, stale: int = 0, errors: int = 0, power: str = "on") -> NodeRow:
    return NodeRow("n0", "V100", 8, free, power, not (stale or errors), [], stale, errors)


def test_every_gpu_has_one_state() -> None:
    assert gpu_cells(_node(free=8)) == ["idle"] * 8
    assert gpu_cells(_node(free=2.5)) == ["allocated"] * 6 + ["idle"] * 2  # a share: used
    assert gpu_cells(_node(free=0, stale=2)) == ["allocated"] * 6 + ["stale"] * 2
    assert gpu_cells(_node(free=3, stale=1, errors=2)) == (
        ["allocated"] * 2 + ["idle"] * 3 + ["stale"] + ["ecc"] * 2
    )
    assert gpu_cells(_node(free=8, power="parked")) == ["parked"] * 8
    for node in (_node(free=1, stale=3, errors=5), _node(free=0, errors=8)):
        cells = gpu_cells(node)
        assert len(cells) == 8
        assert set(cells) <= set(GPU_STATES)
