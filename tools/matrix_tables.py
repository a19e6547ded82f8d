"""Renders a scenario-matrix JSON (`make scenarios`, `make tune`) as the markdown tables
of docs/results.md: per set (validation first) the summary over scenarios, one row per
scenario and policy, and the targets.

python tools/matrix_tables.py .bench/scenarios.json
python tools/matrix_tables.py --sweep dynamic .bench/tune.json   # one row per variant
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpusched.sim.matrix import SETS
from gpusched.sim.targets import measured_text


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f}"


def _class(r: dict[str, Any], table: str, qos: str) -> float | None:
    entry = r.get(table, {}).get(qos)
    return None if entry is None else float(entry["avg_s"])


def render(doc: dict[str, Any]) -> str:
    out: list[str] = []
    for set_name in SETS:
        out.append(f"### {set_name} set\n")
        summary = doc["summary"].get(set_name, {})
        if summary:
            out.append(
                "| policy | avg JCT / tiresias: geomean | worst | p99 / tiresias: geomean | worst |"
            )
            out.append("|---|---|---|---|---|")
            for policy, f in summary.items():
                avg, p99 = f.get("avg_jct_s_vs_tiresias", {}), f.get("p99_jct_s_vs_tiresias", {})
                out.append(
                    f"| {policy} | {_x(avg.get('geomean'))} | {_x(avg.get('worst'))} | "
                    f"{_x(p99.get('geomean'))} | {_x(p99.get('worst'))} |"
                )
            out.append("")
        out.append(
            "| scenario | policy | avg JCT (h) | p99 JCT (h) | avg wait (h) | high wait (h) | "
            "normal JCT (h) | preempt | fairness | energy (MWh) | x tiresias avg | x srpt avg |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for name, sc in doc["scenarios"].items():
            if sc["set"] != set_name:
                continue
            for policy, r in sc["results"].items():
                refs = sc["ratios"].get(policy, {})
                out.append(
                    f"| {name} | {policy} | {_h(r['avg_jct_s'])} | {_h(r['p99_jct_s'])} | "
                    f"{_h(r['avg_wait_s'])} | {_h(_class(r, 'wait_by_qos', 'high'))} | "
                    f"{_h(_class(r, 'jct_by_qos', 'normal'))} | {r['preemptions']:,} | "
                    f"{r['fairness']:.3f} | {r['energy_kwh'] / 1000:,.1f} | "
                    f"{_x(refs.get('tiresias', {}).get('avg_jct_s'))} | "
                    f"{_x(refs.get('srpt-oracle', {}).get('avg_jct_s'))} |"
                )
        out.append("")
        checks = [c for c in doc.get("targets", []) if c["set"] == set_name]
        if checks:
            out.append("| scenario | target (dynamic / baseline) | measured | limit | met |")
            out.append("|---|---|---|---|---|")
            for c in checks:
                rule = ">=" if c.get("at_least") else "<="
                met = "yes" if c["met"] else "**no**"
                out.append(
                    f"| {c['scenario'] or '(all)'} | {c['target']} | "
                    f"{measured_text(c['measured'])} | {rule} {c['limit']:.2f} | {met} |"
                )
            out.append("")
    return "\n".join(out)


def sweep(doc: dict[str, Any], prefix: str) -> str:
    """One row per policy named ``prefix*`` and set: the matrix's own summary of its avg
    and p99 JCT ratios to tiresias (geomean, worst), the range of its preemption ratios,
    and its fairness where the scenario has several tenants."""
    out = [
        "| variant | avg JCT / tiresias: geomean | worst | p99: geomean | worst | "
        "preemptions / tiresias | fairness (tiresias) |",
        "|---|---|---|---|---|---|---|",
    ]
    for set_name in SETS:
        scenarios = [sc for sc in doc["scenarios"].values() if sc["set"] == set_name]
        for policy, f in doc["summary"].get(set_name, {}).items():
            if not policy.startswith(prefix):
                continue
            avg, p99 = f["avg_jct_s_vs_tiresias"], f["p99_jct_s_vs_tiresias"]
            pre = [sc["ratios"][policy]["tiresias"]["preemptions"] for sc in scenarios]
            known = [x for x in pre if x is not None]
            fair = [
                f"{sc['results'][policy]['fairness']:.2f} "
                f"({sc['results']['tiresias']['fairness']:.2f})"
                for sc in scenarios
                if sc["results"]["tiresias"]["fairness"] < 1.0
            ]
            out.append(
                f"| {policy} | {avg['geomean']:.3f} | {avg['worst']:.3f} | "
                f"{p99['geomean']:.3f} | {p99['worst']:.3f} | "
                f"{min(known, default=0):.2f}-{max(known, default=0):.2f} | "
                f"{', '.join(fair) or '-'} |"
            )
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--sweep"]:
        print(sweep(json.loads(Path(args[2]).read_text()), args[1]))
    else:
        for arg in args:
            print(render(json.loads(Path(arg).read_text())))
