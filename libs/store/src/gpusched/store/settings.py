"""Store settings: which ClickHouse to use."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["StoreSettings", "default_migrations_dir"]


def default_migrations_dir() -> Path:
    """infra/clickhouse/migrations of the checkout this package runs from."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "infra" / "clickhouse" / "migrations"
        if candidate.is_dir():
            return candidate
    return Path("infra/clickhouse/migrations")


class StoreSettings(BaseSettings):
    """ClickHouse location. ``chdb:///dir`` is the embedded engine; ``http(s)://`` a server."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_STORE_", frozen=True, extra="ignore")

    dsn: str = Field(
        default="chdb:///var/clickhouse",
        description="chdb:///<dir> (embedded, relative to the working dir) or http(s)://user:pw@host:port",
    )
    database: str = Field(default="gpusched", description="ClickHouse database of the tables")
    migrations_dir: Path = Field(
        default_factory=default_migrations_dir, description="folder of versioned *.sql migrations"
    )
