"""The scenario matrix: a file of scenarios in a tune and a validation set, run in
worker processes through the same replay, compared by ratios and checked on targets."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpusched.cli.main import app
from gpusched.sim import SimError, traces_dir
from gpusched.sim.matrix import load_matrix
from gpusched.sim.targets import check_targets, measured_text
from gpusched.sim.traces import load_jobs
from tests.processes import running

REPO = Path(__file__).resolve().parents[2]
TRACES = traces_dir(REPO.parent / "shared" / "traces")

MATRIX = f"""
traces: {TRACES}
policies: [fifo, tiresias, srpt-oracle, dynamic]
variants:
  tiresias-t3600: {{policy: tiresias, params: {{tiresias_thresholds_gpu_s: [3600]}}}}
scenarios:
  - name: small-tune
    set: tune
    jobs: tiresias_60job.jobs.csv
    cluster: tiresias_16x4.cluster.csv
    time_scale: 8
    policies: [fifo, tiresias, tiresias-t3600, srpt-oracle, dynamic]
    tags: [queueing]
  - name: small-validation-window
    set: validation
    jobs: tiresias_60job.jobs.csv
    cluster: tiresias_16x4.cluster.csv
    window_s: [0, 900]
    max_gpus: 2
    tags: [queueing]
  - name: small-energy
    set: validation
    jobs: tiresias_60job.jobs.csv
    cluster: tiresias_16x4.cluster.csv
    policies: [fifo, tiresias, tiresias+powersave, dynamic]
    tags: [energy]
"""


def test_the_matrix_runs_every_scenario_and_policy(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX)
    out, reports = tmp_path / "m.json", tmp_path / "reports"
    result = CliRunner().invoke(
        app,
        ["replay", "--matrix", str(path), "--workers", "2", "--json", str(out),
         "--report", str(reports)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    scenarios = doc["scenarios"]
    assert set(scenarios) == {"small-tune", "small-validation-window", "small-energy"}
    tune = scenarios["small-tune"]
    assert set(tune["results"]) == {"fifo", "tiresias", "tiresias-t3600", "srpt-oracle", "dynamic"}
    assert tune["ratios"]["tiresias"]["tiresias"]["avg_jct_s"] == 1.0
    ratio = tune["ratios"]["dynamic"]["srpt-oracle"]["avg_jct_s"]
    assert (
        ratio
        == tune["results"]["dynamic"]["avg_jct_s"] / tune["results"]["srpt-oracle"]["avg_jct_s"]
    )
    window = scenarios["small-validation-window"]
    kept = [
        j
        for j in load_jobs(TRACES / "tiresias_60job.jobs.csv")
        if j.submit_time < 900 and j.request.num_gpu <= 2
    ]
    assert 0 < window["results"]["fifo"]["jobs"] == len(kept) < tune["results"]["fifo"]["jobs"]
    assert set(doc["summary"]) == {"tune", "validation"}
    assert doc["summary"]["tune"]["tiresias"]["avg_jct_s_vs_tiresias"]["geomean"] == 1.0
    checks = {(c["scenario"], c["target"]) for c in doc["targets"]}
    assert ("small-energy", "energy_kwh / tiresias+powersave") in checks
    assert doc["targets"][0]["set"] == "validation"  # the validation set first
    assert "targets of dynamic" in result.output
    assert doc["wall_s"] > 0
    assert f"matrix wall time: {doc['wall_s']:,.0f} s" in result.output
    rows = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert all(len(line) <= 80 and line[-1] in "┓┃┩│┘" for line in rows)  # 80 columns
    index = (reports / "index.html").read_text()
    for name in scenarios:
        assert f"href='{name}.html'" in index
        page = (reports / f"{name}.html").read_text()
        assert page.count('class="plotly-graph-div"') >= 5
    assert "tiresias-t3600" in (reports / "small-tune.html").read_text()


def test_a_bad_matrix_names_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MATRIX.replace("srpt-oracle, dynamic]", "srpt-oracle, lottery]"))
    with pytest.raises(SimError, match="unknown policy 'lottery'"):
        load_matrix(path)
    path.write_text(MATRIX.replace("set: tune", "set: train"))
    with pytest.raises(SimError, match="set"):
        load_matrix(path)


def test_the_committed_matrices_are_valid() -> None:
    for name in ("scenarios.yaml", "tune.yaml", "headroom-burst.yaml"):
        matrix, _ = load_matrix(REPO / "bench" / name)
        sets = {s.set for s in matrix.scenarios}
        assert sets == ({"tune", "validation"} if name == "scenarios.yaml" else {"tune"})


def _workers(pid: int) -> set[int]:
    """The pool workers ``pid`` has started (from /proc; not its resource tracker)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = {int(k) for k in (task / "children").read_text().split()}
        except OSError:
            continue  # it ended meanwhile
        for kid in kids:
            try:
                if b"spawn_main" in Path(f"/proc/{kid}/cmdline").read_bytes():
                    found.add(kid)
            except OSError:
                continue
    return found


def test_the_workers_end_when_the_matrix_process_is_killed(tmp_path: Path) -> None:
    """SIGKILL to the matrix process alone (no Ctrl-C to its process group) leaves no
    worker replaying for nobody: each worker ends with it. (The forecast's fit processes
    below a worker end with it in turn: test_forecaster's
    test_fit_processes_end_when_the_process_that_made_them_is_killed.)"""
    path = tmp_path / "m.yaml"
    path.write_text(
        f"traces: {TRACES}\npolicies: [dynamic, tiresias]\nscenarios:\n"
        "  - {name: long, set: tune, jobs: gavel_vced69ec.jobs.csv, "
        "cluster: v100_16gpu.cluster.csv}\n"
    )
    cmd = [str(Path(sys.executable).parent / "gpusched"), "replay", "--matrix", str(path),
           "--workers", "2", "--json", str(tmp_path / "m.json")]  # fmt: skip
    matrix = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(workers := _workers(matrix.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(workers) == 2, workers
        time.sleep(2)  # replaying
    finally:
        matrix.kill()
        matrix.wait()
    deadline = time.monotonic() + 30
    while (alive := {p for p in workers if running(p)}) and (time.monotonic() < deadline):
        time.sleep(0.2)
    left = [Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in alive]
    for pid in alive:  # so that a failure leaves no orphans behind either
        os.kill(pid, signal.SIGKILL)
    assert not left, left


def _classes_doc(ours: float, theirs: float) -> dict[str, Any]:
    def result(high_wait: float) -> dict[str, Any]:
        return {"wait_by_qos": {"high": {"avg_s": high_wait}}, "jct_by_qos": {}}

    scenario = {
        "set": "validation",
        "tags": ["classes"],
        "results": {"dynamic": result(ours), "tiresias-qos": result(theirs)},
    }
    return {"scenarios": {"s": scenario}, "summary": {}}


@pytest.mark.parametrize(
    ("ours", "theirs", "measured", "met"),
    [(0.0, 0.0, None, True), (0.5, 1.0, 0.5, True), (0.6, 1.0, 0.6, False),
     (0.01, 0.0, math.inf, False)],
)  # fmt: skip
def test_a_target_is_met_when_ours_is_within_limit_times_theirs(
    ours: float, theirs: float, measured: float | None, met: bool
) -> None:
    """`high` wait <= 0.5x tiresias-qos's: 0 s against 0 s is within half of it; any wait
    against a baseline of 0 is not; a ratio of 0 / 0 is shown as such, not as 1."""
    (check,) = check_targets(_classes_doc(ours, theirs))
    assert check.target == "high wait_by_qos / tiresias-qos"
    assert (check.measured, check.met) == (measured, met)
    assert measured_text(check.measured) == ("0 / 0" if measured is None else f"{measured:.3f}")
