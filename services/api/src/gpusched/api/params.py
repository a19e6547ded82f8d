"""The scheduling parameters as the API shows them: ``GET /params``.

Values are the defaults overlaid with the latest value of each parameter on the control
topic, as the store recorded it; a recorded value the core refuses (out of bounds, set
before bounds existed) is shown with the error and not as the value in force, which is
what the processor and the dispatcher do with it.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from gpusched.core import CoreError, Params
from gpusched.store import StoreSettings, read_query

__all__ = ["current_params"]

_LATEST_SQL = """
SELECT name, argMax(value, ts), argMax(set_by, ts), toString(max(ts))
FROM {db}.control_params FINAL GROUP BY name
"""


def _json(value: Any) -> Any:
    """JSON has no infinity: an unbounded bound or value is shown as the string 'inf'."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def current_params(store: StoreSettings) -> list[dict[str, Any]]:
    """Every parameter: value in force, default, unit, bounds, admin-only flag, doc, and
    who set it when (None: the default)."""
    rows = read_query(_LATEST_SQL.format(db=store.database), store).rows
    latest = {name: (value, by, at) for name, value, by, at in rows}
    params = Params()
    out = []
    for name, spec in Params.specs().items():
        entry = {k: _json(v) for k, v in asdict(spec).items()}
        entry.update(value=entry["default"], set_by=None, set_at=None, refused=None)
        if name in latest:
            value, by, at = latest[name]
            try:
                params = params.with_setting(name, value)
            except CoreError as exc:
                entry["refused"] = f"{value!r} ({by}, {at}): {exc}"
            else:
                entry.update(value=_json(getattr(params, name)), set_by=by, set_at=at)
        out.append(entry)
    return out
