"""Builders of scheduling-core values for tests: nodes and jobs in one line each."""

from __future__ import annotations

from gpusched.core import Job, NodeSpec, Request


def node(
    name: str, gpus: int = 8, model: str = "V100", cpu: int = 64000, mem: int = 512000
) -> NodeSpec:
    return NodeSpec(name, model, gpus, cpu, mem)


def job(
    name: str,
    gpus: float,
    submit: float = 0.0,
    models: str = "",
    tenant: str = "t",
    qos: str = "normal",
    cpu: int = 0,
    mem: int = 0,
) -> Job:
    """A job; ``models`` is the trace format's ``A|B`` list of allowed GPU models."""
    allowed = frozenset(m for m in models.split("|") if m)
    return Job(name, Request(gpus, allowed, cpu, mem), submit, tenant, qos)
