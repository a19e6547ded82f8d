"""A replay as one self-contained HTML page: a summary in hours and MWh with ratios to a
baseline policy and per-class columns, and interactive Plotly charts (JCT CDF per policy
and per class, queue length, power, allocated GPUs and parked nodes over time).

Plotly's JavaScript is embedded in the file once, so the page works offline.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from gpusched.sim.engine import RunResult

__all__ = ["write_index", "write_report"]

_HOUR, _KWH_PER_MWH = 3600.0, 1000.0
# (header, result key, unit divisor); ratios to the baseline for the first three
_SUMMARY = (
    ("avg JCT h", "avg_jct_s", _HOUR),
    ("p99 JCT h", "p99_jct_s", _HOUR),
    ("energy MWh", "energy_kwh", _KWH_PER_MWH),
    ("avg wait h", "avg_wait_s", _HOUR),
    ("above floor MWh", "idle_energy_kwh", _KWH_PER_MWH),
    ("util", "gpu_util", 1.0),
    ("preemptions", "preemptions", 1.0),
    ("fairness", "fairness", 1.0),
    ("jobs", "jobs", 1.0),
)
_RATIOS = 3
_SERIES = (
    ("Queue length", 1, "pending jobs"),
    ("Cluster power", 2, "kW"),
    ("Allocated GPUs", 3, "GPUs"),
    ("Nodes parked or waking", 4, "nodes"),
)
_STYLE = (
    "body{font-family:sans-serif;margin:1.5em;max-width:1100px}"
    "table{border-collapse:collapse;margin:1em 0}"
    "td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}"
    "th:first-child,td:first-child{text-align:left}"
    ".base{font-weight:bold}.note{color:#555}"
)


_COUNTS = ("jobs", "preemptions")


def _number(value: float, key: str = "") -> str:
    """Counts whole; ratios and small figures with two decimals, larger with one."""
    if key in _COUNTS:
        return f"{value:,.0f}"
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.1f}"


def _summary(doc: dict[str, Any], baseline: str | None) -> str:
    base = doc["results"].get(baseline) if baseline else None
    head = [c[0] for c in _SUMMARY]
    if base is not None:
        head[_RATIOS:_RATIOS] = [f"{c[0].split()[0]} {c[0].split()[1]} ÷ {baseline}"
                                 for c in _SUMMARY[:_RATIOS]]  # fmt: skip
    rows = []
    for name, r in doc["results"].items():
        cells = [_number(float(r[key]) / unit, key) for _, key, unit in _SUMMARY]
        if base is not None:
            ratios = [
                f"{float(r[key]) / float(base[key]):.2f}" if float(base[key]) else "-"
                for _, key, _ in _SUMMARY[:_RATIOS]
            ]
            cells[_RATIOS:_RATIOS] = ratios
        css = " class='base'" if name == baseline else ""
        tds = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(f"<tr{css}><td>{html.escape(name)}</td>{tds}</tr>")
    ths = "".join(f"<th>{html.escape(h)}</th>" for h in ["policy", *head])
    return f"<table><tr>{ths}</tr>{''.join(rows)}</table>"


def _classes(doc: dict[str, Any]) -> str:
    classes = sorted({q for r in doc["results"].values() for q in r.get("jct_by_qos", {})})
    if not classes:
        return ""
    head = "".join(
        f"<th>{html.escape(q)} {what} h</th>" for q in classes for what in ("avg JCT", "avg wait")
    )
    rows = []
    for name, r in doc["results"].items():
        cells = []
        for q in classes:
            for key in ("jct_by_qos", "wait_by_qos"):
                value = r.get(key, {}).get(q)
                cells.append(_number(value["avg_s"] / _HOUR) if value else "-")
        tds = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(f"<tr><td>{html.escape(name)}</td>{tds}</tr>")
    return f"<h2>By priority class</h2><table><tr><th>policy</th>{head}</tr>{''.join(rows)}</table>"


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    """Points of the empirical CDF, at most ~2,000 (enough for the eye, small in the file)."""
    values = sorted(values)
    n = len(values)
    if not n:
        return [], []
    picks = list(range(0, n, max(n // 2000, 1)))
    if picks[-1] != n - 1:
        picks.append(n - 1)
    return [values[i] for i in picks], [(i + 1) / n for i in picks]


def _figures(runs: dict[str, RunResult]) -> list[tuple[str, go.Figure]]:
    out: list[tuple[str, go.Figure]] = []
    fig = go.Figure()
    for name, run in runs.items():
        xs, ys = _cdf([(o.finish - o.submit) / _HOUR for o in run.outcomes])
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name))
    fig.update_xaxes(type="log", title="job completion time (h)")
    fig.update_yaxes(title="fraction of jobs")
    out.append(("JCT CDF, every job", fig))
    classes = sorted({o.qos for run in runs.values() for o in run.outcomes})
    if len(classes) > 1:
        for q in classes:
            fig = go.Figure()
            for name, run in runs.items():
                jcts = [(o.finish - o.submit) / _HOUR for o in run.outcomes if o.qos == q]
                xs, ys = _cdf(jcts)
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=name))
            fig.update_xaxes(type="log", title="job completion time (h)")
            fig.update_yaxes(title="fraction of jobs")
            out.append((f"JCT CDF, class {q}", fig))
    for title, index, unit in _SERIES:
        fig = go.Figure()
        for name, run in runs.items():
            scale = 1 / 1000 if unit == "kW" else 1.0
            fig.add_trace(
                go.Scatter(
                    x=[s[0] / _HOUR for s in run.series],
                    y=[s[index] * scale for s in run.series],
                    mode="lines",
                    name=name,
                )
            )
        fig.update_xaxes(title="hours since the trace's first arrival")
        fig.update_yaxes(title=unit)
        out.append((f"{title} over time", fig))
    for _, fig in out:
        fig.update_layout(height=360, margin={"l": 60, "r": 20, "t": 20, "b": 50})
    return out


def write_report(
    path: Path, doc: dict[str, Any], runs: dict[str, RunResult], baseline: str | None = None
) -> None:
    """Write the replay ``doc`` (the JSON contract) and charts of ``runs`` as one HTML file.
    ``baseline`` (a policy of the replay; default tiresias when replayed) is the
    denominator of the ratio columns."""
    if baseline is None and "tiresias" in doc["results"]:
        baseline = "tiresias"
    if baseline is not None and baseline not in doc["results"]:
        raise ValueError(f"baseline {baseline!r} is not among the replayed policies")
    charts = []
    for i, (title, fig) in enumerate(_figures(runs)):
        body = fig.to_html(full_html=False, include_plotlyjs=i == 0, config={"responsive": True})
        charts.append(f"<h2>{html.escape(title)}</h2>{body}")
    base = f" Ratios are to <b>{html.escape(baseline)}</b>." if baseline else ""
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>gpusched replay: {html.escape(doc['trace'])}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(doc['trace'])} on {html.escape(doc['cluster'])} "
        f"({html.escape(doc['experiment'])})</h1>"
        f"<p class='note'>Times in hours; energy in MWh from the power model "
        f"(docs/scheduling.md).{base} The charts are interactive: drag to zoom, click a "
        f"legend entry to hide a policy.</p>"
        f"{_summary(doc, baseline)}{_classes(doc)}{''.join(charts)}</body></html>"
    )


def write_index(path: Path, scenarios: dict[str, dict[str, Any]]) -> None:
    """The page of a scenario matrix: each scenario (set, tags) linking its report, with
    every policy's avg JCT relative to tiresias where tiresias ran."""
    policies = list(dict.fromkeys(p for sc in scenarios.values() for p in sc["results"]))
    rows = []
    for name, sc in scenarios.items():
        cells = []
        for policy in policies:
            ratio = sc["ratios"].get(policy, {}).get("tiresias", {}).get("avg_jct_s")
            cells.append(f"<td>{ratio:.2f}</td>" if ratio is not None else "<td>-</td>")
        link = f"<a href='{html.escape(name)}.html'>{html.escape(name)}</a>"
        tags = html.escape(", ".join(sc.get("tags", [])))
        rows.append(
            f"<tr><td>{link}</td><td>{html.escape(sc['set'])}</td><td>{tags}</td>"
            f"{''.join(cells)}</tr>"
        )
    head = "".join(f"<th>{html.escape(p)}</th>" for p in policies)
    path.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>gpusched scenarios</title>"
        f"<style>{_STYLE}</style></head><body><h1>Scenario matrix</h1>"
        "<p class='note'>Avg JCT of each policy ÷ tiresias's on the same scenario (lower is "
        "better); each scenario's page has the rest.</p>"
        f"<table><tr><th>scenario</th><th>set</th><th>tags</th>{head}</tr>{''.join(rows)}"
        "</table></body></html>"
    )
