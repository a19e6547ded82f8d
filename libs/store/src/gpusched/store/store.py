"""The gpusched store: a migrated ClickHouse database that events are written into."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from clickhouse_connect.driver.client import Client
from pydantic import BaseModel

from gpusched.store.connection import connect
from gpusched.store.migrations import migrate
from gpusched.store.settings import StoreSettings
from gpusched.store.tables import table_for

__all__ = ["Store"]


class Store:
    """Writes events into their tables and runs SQL, on a migrated database."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    def open(cls, settings: StoreSettings | None = None) -> Store:
        """Connect as ``settings`` say and apply pending migrations."""
        settings = settings or StoreSettings()
        client = connect(settings.dsn, settings.database)
        migrate(client, settings.migrations_dir)
        return cls(client)

    def insert_events(self, events: Iterable[BaseModel]) -> dict[str, int]:
        """Insert events, one batch per table; return rows written per table."""
        by_model: dict[type[BaseModel], list[BaseModel]] = defaultdict(list)
        for event in events:
            by_model[type(event)].append(event)
        written: dict[str, int] = {}
        for model, batch in by_model.items():
            spec = table_for(model)
            rows = [row for event in batch for row in spec.rows(event)]
            if rows:
                self.client.insert(spec.name, rows, column_names=list(spec.columns))
            written[spec.name] = len(rows)
        return written

    def query(self, sql: str, parameters: dict[str, Any] | None = None) -> list[Sequence[Any]]:
        """Rows of a SELECT."""
        return list(self.client.query(sql, parameters=parameters).result_rows)
