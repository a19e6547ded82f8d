"""The store on the real ClickHouse engine (chDB): migrations, every table, the hourly view."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from gpusched.contracts import GpuTelemetrySample
from gpusched.store import (
    TABLES,
    MigrationError,
    Store,
    StoreSettings,
    UnsupportedDsn,
    applied_migrations,
    load_migrations,
    migrate,
)
from gpusched.store.connection import connect
from tests.builders import T0, every_event


def test_migrations_are_recorded_and_applied_once(store: Store) -> None:
    folder = StoreSettings().migrations_dir
    recorded = applied_migrations(store.client)
    assert sorted(recorded) == [m.version for m in load_migrations(folder)]
    assert migrate(store.client, folder) == []


def test_changed_migration_is_refused(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(StoreSettings().migrations_dir, folder)
    first = folder / "0001_event_tables.sql"
    first.write_text(first.read_text() + "\n-- edited after it was applied\n")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(store.client, folder)


def test_a_failing_migration_names_itself(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(StoreSettings().migrations_dir, folder)
    (folder / "0099_broken.sql").write_text("CREATE TABLE nope (x Nonsense) ENGINE = Memory;")
    with pytest.raises(MigrationError, match="0099_broken"):
        migrate(store.client, folder)
    assert 99 not in applied_migrations(store.client)


def test_every_table_round_trips_its_events(store: Store) -> None:
    events = every_event()
    written = store.insert_events(events)
    assert set(written) == {spec.name for spec in TABLES}
    for spec in TABLES:
        (count,) = store.query(f"SELECT count() FROM {spec.name}")[0]
        assert count == written[spec.name], spec.name
    sample = events[0]
    assert isinstance(sample, GpuTelemetrySample)
    (row,) = store.query(
        "SELECT gpu_uuid, node_id, utilization_pct, power_w, ts, job_id FROM telemetry"
    )
    assert row == ("GPU-0001", "n1", 87.5, 250.0, T0.replace(tzinfo=None), "j1")
    (job,) = store.query(
        "SELECT num_gpu, gpu_models, tenant, priority_class FROM job_events "
        "WHERE type = 'submitted'"
    )
    assert job == (8.0, ["V100"], "vc1", "high")
    (prio,) = store.query("SELECT components['aging'], pending_reason FROM priorities")
    assert prio == (0.5, "waiting for 8 x V100 on one node")
    assert store.query("SELECT yhat, upper FROM forecasts ORDER BY target_ts") == [
        (100.0, 120.0),
        (110.0, 140.0),
    ]
    assert store.query("SELECT value FROM control_params") == [("0.3",)]
    # the audit view joins the request and what the processor did with it
    (change,) = store.query(
        "SELECT revision, actor, role, parameter, old_value, new_value, reason, outcome, "
        "applied_at, applied_by FROM param_changes"
    )
    applied_at = (T0 + timedelta(seconds=1)).replace(tzinfo=None)
    assert change == (
        1, "ops", "operator", "dynamic.aging_weight", "0.5", "0.3", "age faster", "applied",
        applied_at, ["processor"],
    )  # fmt: skip


def test_replayed_rows_collapse_by_event_id(store: Store) -> None:
    events = every_event()
    store.insert_events(events)
    store.insert_events(events)
    (count,) = store.query("SELECT count() FROM telemetry FINAL")[0]
    assert count == 1


def test_hourly_view_aggregates_utilization_and_energy(store: Store) -> None:
    base = every_event()[0]
    assert isinstance(base, GpuTelemetrySample)
    samples = [
        base.model_copy(
            update={
                "event_id": f"s{i}",
                "ts": T0 + timedelta(minutes=i * 10),
                "utilization_pct": 50.0 + 10 * (i % 2),
                "power_w": 300.0,
                "interval_s": 600.0,
            }
        )
        for i in range(9)  # 6 in the first hour, 3 in the second
    ]
    store.insert_events(samples)
    rows = store.query(
        "SELECT hour, node_id, gpu_model, avgMerge(utilization), sum(energy_wh), sum(samples) "
        "FROM gpu_hourly GROUP BY hour, node_id, gpu_model ORDER BY hour"
    )
    hour = T0.replace(tzinfo=None)  # DateTime('UTC') comes back naive
    assert [(r[0], r[1], r[2], round(r[3], 3), r[4], r[5]) for r in rows] == [
        (hour, "n1", "V100", 55.0, 300.0, 6),  # utilization 50,60,50,60,50,60
        (hour + timedelta(hours=1), "n1", "V100", 53.333, 150.0, 3),  # 50,60,50
    ]


def test_unknown_dsn_scheme_is_refused() -> None:
    with pytest.raises(UnsupportedDsn, match="postgres"):
        connect("postgres://localhost/x", "gpusched")
