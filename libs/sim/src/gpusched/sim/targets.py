"""The scheduling-quality targets, checked on a scenario matrix document.

Each target compares a policy (``dynamic``) with the strongest honest baseline for what
the target is about: ``tiresias`` for JCT, ``tiresias-qos`` for class waits,
``tiresias+powersave`` (and ``fifo``) for energy. A target whose baseline did not run in a
scenario is not checked there.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from gpusched.sim.matrix import SETS

__all__ = ["Check", "check_targets"]


@dataclass(frozen=True, slots=True)
class Check:
    set: str
    scenario: str  # "" for a target over the whole set
    target: str
    measured: float
    limit: float
    met: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _class_figure(result: dict[str, Any], table: str, qos: str) -> float | None:
    entry = result.get(table, {}).get(qos)
    return None if entry is None else float(entry["avg_s"])


def check_targets(doc: dict[str, Any], policy: str = "dynamic") -> list[Check]:
    """Every target of ``policy`` that the matrix document lets us check, validation
    set first."""
    checks: list[Check] = []
    for set_name in SETS:
        for name, sc in doc["scenarios"].items():
            if sc["set"] != set_name or policy not in sc["results"]:
                continue
            checks.extend(_scenario_checks(set_name, name, sc, policy))
        summary = doc["summary"].get(set_name, {}).get(policy, {}).get("avg_jct_s_vs_tiresias")
        if summary:
            geomean = summary["geomean"]
            checks.append(
                Check(set_name, "", "avg JCT / tiresias, geomean", geomean, 0.95, geomean <= 0.95)
            )
    return checks


def _le(
    set_name: str, scenario: str, target: str, a: float | None, b: float | None, factor: float
) -> list[Check]:
    if a is None or b is None:
        return []
    ratio = a / b if b else (1.0 if a == 0 else float("inf"))
    return [Check(set_name, scenario, target, ratio, factor, ratio <= factor + 1e-12)]


def _scenario_checks(set_name: str, name: str, sc: dict[str, Any], policy: str) -> list[Check]:
    results = sc["results"]
    ours = results[policy]
    tiresias = results.get("tiresias")
    checks: list[Check] = []
    if "queueing" in sc["tags"] and tiresias is not None:
        checks += _le(
            set_name, name, "avg JCT / tiresias", ours["avg_jct_s"], tiresias["avg_jct_s"], 1.02
        )
        checks += _le(
            set_name, name, "p99 JCT / tiresias", ours["p99_jct_s"], tiresias["p99_jct_s"], 1.0
        )
        checks += _le(
            set_name,
            name,
            "preemptions / tiresias",
            ours["preemptions"],
            tiresias["preemptions"],
            0.5,
        )
        checks += _le(
            set_name,
            name,
            "tiresias fairness / ours",
            tiresias["fairness"],
            ours["fairness"],
            1 / 0.9,
        )
    if "classes" in sc["tags"]:
        qos_ref = results.get("tiresias-qos")
        if qos_ref is not None:
            checks += _le(
                set_name,
                name,
                "high avg wait / tiresias-qos",
                _class_figure(ours, "wait_by_qos", "high"),
                _class_figure(qos_ref, "wait_by_qos", "high"),
                0.5,
            )
        if tiresias is not None:
            checks += _le(
                set_name,
                name,
                "normal avg JCT / tiresias",
                _class_figure(ours, "jct_by_qos", "normal"),
                _class_figure(tiresias, "jct_by_qos", "normal"),
                1.05,
            )
    if "energy" in sc["tags"]:
        saving = results.get("tiresias+powersave")
        if saving is not None:
            checks += _le(
                set_name,
                name,
                "energy / tiresias+powersave",
                ours["energy_kwh"],
                saving["energy_kwh"],
                1.0,
            )
            checks += _le(
                set_name,
                name,
                "avg wait / tiresias+powersave",
                ours["avg_wait_s"],
                saving["avg_wait_s"],
                1.0,
            )
        fifo = results.get("fifo")
        if fifo is not None:
            checks += _le(
                set_name, name, "energy / fifo", ours["energy_kwh"], fifo["energy_kwh"], 0.8
            )
    return checks
