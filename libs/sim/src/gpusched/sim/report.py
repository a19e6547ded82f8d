"""HTML report of a replay: a table and plots (JCT CDF, queue length, power, utilization)."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from gpusched.sim.engine import RunResult

__all__ = ["write_report"]

_COLUMNS = (
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_wait_s",
    "p99_wait_s",
    "makespan_s",
    "gpu_util",
    "energy_kwh",
    "idle_energy_kwh",
    "floor_energy_kwh",
    "preemptions",
    "fairness",
    "sim_wall_s",
)


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _plots(runs: dict[str, RunResult]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, run in runs.items():
        jcts = sorted(o.finish - o.submit for o in run.outcomes)
        if jcts:
            ax.plot(jcts, [(i + 1) / len(jcts) for i in range(len(jcts))], label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.legend()
    out.append(("JCT CDF", _png(fig)))
    for title, index, label in (
        ("Queue length over time", 1, "pending jobs"),
        ("Cluster power over time", 2, "watts"),
        ("Allocated GPUs over time", 3, "GPUs"),
    ):
        fig, ax = plt.subplots(figsize=(7, 3.5))
        for name, run in runs.items():
            ax.plot([s[0] / 3600 for s in run.series], [s[index] for s in run.series], label=name)
        ax.set_xlabel("hours since trace start")
        ax.set_ylabel(label)
        ax.legend()
        out.append((title, _png(fig)))
    return out


def write_report(path: Path, doc: dict[str, Any], runs: dict[str, RunResult]) -> None:
    """Write the replay ``doc`` (the JSON contract) and plots of ``runs`` as one HTML file."""
    rows = []
    for name, r in doc["results"].items():
        cells = "".join(
            f"<td>{r[c]:,.3f}</td>" if isinstance(r[c], float) else f"<td>{r[c]}</td>"
            for c in _COLUMNS
        )
        rows.append(f"<tr><th>{html.escape(name)}</th>{cells}</tr>")
    head = "".join(f"<th>{c}</th>" for c in _COLUMNS)
    plots = "".join(
        f"<h2>{html.escape(t)}</h2><img alt='{html.escape(t)}' src='data:image/png;base64,{img}'>"
        for t, img in _plots(runs)
    )
    path.write_text(
        "<!doctype html><meta charset='utf-8'>"
        f"<title>gpusched replay: {html.escape(doc['trace'])}</title>"
        "<style>body{font-family:sans-serif} td,th{padding:2px 6px;text-align:right}</style>"
        f"<h1>{html.escape(doc['trace'])} on {html.escape(doc['cluster'])} "
        f"({html.escape(doc['experiment'])})</h1>"
        f"<table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>{plots}"
    )
