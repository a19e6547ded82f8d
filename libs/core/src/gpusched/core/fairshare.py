"""Tenant usage with exponential decay, and the fair-share factor Slurm's multifactor uses."""

from __future__ import annotations

import math

__all__ = ["FairShare"]


class FairShare:
    """Decayed GPU-seconds per tenant; every tenant seen has an equal share."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.usage: dict[str, float] = {}
        self._total = 0.0
        self._at = 0.0

    def _decay(self, now: float) -> None:
        if now <= self._at:
            return
        factor = math.exp(-math.log(2) * (now - self._at) / self.half_life_s)
        for t in self.usage:
            self.usage[t] *= factor
        self._total *= factor
        self._at = now

    def see(self, tenant: str) -> None:
        self.usage.setdefault(tenant, 0.0)

    def charge(self, tenant: str, gpu_s: float, now: float) -> None:
        self._decay(now)
        self.usage[tenant] = self.usage.get(tenant, 0.0) + gpu_s
        self._total += gpu_s

    def usage_ratio(self, tenant: str) -> float:
        """Tenant's share of decayed usage over its fair share (1.0 = exactly fair)."""
        if self._total <= 0:
            return 0.0
        return (self.usage.get(tenant, 0.0) / self._total) * len(self.usage)

    def factor(self, tenant: str) -> float:
        """Slurm's classic fair-share factor 2^(-usage/share), in (0, 1]."""
        return float(2.0 ** (-self.usage_ratio(tenant)))
