"""The scheduling-quality targets, checked on a scenario matrix document.

Each target compares a policy (``dynamic``) with the strongest honest baseline for what
the target is about: ``tiresias`` for JCT, ``tiresias-qos`` for class waits,
``tiresias+powersave`` (and ``fifo``) for energy. A target whose baseline did not run in a
scenario is not checked there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from gpusched.sim.matrix import SETS

__all__ = ["TARGETS", "Check", "Target", "check_targets", "measured_text"]


@dataclass(frozen=True, slots=True)
class Check:
    set: str
    scenario: str  # "" for a target over the whole set
    target: str
    measured: float | None  # ours / baseline's; None when both are 0 (0 / 0)
    limit: float
    met: bool
    at_least: bool = False  # the measure must reach the limit (else: stay within it)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Target:
    """ours / baseline's ``figure`` (of class ``qos`` when set) within ``limit``, in every
    scenario tagged ``tag``: at most the limit, or at least it when higher is better."""

    tag: str
    baseline: str
    figure: str
    limit: float
    qos: str = ""
    higher_is_better: bool = False

    @property
    def label(self) -> str:
        what = f"{self.qos} {self.figure}" if self.qos else self.figure
        return f"{what} / {self.baseline}"

    def value(self, result: dict[str, Any]) -> float | None:
        if not self.qos:
            return float(result[self.figure])
        entry = result.get(self.figure, {}).get(self.qos)
        return None if entry is None else float(entry["avg_s"])


TARGETS = (
    Target("queueing", "tiresias", "avg_jct_s", 1.02),
    Target("queueing", "tiresias", "p99_jct_s", 1.0),
    Target("queueing", "tiresias", "preemptions", 0.5),
    Target("queueing", "tiresias", "fairness", 0.9, higher_is_better=True),
    Target("classes", "tiresias-qos", "wait_by_qos", 0.5, qos="high"),
    Target("classes", "tiresias", "jct_by_qos", 1.05, qos="normal"),
    Target("energy", "tiresias+powersave", "energy_kwh", 1.0),
    Target("energy", "tiresias+powersave", "avg_wait_s", 1.0),
    Target("energy", "fifo", "energy_kwh", 0.8),
)
GEOMEAN_LIMIT = 0.95  # avg JCT / tiresias, geometric mean over a set's queueing scenarios


def check_targets(doc: dict[str, Any], policy: str = "dynamic") -> list[Check]:
    """Every target of ``policy`` that the matrix document lets us check, validation
    set first."""
    checks: list[Check] = []
    for set_name in SETS:
        for name, sc in doc["scenarios"].items():
            if sc["set"] != set_name or policy not in sc["results"]:
                continue
            for target in TARGETS:
                check = _check(set_name, name, sc, policy, target)
                if check is not None:
                    checks.append(check)
        summary = doc["summary"].get(set_name, {}).get(policy, {}).get("avg_jct_s_vs_tiresias")
        if summary:
            geomean = summary["geomean"]
            label = "avg_jct_s / tiresias, geomean"
            checks.append(
                Check(set_name, "", label, geomean, GEOMEAN_LIMIT, geomean <= GEOMEAN_LIMIT)
            )
    return checks


def _check(
    set_name: str, name: str, sc: dict[str, Any], policy: str, target: Target
) -> Check | None:
    baseline = sc["results"].get(target.baseline)
    if target.tag not in sc["tags"] or baseline is None:
        return None
    ours, theirs = target.value(sc["results"][policy]), target.value(baseline)
    if ours is None or theirs is None:
        return None
    # Met when ours is within (or reaches) limit x theirs, so that 0 against 0 is met by
    # "at most half of it" and an ours > 0 against a baseline of 0 is not.
    bar = target.limit * theirs
    met = ours >= bar if target.higher_is_better else ours <= bar + 1e-12 * abs(theirs)
    ratio = ours / theirs if theirs else (None if ours == 0 else math.inf)
    return Check(set_name, name, target.label, ratio, target.limit, met, target.higher_is_better)


def measured_text(measured: float | None) -> str:
    """A check's measure for a table: the ratio, or "0 / 0" when both figures are 0."""
    return "0 / 0" if measured is None else f"{measured:.3f}"
