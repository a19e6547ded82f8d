"""Renders replay JSON files as the markdown tables of docs/results.md.

python tools/results_table.py .bench/philly_dev_512.json [more.json ...]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
    ("avg JCT (h)", lambda r: r["avg_jct_s"] / 3600),
    ("p99 JCT (h)", lambda r: r["p99_jct_s"] / 3600),
    ("avg wait (h)", lambda r: r["avg_wait_s"] / 3600),
    ("high avg wait (h)", lambda r: r["wait_by_qos"].get("high", {}).get("avg_s", 0) / 3600),
    ("normal avg JCT (h)", lambda r: r["jct_by_qos"].get("normal", {}).get("avg_s", 0) / 3600),
    ("preemptions", lambda r: r["preemptions"]),
    ("GPU util", lambda r: r["gpu_util"]),
    ("energy (MWh)", lambda r: r["energy_kwh"] / 1000),
    ("above floor (MWh)", lambda r: r["idle_energy_kwh"] / 1000),
    ("fairness", lambda r: r["fairness"]),
    ("sim wall (s)", lambda r: r["sim_wall_s"]),
)


def table(doc: dict[str, Any]) -> str:
    head = f"**{doc['trace']}** on **{doc['cluster']}** ({doc['experiment']}, "
    head += f"placement {doc.get('placement', 'bestfit')}, time scale {doc.get('time_scale', 1)})"
    lines = [head, "", "| policy | " + " | ".join(c for c, _ in COLUMNS) + " |"]
    lines.append("|---" * (len(COLUMNS) + 1) + "|")
    for name, r in doc["results"].items():
        cells = []
        for _, get in COLUMNS:
            v = get(r)
            cells.append(f"{v:,.3f}" if isinstance(v, float) else f"{v:,}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(json.loads(Path(p).read_text())) for p in sys.argv[1:]))
