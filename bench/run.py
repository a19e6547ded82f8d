"""Runs every benchmark module (bench/bench_*.py) and writes one flat JSON of figures.

Each module has ``run() -> dict[str, float]``; names carry their unit (``_s``, ``_ms``,
``_per_s``, ``_ratio``). Absolute figures on shared machines are noisy, so each module
also reports ratios against a baseline it measures in the same run.

    python bench/run.py --out .bench/results.json [--only contracts,store]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent


def _load(path: Path) -> object:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a worker process it spawns imports it by name
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path(".bench/results.json"))
    parser.add_argument("--only", default="", help="comma-separated module names, e.g. store")
    args = parser.parse_args(argv)
    wanted = {w for w in args.only.split(",") if w}
    results: dict[str, float] = {}
    console = Console()
    for path in sorted(HERE.glob("bench_*.py")):
        name = path.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        console.print(f"[bold]bench[/] {name} ...")
        figures = _load(path).run()  # type: ignore[attr-defined]
        clash = set(figures) & set(results)
        if clash:
            raise SystemExit(f"benchmark {name} repeats figure names {sorted(clash)}")
        results.update(figures)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    table = Table("figure", "value")
    for key, value in sorted(results.items()):
        table.add_row(key, f"{value:,.3f}")
    console.print(table)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
