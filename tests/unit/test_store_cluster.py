"""Cluster mode (GPUSCHED_STORE_CLUSTER): every shipped migration rewritten for a
ClickHouse cluster, each statement parsed by the embedded engine. Replication itself
(Keeper, several servers) cannot run here: what is checked is that the statements are
valid ClickHouse and have the shape the design asks for."""

from __future__ import annotations

import re

import pytest

from gpusched.store import Store, StoreSettings
from gpusched.store.cluster import database_ddl, for_cluster, insert_settings
from gpusched.store.connection import connect
from gpusched.store.errors import MigrationError, UnsupportedDsn
from gpusched.store.migrations import _LEDGER, load_migrations

CLUSTER = "gpusched_prod"


@pytest.fixture(scope="module")
def statements() -> list[str]:
    migrations = load_migrations(StoreSettings().migrations_dir)
    return [
        database_ddl("gpusched", CLUSTER),
        *for_cluster(_LEDGER, CLUSTER),
        *(s for m in migrations for s in m.statements(CLUSTER)),
    ]


def _formatted(store: Store, sql: str) -> str:
    """The statement as the engine's parser reads it, on one line (raises if invalid)."""
    return str(store.client.query("SELECT formatQuerySingleLine({q:String})",
                                  parameters={"q": sql}).result_rows[0][0])  # fmt: skip


def test_every_statement_parses(statements: list[str], store: Store) -> None:
    # the parser of the session's embedded store (one engine per process)
    parsed = [_formatted(store, s) for s in statements]
    assert len(parsed) == len(statements) > 40
    with pytest.raises(Exception, match="SYNTAX_ERROR"):
        _formatted(store, "CREATE TABLE x_local (a String) ENGINE = (")  # the check can fail


def test_tables_become_replicated_local_tables_behind_distributed_ones(
    statements: list[str],
) -> None:
    text = "\n".join(statements)
    assert "ENGINE = Replicated('/clickhouse/databases/gpusched', '{shard}', '{replica}')" in text
    assert f"ON CLUSTER '{CLUSTER}'" in statements[0]
    sharded = {"telemetry": "node_id", "job_events": "job_id",
               "sink_batches": "consumer_group", "schema_migrations": "version"}  # fmt: skip
    for table, key in sharded.items():
        local = next(
            s for s in statements if s.startswith(f"CREATE TABLE IF NOT EXISTS {table}_local")
        )
        assert re.search(r"ENGINE = Replicated\w*MergeTree", local), local
        distributed = (
            f"CREATE TABLE IF NOT EXISTS {table} AS {table}_local ENGINE = Distributed("
            f"'{CLUSTER}', currentDatabase(), '{table}_local', cityHash64({key}))"
        )
        assert distributed in text
    assert "ENGINE = ReplicatedReplacingMergeTree(planned_at)" in text  # version column kept
    assert "ENGINE = ReplicatedAggregatingMergeTree" in text  # gpu_hourly
    # the hourly view aggregates each shard's own rows into its own local table
    view = next(s for s in statements if "MATERIALIZED VIEW" in s)
    assert "TO gpu_hourly_local" in view
    assert "FROM telemetry_local" in view
    assert (
        "ALTER TABLE telemetry_local MODIFY SETTING replicated_deduplication_window = 10000" in text
    )
    assert "non_replicated" not in text
    added = [s for s in statements if "ADD COLUMN IF NOT EXISTS actor" in s]
    assert [s.split()[2] for s in added] == ["job_events_local", "job_events"]
    assert any(s.startswith("CREATE VIEW IF NOT EXISTS param_changes") for s in statements)


def test_a_statement_cluster_mode_cannot_rewrite_is_refused() -> None:
    with pytest.raises(MigrationError, match="cluster mode cannot rewrite"):
        for_cluster(
            "CREATE DICTIONARY d (k UInt64) PRIMARY KEY k SOURCE(NULL()) LAYOUT(FLAT())", "c"
        )
    with pytest.raises(MigrationError, match="no ORDER BY"):
        for_cluster("CREATE TABLE IF NOT EXISTS t (a String) ENGINE = MergeTree PRIMARY KEY a", "c")


def test_one_server_mode_is_unchanged_and_the_embedded_engine_has_no_cluster_mode() -> None:
    migrations = load_migrations(StoreSettings().migrations_dir)
    assert all("_local" not in s for m in migrations for s in m.statements())
    assert insert_settings("") == {}
    assert insert_settings(CLUSTER) == {"distributed_foreground_insert": 1}
    with pytest.raises(UnsupportedDsn, match="server DSN"):
        connect("chdb:///tmp/never", "gpusched", cluster=CLUSTER)
