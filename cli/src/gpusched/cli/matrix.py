"""``gpusched replay --matrix FILE``: the scenario matrix with one progress display, a
table per scenario, the summary over scenarios and the targets."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import TaskID
from rich.table import Table

from gpusched.cli.progress import progress_bar
from gpusched.cli.tables import fitted_table
from gpusched.forecaster import ForecastOutlook
from gpusched.sim.matrix import SETS, load_matrix, run_matrix
from gpusched.sim.targets import check_targets, measured_text

__all__ = ["run_matrix_command"]


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:,.2f}"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}"


def run_matrix_command(
    path: Path,
    json_out: Path,
    sets: list[str],
    workers: int | None,
    console: Console,
    report_dir: Path | None = None,
    wide: bool = False,
) -> dict[str, Any]:
    """Run the matrix of ``path`` and print its tables; the document written to
    ``json_out`` (and, with ``report_dir``, a report per scenario and an index page)."""
    matrix, traces = load_matrix(path)
    start = time.perf_counter()
    with progress_bar(console) as progress:
        overall = progress.add_task("all runs", total=0)
        rows: dict[str, tuple[TaskID, int]] = {}  # run -> (its bar, its jobs)
        done: dict[str, int] = {}  # run -> jobs replayed so far
        total = 0

        def on_event(kind: str, key: str, n: int) -> None:
            nonlocal total
            if kind == "start":
                total += n
                progress.update(overall, total=total)
                rows[key] = (progress.add_task(f"  {key}", total=n, visible=False), n)
                done[key] = 0
            elif kind == "advance":
                progress.update(rows[key][0], advance=n, visible=True)
                progress.advance(overall, n)
                done[key] += n
            else:
                task_id, size = rows.pop(key)
                progress.advance(overall, size - done.pop(key))
                progress.remove_task(task_id)
                if not console.is_terminal:  # a log line where no bar is drawn
                    console.print(f"done {key} ({len(rows)} runs left)")

        doc = run_matrix(
            matrix, traces, set(sets), workers, on_event, report_dir, ForecastOutlook.from_settings
        )
    doc["matrix"] = str(path)
    # the whole matrix's wall time (issue 11's speed target): with each run's sim_wall_s,
    # the only figures two runs of one matrix do not share
    doc["wall_s"] = time.perf_counter() - start
    doc["targets"] = [c.as_dict() for c in check_targets(doc)]
    json_out.parent.mkdir(parents=True, exist_ok=True)
    json_out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    out = Console()
    for set_name in SETS:
        for name, sc in doc["scenarios"].items():
            if sc["set"] == set_name:
                out.print(_scenario_table(name, sc, wide))
    out.print(_summary_table(doc))
    out.print(_targets_table(doc))
    out.print(f"matrix wall time: {doc['wall_s']:,.0f} s")
    return doc


def _scenario_table(name: str, sc: dict[str, Any], wide: bool = False) -> Table:
    """Avg/p99 JCT, wait, energy and the ratio to tiresias within 80 columns; ``wide``
    adds per-class JCT/wait, preemptions, fairness and the other ratios."""
    window = f", window {sc['window_s']}" if sc.get("window_s") else ""
    window += f", jobs of <= {sc['max_gpus']:g} GPUs" if sc.get("max_gpus") else ""
    title = f"[{sc['set']}] {name}: {sc['jobs']} on {sc['cluster']}{window}"
    classes = sorted(
        {q for r in sc["results"].values() for q in r.get("jct_by_qos", {})}
        if wide and "classes" in sc["tags"]
        else set()
    )
    header = ["policy", "avg\nJCT h", "p99\nJCT h", "avg\nwait h", "MWh", "avg\n÷ tir"]
    if wide:
        header += [f"{q}\nJCT/wait h" for q in classes]
        header += ["pre-\nempt", "fair", "p99\n÷ tir", "avg\n÷ srpt"]
    rows = []
    for policy, r in sc["results"].items():
        refs = sc["ratios"].get(policy, {})
        cells = [
            policy,
            _h(r["avg_jct_s"]),
            _h(r["p99_jct_s"]),
            _h(r["avg_wait_s"]),
            f"{r['energy_kwh'] / 1000:,.1f}",
            _x(refs.get("tiresias", {}).get("avg_jct_s")),
        ]
        if wide:
            for q in classes:
                jct = r["jct_by_qos"].get(q, {}).get("avg_s")
                wait = r["wait_by_qos"].get(q, {}).get("avg_s")
                cells.append(f"{_h(jct)}/{_h(wait)}")
            cells += [
                f"{r['preemptions']:,}",
                f"{r['fairness']:.2f}",
                _x(refs.get("tiresias", {}).get("p99_jct_s")),
                _x(refs.get("srpt-oracle", {}).get("avg_jct_s")),
            ]
        rows.append(cells)
    return fitted_table(title, header, rows, title_justify="left")


def _summary_table(doc: dict[str, Any]) -> Table:
    table = Table(title="over queueing scenarios: JCT / tiresias", title_justify="left")
    for col in ("set", "policy", "avg geomean", "avg worst", "p99 geomean", "p99 worst", "n"):
        table.add_column(col, justify="right" if col not in ("set", "policy") else "left")
    for set_name in SETS:
        for policy, figures in doc["summary"].get(set_name, {}).items():
            avg = figures.get("avg_jct_s_vs_tiresias", {})
            p99 = figures.get("p99_jct_s_vs_tiresias", {})
            table.add_row(
                set_name,
                policy,
                _x(avg.get("geomean")),
                _x(avg.get("worst")),
                _x(p99.get("geomean")),
                _x(p99.get("worst")),
                str(avg.get("scenarios", 0)),
            )
    return table


def _targets_table(doc: dict[str, Any]) -> Table:
    rows = [
        [
            c["set"],
            c["scenario"] or "(all)",
            c["target"],
            measured_text(c["measured"]),
            f"{'>=' if c.get('at_least') else '<='} {c['limit']:.2f}",
            "yes" if c["met"] else "NO",
        ]
        for c in doc["targets"]
    ]
    header = ["set", "scenario", "target", "measured", "limit", "met"]
    return fitted_table("targets of dynamic", header, rows, wrap=3, title_justify="left")
