"""Scheduling parameters: every weight and threshold by name, with its documented default.

``Params`` is a frozen value; ``Params.with_values({"dynamic.aging_weight": 2.0})`` gives a
new one (what the control topic does at run time). Unknown names are refused.

Every parameter has a one-line doc, a unit, bounds (``lo`` .. ``hi``, inclusive; for a
tuple of numbers, each element) and a ``dangerous`` flag (only an admin may change it:
it reorders classes, powers the whole cluster, or loads the scheduler). ``with_setting``,
the path of live changes, refuses a value outside its bounds naming the bound; the
processor and the dispatcher apply changes through it, so both re-check what the API
checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gpusched.core.errors import InvalidParameter, UnknownName

__all__ = ["ParamSpec", "Params"]


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """What a parameter is: its default, meaning, unit, bounds and whether it is dangerous."""

    name: str
    default: Any
    doc: str
    unit: str = ""
    lo: float | None = None
    hi: float | None = None
    dangerous: bool = False

    def check(self, value: Any) -> None:
        """``InvalidParameter`` naming the bound when ``value`` (or an element of it) is
        outside the bounds."""
        for v in value if isinstance(value, tuple) else (value,):
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            unit = f" {self.unit}" if self.unit else ""
            if math.isnan(v):
                raise InvalidParameter(f"parameter {self.name}: NaN is not a value")
            if self.lo is not None and v < self.lo:
                raise InvalidParameter(
                    f"parameter {self.name}: {v:g} is below its lower bound {self.lo:g}{unit}"
                )
            if self.hi is not None and v > self.hi:
                raise InvalidParameter(
                    f"parameter {self.name}: {v:g} is above its upper bound {self.hi:g}{unit}"
                )


def _p(
    default: Any,
    doc: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    unit: str = "",
    dangerous: bool = False,
) -> Any:
    meta = {"doc": doc, "unit": unit, "lo": lo, "hi": hi, "dangerous": dangerous}
    return field(default=default, metadata=meta)


@dataclass(frozen=True, slots=True)
class Params:
    """All policy parameters. Names in the control topic are ``<field>`` as written here."""

    # -- shared by every policy ---------------------------------------------------------
    preemption_cost_s: float = _p(
        120.0,
        "GPU time lost per preemption (checkpoint/restart); same for every policy",
        lo=0.0,
        hi=86400.0,
        unit="s",
    )
    max_scan: int = _p(
        500,
        "pending jobs tried per cycle after the first blocked one (Slurm bf_max_job_test)",
        lo=1,
        hi=100_000,
        unit="jobs",
        dangerous=True,
    )
    preempt_tries: int = _p(
        8, "blocked jobs per cycle for which preemption is tried", lo=0, hi=1000, unit="jobs"
    )
    reserve_depth: int = _p(
        8,
        "blocked jobs per cycle that get a reservation (backfill); a later job may use a "
        "reserved node if predicted to end before the reservation starts, or within the "
        "GPUs the node has to spare beyond the reservation",
        lo=0,
        hi=1000,
        unit="jobs",
    )
    predict_by_tenant: bool = _p(
        False,
        "run-time predictions from finished jobs of the same tenant and GPU-count class "
        "(False: of the same GPU-count class, every tenant; the tune set's choice: "
        "per-tenant histories rank a tenant of long jobs behind everyone)",
    )
    refresh_s: float = _p(
        600.0,
        "seconds between priority refreshes (fair share, predictions)",
        lo=1.0,
        hi=86400.0,
        unit="s",
        dangerous=True,
    )
    fairshare_half_life_s: float = _p(
        7 * 86400.0, "half-life of decayed tenant usage", lo=60.0, hi=365 * 86400.0, unit="s"
    )
    qos_classes: tuple[str, ...] = _p(
        ("high", "Guaranteed", "LS", "normal", "Burstable", "BE", ""),
        "QoS classes, highest first; unknown classes rank as the last",
        dangerous=True,
    )
    # -- backfill (Slurm multifactor) -----------------------------------------------------
    backfill_weight_age: float = _p(1000.0, "PriorityWeightAge", lo=0.0, hi=1e9)
    backfill_max_age_s: float = _p(
        7 * 86400.0,
        "PriorityMaxAge: age factor saturates here",
        lo=60.0,
        hi=365 * 86400.0,
        unit="s",
    )
    backfill_weight_fairshare: float = _p(10000.0, "PriorityWeightFairshare", lo=0.0, hi=1e9)
    backfill_weight_jobsize: float = _p(
        1000.0, "PriorityWeightJobSize (favours small jobs)", lo=0.0, hi=1e9
    )
    backfill_weight_qos: float = _p(10000.0, "PriorityWeightQOS", lo=0.0, hi=1e9)
    # -- tiresias (2D-LAS) ----------------------------------------------------------------
    tiresias_thresholds_gpu_s: tuple[float, ...] = _p(
        (3600.0 * 16,),
        "2D attained-service queue limits in GPU-seconds (K-1 values); the best of the "
        "sweep on the tune set (bench/tune.yaml)",
        lo=1.0,
        hi=1e9,
        unit="GPU-s",
    )
    tiresias_starve_factor: float = _p(
        10.0,
        "promote to the top queue, attained service reset, after waiting this many times "
        "its run time since the last promotion",
        lo=0.0,
        hi=1000.0,
    )
    tiresias_lease_s: float = _p(
        60.0,
        "shortest run before a job may be preempted (never below preemption_cost_s)",
        lo=0.0,
        hi=86400.0,
        unit="s",
    )
    # -- +powersave (Slurm power saving, for any policy) ------------------------------------
    powersave_suspend_time_s: float = _p(
        600.0,
        "SuspendTime: a node idle this long is suspended (parked); woken on demand",
        lo=60.0,
        hi=30 * 86400.0,
        unit="s",
    )
    # -- dynamic (ours) -------------------------------------------------------------------
    dynamic_qos_factor: float = _p(
        1e6,
        "rank divisor per QoS class step above the lowest class seen (1e6: a higher class "
        "runs first and may preempt a lower one, short of a million-fold rank)",
        lo=1.0,
        hi=1e9,
    )
    dynamic_fairshare_weight: float = _p(
        1.0,
        "how strongly a tenant above its fair share is held back (rank multiplier)",
        lo=0.0,
        hi=100.0,
    )
    dynamic_preempt_margin: float = _p(
        3.0,
        "preempt only when the victim's rank exceeds the job's times this factor (plus "
        "the restart's GPU time); the victim's earlier preemptions do not raise it",
        lo=1.0,
        hi=1000.0,
    )
    dynamic_preempt_wait: float = _p(
        1.0,
        "a blocked job preempts only once it has waited this many restart costs "
        "(preemption_cost_s; 1: rent before buying, as in ski rental), unless its class "
        "has headroom of its own (dynamic_headroom_classes): GPUs that free up meanwhile "
        "serve it with no restart lost",
        lo=0.0,
        hi=1000.0,
    )
    dynamic_guard_jobs: int = _p(
        4,
        "tail guard: at most this many long-waiting jobs rank first in their class and "
        "are not preempted until they end (0: no guard)",
        lo=0,
        hi=10_000,
        unit="jobs",
    )
    dynamic_guard_gpu_frac: float = _p(
        0.25,
        "tail guard: guarded jobs hold at most this fraction of the cluster's GPUs (at "
        "least one job is guarded); the tune set's choice among 1/16, 1/8 and 1/4",
        lo=0.0,
        hi=1.0,
    )
    dynamic_guard_quantile: float = _p(
        0.95,
        "tail guard: a pending job is guarded once it has waited longer than this "
        "quantile of recently finished jobs' waits",
        lo=0.5,
        hi=1.0,
    )
    dynamic_reserve_after_s: float = _p(
        float("inf"),
        "a blocked job gets a reservation (up to reserve_depth per cycle) only after "
        "waiting this long since submission (inf: never; the tune set's choice, "
        "docs/results.md)",
        lo=0.0,
        hi=float("inf"),
        unit="s",
    )
    dynamic_tick_s: float = _p(
        300.0,
        "seconds between timer cycles (preemption, power)",
        lo=1.0,
        hi=3600.0,
        unit="s",
        dangerous=True,
    )
    dynamic_headroom_gpus: float = _p(
        16.0,
        "idle GPUs kept on for arrivals (with a demand forecast, its predicted rise takes "
        "this headroom's place, unless dynamic_consolidate moved a job within "
        "dynamic_forecast_lookahead_s: then the larger of the two)",
        lo=0.0,
        hi=100_000.0,
        unit="GPUs",
    )
    dynamic_headroom_frac: float = _p(
        0.05,
        "more idle-on headroom as a share of GPUs in use (as dynamic_headroom_gpus)",
        lo=0.0,
        hi=1.0,
    )
    dynamic_park_after_s: float = _p(
        900.0, "an idle node is parked after this long", lo=60.0, hi=30 * 86400.0, unit="s"
    )
    dynamic_energy_aware: bool = _p(
        True, "park idle nodes and wake them ahead of demand", dangerous=True
    )
    dynamic_consolidate: bool = _p(
        False,
        "with no job waiting and some node parked, restart the jobs of lightly used nodes "
        "on nodes that already run jobs, when the power step would then park the node and "
        "the energy saved until they are expected to end exceeds their restarts' "
        "(preemption_cost_s at busy power); off by default: on the tune set it costs the "
        "queueing scenarios (docs/results.md)",
    )
    dynamic_headroom_classes: tuple[str, ...] = _p(
        ("high",),
        "classes whose jobs preempt rather than wait for a parked node to wake, and, with a "
        "demand forecast, whose predicted arrivals get headroom of their own on top of the "
        "predicted rise of all demand",
    )
    dynamic_forecast_park_after_s: float = _p(
        600.0,
        "with a demand forecast: an idle node not needed by it is parked after this long "
        "(Slurm's SuspendTime of +powersave, powersave_suspend_time_s)",
        lo=60.0,
        hi=30 * 86400.0,
        unit="s",
    )
    dynamic_forecast_lookahead_s: float = _p(
        3600.0,
        "with a demand forecast: a node is not parked if the rise predicted this far "
        "ahead would need it",
        lo=0.0,
        hi=86400.0,
        unit="s",
    )
    dynamic_forecast_burst_q: float = _p(
        0.9,
        "with a demand forecast: the headroom is at least this quantile of the rises of "
        "demand seen over a wake's lead (wake latency + dynamic_tick_s) in the last week, "
        "which a forecast on a 10-minute step does not see (0.9: the top of the "
        "forecaster's 80% interval; 0: none)",
        lo=0.0,
        hi=1.0,
    )

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def specs(cls) -> dict[str, ParamSpec]:
        """name -> its ``ParamSpec`` (default, doc, unit, bounds, dangerous)."""
        return {
            f.name: ParamSpec(
                f.name,
                f.default,
                f.metadata["doc"],
                f.metadata["unit"],
                f.metadata["lo"],
                f.metadata["hi"],
                f.metadata["dangerous"],
            )
            for f in fields(cls)
        }

    def with_values(self, values: dict[str, Any]) -> Params:
        """A copy with ``values`` set; an unknown name raises ``UnknownName``."""
        known = set(self.names())
        for name in values:
            if name not in known:
                raise UnknownName("parameter", name, sorted(known))
        return replace(self, **values)

    def with_setting(self, name: str, value: float | bool | str) -> Params:
        """A copy with one parameter set from a control-topic value, converted to the
        parameter's type (a tuple from comma-separated text); ``InvalidParameter`` says
        what was wrong, ``UnknownName`` lists the names."""
        specs = self.specs()
        if name not in specs:
            raise UnknownName("parameter", name, sorted(specs))
        spec = specs[name]
        kind: Any = type(spec.default)
        try:
            if kind is tuple:
                converted: Any = tuple(p.strip() for p in str(value).split(","))
            elif kind is bool:
                if str(value).lower() not in ("true", "false", "1", "0"):
                    raise ValueError("expected true or false")
                converted = str(value).lower() in ("true", "1")
            elif isinstance(value, bool):
                raise ValueError(f"expected a {kind.__name__}")
            else:
                converted = kind(value)
        except ValueError as exc:
            raise InvalidParameter(f"parameter {name}: {value!r} is not valid: {exc}") from exc
        if kind is tuple and all(isinstance(d, float) for d in spec.default):
            try:
                converted = tuple(float(v) for v in converted)
            except ValueError as exc:
                raise InvalidParameter(f"parameter {name}: {value!r} is not valid: {exc}") from exc
        spec.check(converted)
        return replace(self, **{name: converted})

    def qos_rank(self, qos: str) -> int:
        """0 for the highest class."""
        try:
            return self.qos_classes.index(qos)
        except ValueError:
            return len(self.qos_classes)
