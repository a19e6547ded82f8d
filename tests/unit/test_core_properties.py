"""Property tests of the scheduling core's invariants, over random clusters and jobs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpusched.core import (
    Job,
    NodeSpec,
    Place,
    Request,
    Scheduler,
    make_placement,
    make_policy,
)
from gpusched.core.model import EPS
from gpusched.core.policies import POLICIES

MODELS = ("V100", "T4", "A100")

nodes_st = st.lists(
    st.builds(
        lambda i, m, g, c: NodeSpec(f"n{i}", m, g, c, 256000),
        st.integers(0, 10**6),
        st.sampled_from(MODELS),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from([8000, 32000, 64000]),
    ),
    min_size=1,
    max_size=6,
    unique_by=lambda n: n.node_id,
)
requests_st = st.builds(
    Request,
    st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 2.0, 4.0, 8.0, 16.0]),
    st.sets(st.sampled_from(MODELS), max_size=2).map(frozenset),
    st.sampled_from([0, 1000, 4000, 16000]),
    st.sampled_from([0, 1024, 65536]),
)
jobs_st = st.lists(
    st.tuples(
        requests_st,
        st.floats(0, 5000),
        st.floats(1, 5000),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["high", "normal"]),
    ),
    min_size=1,
    max_size=25,
)


def _run(policy: str, placement: str, nodes: list[NodeSpec], specs: list) -> tuple[list, Scheduler]:
    durations = {f"j{i}": d for i, (_, _, d, _, _) in enumerate(specs)}
    sched = Scheduler(
        nodes, make_policy(policy, oracle=durations.__getitem__), make_placement(placement)
    )
    events: list[tuple[float, int, str]] = sorted(
        (submit, 1, f"j{i}") for i, (_, submit, _, _, _) in enumerate(specs)
    )
    log = []
    finish_at: dict[str, float] = {}
    t = 0.0
    for _ in range(400):
        due = [(ft, 0, jid) for jid, ft in finish_at.items()]
        pending_events = sorted(events + due)
        if not pending_events:
            break
        t, kind, jid = pending_events[0]
        if kind == 0:
            del finish_at[jid]
            sched.finish(jid, t)
        else:
            events.remove((t, kind, jid))
            req, submit, _, tenant, qos = specs[int(jid[1:])]
            sched.submit(Job(jid, req, submit, tenant, qos), t)
        result = sched.cycle(t, explain_pending=True)
        log.append((t, result))
        for d in result.decisions:
            if isinstance(d, Place):
                finish_at[d.job_id] = t + durations[d.job_id]
            elif type(d).__name__ == "Preempt":
                finish_at.pop(d.job_id, None)
            elif type(d).__name__ == "WakeNode":
                sched.node_ready(d.node_id, t)
        _check_invariants(sched, result)
    return log, sched


def _check_invariants(sched: Scheduler, result) -> None:
    for node in sched.state.nodes.values():
        assert all(-EPS <= f <= 1 + EPS for f in node.gpu_free), "GPU over-allocated"
        assert node.cpu_free >= 0, "CPU over-allocated"
        assert node.mem_free >= 0, "memory over-allocated"
    for d in result.decisions:
        if isinstance(d, Place):
            req = sched.jobs[d.job_id].request
            gpus = sum(
                len(a.gpu_indices) * (a.share if req.is_fraction else 1) for a in d.allocations
            )
            assert abs(gpus - req.num_gpu) < 1e-6, "a gang is all or nothing"
            for a in d.allocations:
                # A CPU-only request uses no GPU, so a GPU-model constraint does not bind it.
                assert req.num_gpu == 0 or req.allows(
                    sched.state.nodes[a.node_id].spec.gpu_model
                ), "forbidden model"
    assert set(result.pending) == set(sched.queue.ids()), "every pending job has a reason"
    assert all(r.message for r in result.pending.values())


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(sorted(POLICIES)),
    st.sampled_from(["spread", "bestfit", "fgd"]),
    nodes_st,
    jobs_st,
)
def test_invariants_hold_and_runs_repeat(policy: str, placement: str, nodes, specs) -> None:
    first, _ = _run(policy, placement, nodes, specs)
    second, _ = _run(policy, placement, nodes, specs)
    assert [(t, r.decisions) for t, r in first] == [(t, r.decisions) for t, r in second]
