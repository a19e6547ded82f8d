"""Access control of the REST API, against the real service (`gpusched api`, the test
broker, an embedded store): every role x route, tenant binding, revocation, 404s."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from gpusched.contracts import ControlParameter, encode
from gpusched.contracts.topics import CONTROL
from gpusched.core import Params
from tests.pipeline import Pipeline, produce

QOS_FACTOR = Params().dynamic_qos_factor  # the default, the old value of the first change

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ROLES = ("viewer", "submitter", "operator", "admin")


def test_roles_routes_tenants_and_revocation(pipeline: Pipeline) -> None:
    p = pipeline
    p.start_sink()
    base = p.start_api()
    tokens = {
        "viewer": p.token("--role", "viewer", "--name", "v"),
        "submitter": p.token("--role", "submitter", "--tenant", "team-a", "--name", "s"),
        "operator": p.token("--role", "operator", "--name", "o"),
        "admin": p.token("--role", "admin", "--name", "a"),
    }
    other = p.token("--role", "submitter", "--tenant", "team-b", "--name", "s-b")

    def call(method: str, path: str, token: str | None, **kw: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.request(method, f"{base}{path}", headers=headers, timeout=30, **kw)  # type: ignore[arg-type]

    admin_job = call("POST", "/jobs", tokens["admin"], json={"gpus": 1, "tenant": "team-a"})
    assert admin_job.status_code == 201, admin_job.text
    job_id = admin_job.json()["job_id"]

    def routes() -> list[tuple[str, str, dict[str, object], str]]:
        """(method, path, request, lowest role allowed)"""
        submit = {"json": {"gpus": 1, "tenant": "team-a"}}
        stale_change = {"changes": {"dynamic_qos_factor": 20}, "reason": "x", "revision": 999}
        return [
            ("GET", "/jobs", {}, "viewer"),
            ("GET", "/nodes", {}, "viewer"),
            ("GET", "/params", {}, "viewer"),
            ("GET", f"/jobs/{job_id}", {}, "viewer"),
            ("POST", "/jobs", submit, "submitter"),
            ("DELETE", f"/jobs/{job_id}", {}, "submitter"),
            ("GET", "/params/history", {}, "viewer"),
            # against a revision that is not in force: allowed roles get 409, nothing changes
            ("PATCH", "/params", {"json": stale_change}, "operator"),
            ("POST", "/params/revert", {"json": {"revision": 999}}, "operator"),
        ]

    for method, path, kw, lowest in routes():
        missing = call(method, path, None, **kw)
        assert missing.status_code == 401, (method, path, missing.text)
        assert missing.headers["www-authenticate"] == "Bearer"
        assert call(method, path, "gst_nope_nope", **kw).status_code == 401
        for role in ROLES:
            response = call(method, path, tokens[role], **kw)
            allowed = ROLES.index(role) >= ROLES.index(lowest)
            if role == "operator" and path.startswith("/jobs") and method in ("POST", "DELETE"):
                allowed = False  # an operator token acts for no tenant
            if allowed:
                # the job may not be in the store yet: a read of it may say 404, not 401/403
                assert response.status_code in (200, 201, 202, 404, 409), (method, path, role)
            else:
                assert response.status_code == 403, (method, path, role, response.text)
                assert "role" in response.text or "tenant" in response.text

    # tenant binding: a submitter of team-b neither submits nor cancels for team-a
    refused = call("POST", "/jobs", other, json={"gpus": 1, "tenant": "team-a"})
    assert refused.status_code == 403
    assert "team-a" in refused.json()["detail"]
    assert call("DELETE", f"/jobs/{job_id}", other).status_code == 403
    assert call("POST", "/jobs", other, json={"gpus": 1, "tenant": "team-b"}).status_code == 201
    # an unknown job is 404, not "cancel requested"
    assert call("DELETE", "/jobs/no-such-job", tokens["admin"]).status_code == 404

    # revocation takes effect within seconds
    assert "revoked 's'" in p.run("token", "revoke", "s")
    deadline = time.monotonic() + 10
    while call("GET", "/jobs", tokens["submitter"]).status_code != 401:
        assert time.monotonic() < deadline, "a revoked token was still accepted after 10 s"
        time.sleep(0.5)
    assert call("GET", "/jobs", tokens["viewer"]).status_code == 200
    listed = p.run("token", "list", "--json", "--revoked")
    assert '"name":"s"' in listed.replace(" ", "")
    assert "secret_hash" not in listed


def test_params_show_bounds_and_what_is_in_force(pipeline: Pipeline) -> None:
    """GET /params: every parameter with its bounds; a value set on the control topic by
    another writer is in force, one outside its bounds is shown as refused (as the
    services refuse it)."""
    p = pipeline
    p.start_sink()
    produce(p.bootstrap, [
        (CONTROL.name(p.prefix), name.encode(), encode(ControlParameter(name=name, value=v)))
        for name, v in (("dynamic_qos_factor", 12.0), ("dynamic_tick_s", 1e9))
    ])  # fmt: skip
    base = p.start_api()
    token = p.token("--role", "viewer", "--name", "v")
    shown = httpx.get(f"{base}/params", headers={"Authorization": f"Bearer {token}"}).json()
    assert shown["revision"] == 0  # written without a revision
    by_name = {entry["name"]: entry for entry in shown["params"]}
    assert by_name["dynamic_qos_factor"]["value"] == 12.0
    assert by_name["dynamic_qos_factor"]["set_by"] == "admin"
    tick = by_name["dynamic_tick_s"]
    assert (tick["value"], tick["lo"], tick["hi"], tick["unit"]) == (300.0, 1.0, 3600.0, "s")
    assert "above its upper bound 3600 s" in tick["refused"]
    assert by_name["dynamic_reserve_after_s"]["value"] == "inf"
    assert by_name["qos_classes"]["dangerous"] is True


def test_parameter_changes_are_revisions_applied_and_audited(pipeline: Pipeline) -> None:
    """PATCH /params: role, reason, bounds and revision checked; each change a revision the
    processor applies and reports; revert; the audit trail with applied_at; the CLI."""
    p = pipeline
    p.start_sink()
    p.start("process")
    base = p.start_api()
    tokens = {
        role: p.token("--role", role, "--name", role[0]) for role in ("viewer", "operator", "admin")
    }

    def call(method: str, path: str, role: str, **kw: object) -> httpx.Response:
        headers = {"Authorization": f"Bearer {tokens[role]}"}
        return httpx.request(method, f"{base}{path}", headers=headers, timeout=30, **kw)  # type: ignore[arg-type]

    def change(role: str, revision: int, reason: str = "test", **changes: object) -> httpx.Response:
        body = {"changes": changes, "reason": reason, "revision": revision}
        return call("PATCH", "/params", role, json=body)

    assert call("GET", "/params", "viewer").json()["revision"] == 0
    assert change("viewer", 0, dynamic_qos_factor=20).status_code == 403
    no_reason = change("operator", 0, "", dynamic_qos_factor=20)
    assert no_reason.status_code == 422
    assert "reason" in no_reason.text
    # every bound of every parameter is enforced, naming the parameter and the bound
    for spec in Params.specs().values():
        for bound, outside, word in ((spec.lo, -1, "below"), (spec.hi, 1, "above")):
            if bound is None or math.isinf(bound):
                continue
            refused = change("admin", 0, **{spec.name: bound + outside * max(abs(bound), 1)})
            assert refused.status_code == 422, (spec.name, refused.text)
            (error,) = refused.json()["detail"]
            assert error["loc"] == ["body", "changes", spec.name]
            assert f"{word} its" in error["msg"]
            assert f"bound {bound:g}" in error["msg"]
    dangerous = change("operator", 0, dynamic_tick_s=60)
    assert dangerous.status_code == 403
    assert "dynamic_tick_s" in dangerous.text

    first = change("operator", 0, "more weight to classes", dynamic_qos_factor=20)
    assert first.status_code == 200, first.text
    assert first.json()["revision"] == 1
    assert first.json()["changes"] == {"dynamic_qos_factor": {"old": QOS_FACTOR, "new": 20.0}}
    stale = change("operator", 0, dynamic_qos_factor=25)
    assert stale.status_code == 409
    assert stale.json()["detail"]["revision"] == 1
    assert stale.json()["detail"]["values"]["dynamic_qos_factor"] == 20.0
    # the processor applies it and says so
    p.wait_for(
        "the processor to apply revision 1",
        lambda: "processor" in call("GET", "/params", "viewer").json()["applied_at"],
        timeout=60,
    )
    second = change("admin", 1, "faster ticks", dynamic_tick_s=60, dynamic_qos_factor=40)
    assert second.json()["revision"] == 2, second.text

    cli = {"GPUSCHED_TOKEN": tokens["operator"]}
    # a revert puts back revision 1's values (from the store) as revision 3; the operator
    # may not revert what only an admin may change (dynamic_tick_s)
    p.wait_for("revision 2 in the store", lambda: p.scalar(
        "SELECT max(revision) FROM control_params") == 2)  # fmt: skip
    refused = p.run_failing("params", "revert", "1", "--api", base, **cli)
    assert "refused (403)" in refused
    assert "dynamic_tick_s" in refused
    out = p.run("params", "revert", "1", "--api", base, GPUSCHED_TOKEN=tokens["admin"])
    assert "dynamic_qos_factor: 40.0 -> 20.0" in out
    assert "dynamic_tick_s: 60.0 -> 300.0" in out
    assert "revision 3 published" in out
    out = p.run(
        "params", "set", "dynamic_park_after_s=7200", "--reason", "park later", "--api", base, **cli
    )
    assert "revision 4 published" in out
    bad = p.run_failing(
        "params", "set", "dynamic_park_after_s=1", "--reason", "x", "--api", base, **cli
    )
    assert "below its lower bound 60 s" in bad
    shown = p.run("params", "show", "--api", base, **cli)
    assert "revision 4" in shown
    assert "7200" in shown

    # the audit trail: one row per parameter changed, with who, why, and when applied
    def audited() -> list[dict[str, object]]:
        rows = call("GET", "/params/history", "viewer").json()
        return rows if len(rows) == 6 and all(r["applied_at"] for r in rows) else []

    rows = p.wait_for("every change applied in the audit trail", audited, timeout=60)
    assert [(r["revision"], r["parameter"]) for r in rows] == [
        (4, "dynamic_park_after_s"),
        (3, "dynamic_qos_factor"),
        (3, "dynamic_tick_s"),
        (2, "dynamic_qos_factor"),
        (2, "dynamic_tick_s"),
        (1, "dynamic_qos_factor"),
    ]
    last = rows[-1]
    assert (last["actor"], last["role"], last["source"]) == ("o", "operator", "127.0.0.1")
    assert (last["old_value"], last["new_value"]) == (str(QOS_FACTOR), "20.0")
    assert (last["reason"], last["outcome"]) == ("more weight to classes", "applied")
    assert "processor" in last["applied_by"]
    assert rows[1]["reason"] == "revert to revision 1"
    history = p.run("params", "history", "--api", base, COLUMNS="200", **cli)
    assert "park later" in history
    assert "applied" in history
