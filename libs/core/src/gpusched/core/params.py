"""Scheduling parameters: every weight and threshold by name, with its documented default.

``Params`` is a frozen value; ``Params.with_values({"dynamic.aging_weight": 2.0})`` gives a
new one (what the control topic does at run time). Unknown names are refused.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from gpusched.core.errors import InvalidParameter, UnknownName

__all__ = ["Params"]


def _p(default: Any, doc: str) -> Any:
    from dataclasses import field

    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class Params:
    """All policy parameters. Names in the control topic are ``<field>`` as written here."""

    # -- shared by every policy ---------------------------------------------------------
    preemption_cost_s: float = _p(
        120.0, "GPU time lost per preemption (checkpoint/restart); same for every policy"
    )
    max_scan: int = _p(
        500, "pending jobs tried per cycle after the first blocked one (Slurm bf_max_job_test)"
    )
    preempt_tries: int = _p(8, "blocked jobs per cycle for which preemption is tried")
    reserve_depth: int = _p(
        8,
        "blocked jobs per cycle that get a reservation (backfill); a later job may use a "
        "reserved node if predicted to end before the reservation starts, or within the "
        "GPUs the node has to spare beyond the reservation",
    )
    predict_by_tenant: bool = _p(
        True,
        "run-time predictions from finished jobs of the same tenant and GPU-count class "
        "(False: of the same GPU-count class, every tenant)",
    )
    refresh_s: float = _p(600.0, "seconds between priority refreshes (fair share, predictions)")
    fairshare_half_life_s: float = _p(7 * 86400.0, "half-life of decayed tenant usage")
    qos_classes: tuple[str, ...] = _p(
        ("high", "Guaranteed", "LS", "normal", "Burstable", "BE", ""),
        "QoS classes, highest first; unknown classes rank as the last",
    )
    # -- backfill (Slurm multifactor) -----------------------------------------------------
    backfill_weight_age: float = _p(1000.0, "PriorityWeightAge")
    backfill_max_age_s: float = _p(7 * 86400.0, "PriorityMaxAge: age factor saturates here")
    backfill_weight_fairshare: float = _p(10000.0, "PriorityWeightFairshare")
    backfill_weight_jobsize: float = _p(1000.0, "PriorityWeightJobSize (favours small jobs)")
    backfill_weight_qos: float = _p(10000.0, "PriorityWeightQOS")
    # -- tiresias (2D-LAS) ----------------------------------------------------------------
    tiresias_thresholds_gpu_s: tuple[float, ...] = _p(
        (3600.0 * 16,),
        "2D attained-service queue limits in GPU-seconds (K-1 values); the best of the "
        "sweep on the tune set (bench/tune.yaml)",
    )
    tiresias_starve_factor: float = _p(
        10.0,
        "promote to the top queue, attained service reset, after waiting this many times "
        "its run time since the last promotion",
    )
    tiresias_lease_s: float = _p(
        60.0, "shortest run before a job may be preempted (never below preemption_cost_s)"
    )
    # -- +powersave (Slurm power saving, for any policy) ------------------------------------
    powersave_suspend_time_s: float = _p(
        600.0, "SuspendTime: a node idle this long is suspended (parked); woken on demand"
    )
    # -- dynamic (ours) -------------------------------------------------------------------
    dynamic_aging_s: float = _p(
        4 * 3600.0, "wait that halves a job's rank time (aging: no job starves)"
    )
    dynamic_qos_factor: float = _p(
        30.0, "rank-time divisor per QoS class step above the lowest class seen"
    )
    dynamic_fairshare_weight: float = _p(
        1.0, "how strongly a tenant above its fair share is held back (rank-time multiplier)"
    )
    dynamic_preempt_margin: float = _p(
        3.0,
        "preempt only when the victim's expected remaining GPU-time exceeds the job's "
        "by this factor (plus the restart cost)",
    )
    dynamic_min_run_s: float = _p(1800.0, "shortest run before a job may be preempted")
    dynamic_min_wait_s: float = _p(120.0, "a job waits this long before it may preempt")
    dynamic_reserve_after_s: float = _p(
        float("inf"),
        "a blocked job gets a reservation (up to reserve_depth per cycle) only after "
        "waiting this long since submission (inf: never; the tune set's choice, "
        "docs/results.md)",
    )
    dynamic_tick_s: float = _p(300.0, "seconds between timer cycles (preemption, power)")
    dynamic_headroom_gpus: float = _p(16.0, "idle GPUs kept on for arrivals")
    dynamic_headroom_frac: float = _p(0.05, "more idle-on headroom as a share of GPUs in use")
    dynamic_park_after_s: float = _p(900.0, "an idle node is parked after this long")
    dynamic_energy_aware: bool = _p(True, "park idle nodes and wake them ahead of demand")
    dynamic_headroom_classes: tuple[str, ...] = _p(
        ("high",),
        "with a demand forecast: classes whose predicted arrivals get headroom of their own "
        "on top of the headroom for all arrivals",
    )
    dynamic_forecast_park_after_s: float = _p(
        300.0, "with a demand forecast: an idle node not needed by it is parked after this long"
    )
    dynamic_forecast_lookahead_s: float = _p(
        3600.0,
        "with a demand forecast: a node is not parked if the rise predicted this far "
        "ahead would need it",
    )

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def describe(cls) -> dict[str, tuple[Any, str]]:
        """name -> (default, meaning), for documentation and the admin UI."""
        return {f.name: (f.default, f.metadata.get("doc", "")) for f in fields(cls)}

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
        defaults: dict[str, Any] = {f.name: f.default for f in fields(self)}
        if name not in defaults:
            raise UnknownName("parameter", name, sorted(defaults))
        kind: Any = type(defaults[name])
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
        if isinstance(converted, float | int) and not isinstance(converted, bool) and converted < 0:
            raise InvalidParameter(f"parameter {name}: {value!r} must not be negative")
        return replace(self, **{name: converted})

    def qos_rank(self, qos: str) -> int:
        """0 for the highest class."""
        try:
            return self.qos_classes.index(qos)
        except ValueError:
            return len(self.qos_classes)
