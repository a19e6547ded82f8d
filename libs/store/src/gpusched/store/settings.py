"""Store settings: which ClickHouse to use."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from gpusched.contracts.settings import checkout_root

__all__ = ["StoreSettings", "checkout_root"]


def _default_dsn() -> str:
    return f"chdb://{checkout_root() / 'var' / 'clickhouse'}"


def _default_migrations() -> Path:
    return Path(str(resources.files("gpusched.store") / "schema"))


class StoreSettings(BaseSettings):
    """ClickHouse location. ``chdb:///dir`` is the embedded engine; ``http(s)://`` a server."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_STORE_", frozen=True, extra="ignore")

    dsn: str = Field(
        default_factory=_default_dsn,
        description="chdb:///<absolute dir> (embedded engine; default <checkout>/var/clickhouse) "
        "or http(s)://user:pw@host:8123 (a ClickHouse server)",
    )
    database: str = Field(default="gpusched", description="ClickHouse database of the tables")
    cluster: str = Field(
        default="",
        description="a ClickHouse cluster (remote_servers) to run on: a Replicated database, "
        "ReplicatedReplacingMergeTree <table>_local tables and Distributed <table> tables "
        "(a server DSN only; empty: one server or the embedded engine)",
    )
    sql_url: str = Field(
        default="http://127.0.0.1:18123",
        description="where other processes (`gpusched sql`, the forecaster) query an embedded "
        "store: the sink's read-only SQL endpoint",
    )

    @property
    def shown_dsn(self) -> str:
        """Where the store is, without user and password: for a log line or an error."""
        return self.dsn.rsplit("@", 1)[-1]

    migrations_dir: Path = Field(
        default_factory=_default_migrations,
        description="folder of versioned NNNN_name.sql migrations "
        "(default: the schema/ folder shipped in the gpusched.store package)",
    )
