"""The scheduling parameters as a governed resource: ``/params``.

``ParamLedger`` follows the control topic (each parameter's latest message, so the values
and the revision in force) and the control status topic (what the processor and the
dispatcher did with each revision, and their heartbeats). A change is checked here
(known name, type, bounds, the role a dangerous parameter needs, the revision it was made
against) and published as one new revision: one message per parameter, all with the same
revision and changeset, who asked, from where, the old value and the reason. The services
check the bounds again and report; the store keeps both for the audit trail
(``param_changes``), which is also where a revert finds a past revision's values.

One API process numbers revisions (under a lock, from the topic it has read to its end);
two APIs changing parameters at the same moment could both take the same number, and the
later message of each parameter would win.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from gpusched.contracts import ControlOutcome, ControlParameter, ControlStatus
from gpusched.core import CoreError, Params
from gpusched.store import StoreSettings, read_query

__all__ = [
    "ParamChange",
    "ParamLedger",
    "ParamRevert",
    "RefusedChange",
    "differs",
    "param_history",
    "refusal",
    "values_at",
]

Value = float | bool | str
_HISTORY_KEPT = 1000  # revisions whose per-service "applied at" the ledger remembers


class RefusedChange(Exception):
    """A change the API does not publish: ``status`` (403, 409, 422), the parameter at
    fault (or None), and why."""

    def __init__(self, status: int, name: str | None, message: str) -> None:
        super().__init__(message)
        self.status, self.name, self.message = status, name, message


def _json(value: Any) -> Any:
    """JSON has no infinity: an unbounded bound or value is shown as the string 'inf'."""
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, tuple):
        return [_json(v) for v in value]
    return value


def _text(value: Any) -> Value:
    """A parameter's value as the control topic carries it (a tuple as comma-separated)."""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return value  # type: ignore[no-any-return]


@dataclass
class ParamLedger:
    """What the control and control status topics say, folded as they arrive."""

    latest: dict[str, ControlParameter] = field(default_factory=dict)
    revision: int = 0
    in_force: dict[str, tuple[int, datetime]] = field(default_factory=dict)  # service ->
    applied_at: dict[int, dict[str, datetime]] = field(default_factory=dict)  # revision ->

    # -- the topics -----------------------------------------------------------------------
    def on_control(self, parameter: ControlParameter) -> None:
        self.latest[parameter.name] = parameter
        self.revision = max(self.revision, parameter.revision)

    def on_status(self, status: ControlStatus) -> None:
        held, _ = self.in_force.get(status.service, (0, status.ts))
        if status.outcome is ControlOutcome.IN_FORCE:
            held = status.revision
        elif status.outcome is ControlOutcome.APPLIED:
            held = max(held, status.revision)
            services = self.applied_at.setdefault(status.revision, {})
            first = services.get(status.service)
            services[status.service] = status.ts if first is None else min(first, status.ts)
            for old in sorted(self.applied_at)[:-_HISTORY_KEPT]:
                del self.applied_at[old]
        self.in_force[status.service] = (held, status.ts)

    # -- reading --------------------------------------------------------------------------
    def params(self) -> tuple[Params, dict[str, str]]:
        """The values in force, and why each recorded value that is not was refused."""
        params, refused = Params(), {}
        for p in sorted(self.latest.values(), key=lambda p: (p.revision, p.ts)):
            try:
                params = params.with_setting(p.name, p.value)
            except CoreError as exc:
                refused[p.name] = f"{p.value!r} ({p.set_by}, {p.ts:%Y-%m-%d %H:%M:%S}): {exc}"
        return params, refused

    def describe(self) -> dict[str, Any]:
        """The revision in force, when each service applied it, each service's latest
        report, and every parameter: value, default, unit, bounds, admin-only flag, doc,
        who set it when and in which revision (None: the default)."""
        params, refused = self.params()
        entries = []
        for name, spec in Params.specs().items():
            entry = {k: _json(v) for k, v in asdict(spec).items()}
            entry.update(value=_json(getattr(params, name)), refused=refused.get(name))
            p = self.latest.get(name)
            if p is not None and name not in refused:
                entry.update(set_by=p.set_by, set_at=p.ts.isoformat(), revision=p.revision)
            else:
                entry.update(set_by=None, set_at=None, revision=None)
            entries.append(entry)
        applied = self.applied_at.get(self.revision, {})
        return {
            "revision": self.revision,
            "applied_at": {s: at.isoformat() for s, at in sorted(applied.items())},
            "services": {
                s: {"revision": r, "reported_at": at.isoformat()}
                for s, (r, at) in sorted(self.in_force.items())
            },
            "params": entries,
        }

    # -- changing -------------------------------------------------------------------------
    def plan(
        self, changes: dict[str, Value], against: int, admin: bool
    ) -> list[tuple[str, Value, Value]]:
        """(name, old, new) of each change that alters a value, checked; ``RefusedChange``
        says what is wrong (403 for a dangerous parameter without admin, 409 when
        ``against`` is not the revision in force, 422 for a name, type or bound)."""
        if against != self.revision:
            raise RefusedChange(
                409,
                None,
                f"the parameters are at revision {self.revision}, not {against}: "
                "read them again and make the change against that revision",
            )
        specs = Params.specs()
        params, _ = self.params()
        planned = []
        for name, value in changes.items():
            if name not in specs:
                raise RefusedChange(422, name, f"unknown parameter; known: {', '.join(specs)}")
            if specs[name].dangerous and not admin:
                raise RefusedChange(
                    403, name, f"{name} is marked dangerous: only an admin may change it"
                )
            try:
                new = params.with_setting(name, value)
            except CoreError as exc:
                raise RefusedChange(422, name, str(exc)) from exc
            old, now = getattr(params, name), getattr(new, name)
            if old != now:
                planned.append((name, _text(old), _text(now)))
            params = new
        if not planned:
            raise RefusedChange(422, None, "the changes leave every value as it is")
        return planned

    def message(self, name: str, old: Value, new: Value, **who: Any) -> ControlParameter:
        """The control message of one parameter of the next revision."""
        return ControlParameter(
            name=name, value=new, old_value=old, revision=self.revision + 1, **who
        )


class ParamChange(BaseModel):
    """A change of scheduling parameters, made against the revision it was read at."""

    model_config = ConfigDict(extra="forbid")

    changes: dict[str, float | bool | str] = Field(
        min_length=1, description="parameter -> new value (a list as comma-separated text)"
    )
    reason: str = Field(min_length=1, max_length=2000, description="why (kept in the audit)")
    revision: int = Field(ge=0, description="the revision in force when the change was made")


class ParamRevert(BaseModel):
    """Put back the values of a past revision, as a new revision."""

    model_config = ConfigDict(extra="forbid")

    revision: int = Field(ge=0, description="the revision whose values come back (0: defaults)")
    reason: str | None = Field(default=None, max_length=2000)


def differs(current: Params, name: str, value: str) -> bool:
    """Whether setting ``name`` to ``value`` changes ``current`` (an invalid value: no)."""
    try:
        return bool(getattr(current.with_setting(name, value), name) != getattr(current, name))
    except CoreError:
        return False  # a value that is not valid now is not put back


def refusal(exc: RefusedChange, ledger: ParamLedger) -> HTTPException:
    """The HTTP answer to a refused change (409 with the values in force; 422 in
    FastAPI's shape, naming the parameter)."""
    if exc.status == 409:
        return HTTPException(
            409,
            {
                "message": exc.message,
                "revision": ledger.revision,
                "values": {p["name"]: p["value"] for p in ledger.describe()["params"]},
            },
        )
    if exc.status == 422:
        loc = ["body", "changes", exc.name] if exc.name else ["body", "changes"]
        return HTTPException(422, [{"loc": loc, "msg": exc.message, "type": "value_error"}])
    return HTTPException(exc.status, exc.message)


_VALUES_AT_SQL = """
SELECT name, argMax(value, (revision, ts)) FROM {db}.control_params FINAL
WHERE revision <= {revision:d} GROUP BY name
"""
_STORED_SQL = "SELECT max(revision) FROM {db}.control_params FINAL"


def values_at(revision: int, store: StoreSettings) -> dict[str, str] | None:
    """Every parameter's value at ``revision`` (the default where none was set by then),
    from the store; None when the store does not hold that revision (yet)."""
    db = store.database
    stored = read_query(_STORED_SQL.format(db=db), store).rows
    if not stored or stored[0][0] is None or int(stored[0][0]) < revision:
        return None
    rows = read_query(_VALUES_AT_SQL.format(db=db, revision=revision), store).rows
    set_then = {name: value for name, value in rows}
    return {
        name: set_then.get(name, str(_text(spec.default))) for name, spec in Params.specs().items()
    }


_HISTORY_SQL = """
SELECT revision, changeset, actor, role, source, parameter, old_value, new_value, reason,
       requested_at, outcome, error, applied_at, applied_by
FROM {db}.param_changes ORDER BY revision DESC, parameter LIMIT {limit:d}
"""


def param_history(limit: int, store: StoreSettings) -> list[dict[str, Any]]:
    """The audit trail, newest revision first: one entry per parameter changed."""
    answer = read_query(_HISTORY_SQL.format(db=store.database, limit=limit), store)
    return [dict(zip(answer.columns, row, strict=True)) for row in answer.rows]
